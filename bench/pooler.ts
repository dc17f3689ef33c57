// The pooler suite: what DB_POOLER costs. The service as shipped under POST /plants, straight on
// PostgreSQL, with DB_POOLER=true on PostgreSQL, and with DB_POOLER=true through a PgBouncer
// (transaction mode, stock settings) that the suite starts in front of the server; the variants
// alternate, round after round. CPU per create of the service, PostgreSQL and PgBouncer.
import { accessSync, chownSync, constants, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { runHttpLoad } from './http-load.js';
import { OptionsError } from './options.js';
import { type Child, spawnChild, stopChild } from './processes.js';
import { fixed, markdownTable, type SuiteReport, textTable } from './report.js';
import {
  checkpoint,
  measureLoad,
  plantBodies,
  type Session,
  say,
  startService,
} from './session.js';

/** Finds pgbouncer on PATH or where Debian puts it. */
function pgbouncerBinary(): string {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/sbin']) {
    const candidate = join(dir, 'pgbouncer');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {}
  }
  throw new OptionsError('the pooler suite needs pgbouncer (e.g. apt-get install pgbouncer)');
}

function userIds(user: string): { uid: number; gid: number } | undefined {
  try {
    const line = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .find((entry) => entry.startsWith(`${user}:`));
    if (!line) return undefined;
    const [, , uid, gid] = line.split(':');
    return { uid: Number(uid), gid: Number(gid) };
  } catch {
    return undefined;
  }
}

/**
 * PgBouncer with stock settings but transaction pooling, in front of the session's server;
 * resolves with it and the session's database URL through it.
 */
async function startPgBouncer(session: Session): Promise<{ child: Child; url: string }> {
  const server = new URL(session.options.databaseUrl);
  const dir = join(session.work, 'pgbouncer');
  mkdirSync(dir);
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const user = decodeURIComponent(server.username || 'postgres');
  const files = {
    users: join(dir, 'userlist.txt'),
    ini: join(dir, 'pgbouncer.ini'),
  };
  writeFileSync(
    files.users,
    `"${user}" "${decodeURIComponent(server.password).replaceAll('"', '""')}"\n`,
  );
  writeFileSync(
    files.ini,
    [
      '[databases]',
      `* = host=${server.hostname || '127.0.0.1'} port=${server.port || '5432'}`,
      '[pgbouncer]',
      'pool_mode = transaction',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${files.users}`,
      `logfile = ${join(dir, 'pgbouncer.log')}`,
      '',
    ].join('\n'),
  );
  // PgBouncer refuses to run as root: then it runs as postgres, which must own its files.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const ids = userIds('postgres');
    if (!ids) throw new OptionsError('the pooler suite runs as root and needs a postgres user');
    for (const path of [session.work, dir, files.users, files.ini]) {
      chownSync(path, ids.uid, ids.gid);
    }
  }
  const child = spawnChild(
    'pgbouncer',
    pgbouncerBinary(),
    asRoot ? ['-u', 'postgres', files.ini] : [files.ini],
    { cwd: dir, env: { PATH: process.env.PATH ?? '' }, stdio: 'ignore' },
  );
  // PgBouncer listens on loopback, wherever the server it fronts is.
  const pooled = new URL(session.databaseUrl);
  pooled.hostname = '127.0.0.1';
  pooled.port = String(port);
  const url = pooled.toString();
  for (const deadline = Date.now() + 20_000; ; ) {
    const client = new pg.Client({ connectionString: url });
    try {
      await client.connect();
      return { child, url };
    } catch (error) {
      if (child.exit || Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      await client.end().catch(() => {});
    }
  }
}

interface Variant {
  name: string;
  through: 'PostgreSQL' | 'PgBouncer';
  env: (pooled: string) => Record<string, string>;
}

const VARIANTS: Variant[] = [
  { name: 'direct', through: 'PostgreSQL', env: () => ({}) },
  { name: 'DB_POOLER=true', through: 'PostgreSQL', env: () => ({ DB_POOLER: 'true' }) },
  {
    name: 'DB_POOLER=true',
    through: 'PgBouncer',
    env: (pooled) => ({ DATABASE_URL: pooled, DB_POOLER: 'true' }),
  },
];

/** The sums over the rounds of one variant at one level. */
interface Totals {
  variant: Variant;
  connections: number;
  creates: number;
  errors: number;
  seconds: number;
  p50Ms: number[];
  p99Ms: number[];
  /** CPU seconds. */
  service: number;
  postgres: number | undefined;
  pgbouncer: number;
}

export async function poolerSuite(session: Session): Promise<SuiteReport> {
  const { options } = session;
  const bouncer = await startPgBouncer(session);
  const nextBody = plantBodies();
  const totals: Totals[] = [];
  try {
    for (let round = 1; round <= options.rounds; round++) {
      for (const connections of options.connections) {
        for (const variant of VARIANTS) {
          if (session.signal.aborted) throw new Error('interrupted');
          const service = await startService(
            session,
            `${variant.name} via ${variant.through}`,
            variant.env(bouncer.url),
          );
          try {
            const load = {
              baseUrl: service.baseUrl,
              connections,
              token: session.token,
              nextBody,
              signal: session.signal,
              rate: options.rate,
            };
            if (options.warmupSeconds > 0) {
              await runHttpLoad({ ...load, durationSeconds: options.warmupSeconds });
            }
            await checkpoint(session);
            const { result, seconds, cpu, others } = await measureLoad(
              session,
              service.child.pid,
              { pgbouncer: bouncer.child.pid },
              () => runHttpLoad({ ...load, durationSeconds: options.durationSeconds }),
            );
            let total = totals.find((t) => t.variant === variant && t.connections === connections);
            if (!total) {
              total = {
                variant,
                connections,
                creates: 0,
                errors: 0,
                seconds: 0,
                p50Ms: [],
                p99Ms: [],
                service: 0,
                postgres: 0,
                pgbouncer: 0,
              };
              totals.push(total);
            }
            total.creates += result.succeeded;
            total.errors += result.errors;
            total.seconds += seconds;
            if (result.p50Ms !== null) total.p50Ms.push(result.p50Ms);
            if (result.p99Ms !== null) total.p99Ms.push(result.p99Ms);
            total.service += (cpu.server ?? 0) * seconds;
            total.postgres =
              cpu.postgres === undefined || total.postgres === undefined
                ? undefined
                : total.postgres + cpu.postgres * seconds;
            total.pgbouncer += (others.pgbouncer ?? 0) * seconds;
            say(
              `round ${round}, ${connections} connections, ${variant.name} via ${variant.through}: ${result.throughput.toFixed(0)} creates/s, ${result.errors} errors`,
            );
          } finally {
            await service.stop();
          }
        }
      }
    }
  } finally {
    await stopChild(bouncer.child);
  }

  const mean = (values: number[]) =>
    values.length === 0 ? null : values.reduce((sum, value) => sum + value, 0) / values.length;
  const perCreate = (total: Totals, cpuSeconds: number | undefined) =>
    cpuSeconds === undefined || total.creates === 0 ? null : (cpuSeconds * 1e6) / total.creates;
  const header = [
    'the service',
    'through',
    'connections',
    'creates/s',
    'p50 ms',
    'p99 ms',
    'errors',
    'service µs per create',
    'PostgreSQL µs',
    'PgBouncer µs',
  ];
  const rows = totals.map((total) => [
    total.variant.name,
    total.variant.through,
    String(total.connections),
    fixed(total.creates / total.seconds, 0),
    fixed(mean(total.p50Ms), 2),
    fixed(mean(total.p99Ms), 2),
    String(total.errors),
    fixed(perCreate(total, total.service), 1),
    fixed(perCreate(total, total.postgres), 1),
    total.variant.through === 'PgBouncer' ? fixed(perCreate(total, total.pgbouncer), 1) : '-',
  ]);
  say(`\n${textTable(header, rows, 2)}`);
  return {
    title: 'The cost of DB_POOLER',
    body: `The service as shipped (\`node dist/server.js\`) under POST /plants (autocannon), each variant started afresh for each round and level, the variants alternated. Throughput over all rounds; p50 and p99 the mean of the rounds'; CPU is user + system time of each process over the measured seconds, per acknowledged create.\n\n${markdownTable(header, rows, 2)}\n\n## Notes\n\n${[...session.notes].map((note) => `- ${note}`).join('\n')}`,
    settings: {
      rounds: options.rounds,
      connections: options.connections.join(', '),
      'duration per run (s)': options.durationSeconds,
      'warm-up per run (s)': options.warmupSeconds,
      'requests per second': options.rate ?? 'as many as answered',
      pgbouncer: 'transaction pooling, stock settings otherwise',
    },
    failed: totals.some((total) => total.errors > 0),
  };
}
