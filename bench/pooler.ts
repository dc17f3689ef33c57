// `npm run bench:pooler`: what DB_POOLER costs, in one run, on a database of its own on the
// PostgreSQL at BENCH_DATABASE_URL, with a PgBouncer (transaction mode, stock settings) that it
// starts in front of that server. Two parts:
//
// - the database path alone, in this process: the service's coalescing repository over each way
//   of talking to PostgreSQL, creating plants from BENCH_POOLER_CONCURRENCY callers at once;
// - the service as shipped (`node dist/server.js`), straight on PostgreSQL and with DB_POOLER
//   through PgBouncer, under POST /plants from 64 HTTP connections.
//
// Each reports creates per second, latency, and CPU microseconds per create in each process
// (this one or the service, PostgreSQL's backends of the database, PgBouncer), which hold
// still on a shared machine where throughput does not. Writes bench/results/pooler.{json,md}.
import { randomBytes } from 'node:crypto';
import {
  accessSync,
  chownSync,
  closeSync,
  constants,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import type * as ClientModule from '../src/db/client.js';
import type * as PostgresModule from '../src/db/postgres.js';
import type * as RepositoryModule from '../src/plants/repository.js';
import { cleanUpOnExit } from './cleanup.js';
import { commandLine, gitRevision, packageVersion } from './facts.js';
import { runHttpLoad } from './http-load.js';
import { OptionsError, positiveInteger, redactUrl, withDatabase } from './options.js';
import { distFolder, projectRoot, resultsFolder } from './paths.js';
import {
  type Child,
  readProcessCpuSeconds,
  spawnChild,
  stopChild,
  waitForListening,
} from './processes.js';
import { textTable } from './report.js';

// The very code the service runs, from dist/; the types keep this file checked against src/.
const fromDist = (file: string) => import(pathToFileURL(join(distFolder, file)).href);
const { migratePostgres, openPostgres, poolerSafeClient } = (await fromDist(
  'db/postgres.js',
)) as typeof PostgresModule;
const { createPlantRepository } = (await fromDist(
  'plants/repository.js',
)) as typeof RepositoryModule;

const say = (line: string) => process.stdout.write(`${line}\n`);
const { scratch, abort, runAndExit } = cleanUpOnExit('bench:pooler', say);

interface Options {
  databaseUrl: string;
  concurrency: number[];
  durationSeconds: number;
  warmupSeconds: number;
  rounds: number;
  httpConnections: number;
}

function readOptions(env: NodeJS.ProcessEnv): Options {
  const get = (name: string, fallback: string) => env[name]?.trim() || fallback;
  const databaseUrl = get('BENCH_DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/postgres');
  if (!/^postgres(ql)?:\/\//.test(databaseUrl) || !URL.canParse(databaseUrl)) {
    throw new OptionsError('BENCH_DATABASE_URL must be a postgres:// URL');
  }
  return {
    databaseUrl,
    concurrency: get('BENCH_POOLER_CONCURRENCY', '1,64')
      .split(',')
      .map((item) => positiveInteger('BENCH_POOLER_CONCURRENCY', item)),
    durationSeconds: positiveInteger('BENCH_DURATION_SECONDS', get('BENCH_DURATION_SECONDS', '5')),
    warmupSeconds: positiveInteger('BENCH_WARMUP_SECONDS', get('BENCH_WARMUP_SECONDS', '2'), 0),
    rounds: positiveInteger('BENCH_ROUNDS', get('BENCH_ROUNDS', '2')),
    httpConnections: positiveInteger('BENCH_CONNECTIONS', get('BENCH_CONNECTIONS', '64')),
  };
}

// ---- PgBouncer ----

/** Finds pgbouncer on PATH or where Debian puts it. */
function pgbouncerBinary(): string {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/sbin']) {
    const candidate = join(dir, 'pgbouncer');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {}
  }
  throw new OptionsError('bench:pooler needs pgbouncer (e.g. apt-get install pgbouncer)');
}

function userIds(user: string): { uid: number; gid: number } | undefined {
  try {
    const passwd = readFileSync('/etc/passwd', 'utf8');
    const line = passwd.split('\n').find((entry) => entry.startsWith(`${user}:`));
    if (!line) return undefined;
    const [, , uid, gid] = line.split(':');
    return { uid: Number(uid), gid: Number(gid) };
  } catch {
    return undefined;
  }
}

/** PgBouncer with stock settings but transaction pooling, in front of `serverUrl`'s server. */
async function startPgBouncer(
  serverUrl: string,
  work: string,
): Promise<{ child: Child; port: number }> {
  const server = new URL(serverUrl);
  const dir = join(work, 'pgbouncer');
  mkdirSync(dir);
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const user = decodeURIComponent(server.username || 'postgres');
  writeFileSync(
    join(dir, 'userlist.txt'),
    `"${user}" "${decodeURIComponent(server.password).replaceAll('"', '""')}"\n`,
  );
  writeFileSync(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname || '127.0.0.1'} port=${server.port || '5432'}`,
      '[pgbouncer]',
      'pool_mode = transaction',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      `logfile = ${join(dir, 'pgbouncer.log')}`,
      '',
    ].join('\n'),
  );
  // PgBouncer refuses to run as root: then it runs as postgres, which must own its files.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const ids = userIds('postgres');
    if (!ids) throw new OptionsError('bench:pooler runs as root and needs a postgres user');
    for (const path of [work, dir, join(dir, 'userlist.txt'), join(dir, 'pgbouncer.ini')]) {
      chownSync(path, ids.uid, ids.gid);
    }
  }
  const args = asRoot
    ? ['-u', 'postgres', join(dir, 'pgbouncer.ini')]
    : [join(dir, 'pgbouncer.ini')];
  const child = spawnChild('pgbouncer', pgbouncerBinary(), args, {
    cwd: dir,
    env: { PATH: process.env.PATH ?? '' },
    stdio: 'ignore',
  });
  // PgBouncer listens on loopback, wherever the server it fronts is.
  const url = new URL(serverUrl);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  for (const deadline = Date.now() + 20_000; ; ) {
    const client = new pg.Client({ connectionString: url.toString() });
    try {
      await client.connect();
      return { child, port };
    } catch (error) {
      if (child.exit || Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      await client.end().catch(() => {});
    }
  }
}

// ---- CPU of the database side ----

function cpuOf(pids: Iterable<number>): Map<number, number> {
  const seconds = new Map<number, number>();
  for (const pid of pids) {
    const cpu = readProcessCpuSeconds(pid);
    if (cpu !== undefined) seconds.set(pid, cpu);
  }
  return seconds;
}

/** CPU seconds of PostgreSQL's backends of `database` and of PgBouncer, to compare later. */
async function databaseCpu(admin: pg.Client, database: string, bouncer: Child) {
  const { rows } = await admin.query<{ pid: number }>(
    `select pid from pg_stat_activity where datname = $1 and backend_type = 'client backend'`,
    [database],
  );
  return {
    backends: cpuOf(rows.map(({ pid }) => pid)),
    bouncer: readProcessCpuSeconds(bouncer.pid) ?? 0,
  };
}

async function databaseCpuSince(
  admin: pg.Client,
  database: string,
  bouncer: Child,
  before: Awaited<ReturnType<typeof databaseCpu>>,
) {
  const after = await databaseCpu(admin, database, bouncer);
  let backends = 0;
  for (const [pid, seconds] of after.backends)
    backends += seconds - (before.backends.get(pid) ?? 0);
  return { backends, bouncer: after.bouncer - before.bouncer };
}

// ---- the database path alone ----

type Database = ClientModule.Database;

interface PathVariant {
  name: string;
  through: 'PostgreSQL' | 'PgBouncer';
  open(url: string): { db: Database; close(): Promise<void> };
}

/** The service's pool settings (DB_POOL_MAX 10, DB_STATEMENT_TIMEOUT_MS 5000). */
const poolSettings = { max: 10, connectionTimeoutMillis: 5000, query_timeout: 6000 };

/** Only drops statement names: bounded by the client-side timer alone (and a role setting). */
class UnnamedStatementsClient extends pg.Client {
  // biome-ignore lint/suspicious/noExplicitAny: the overloads of pg's Client.query
  override query(config: any, values?: any, callback?: any): any {
    if (config && typeof config === 'object' && !config.submit && config.name) {
      const { name: _, ...unnamed } = config;
      return super.query(unnamed, values, callback);
    }
    return super.query(config, values, callback);
  }
}

function poolVariant(pool: pg.Pool) {
  return { db: drizzle({ client: pool }) as unknown as Database, close: () => pool.end() };
}

const service = (pooler: boolean) => (url: string) =>
  openPostgres({
    url,
    pooler,
    poolMax: 10,
    connectTimeoutMs: 5000,
    statementTimeoutMs: 5000,
    onIdleError: () => {},
  });

const pathVariants: PathVariant[] = [
  { name: 'direct (named, startup timeout)', through: 'PostgreSQL', open: service(false) },
  { name: 'DB_POOLER (unnamed, SET LOCAL, pipelined)', through: 'PostgreSQL', open: service(true) },
  { name: 'DB_POOLER (unnamed, SET LOCAL, pipelined)', through: 'PgBouncer', open: service(true) },
  {
    name: 'alternative: SET LOCAL, not pipelined',
    through: 'PgBouncer',
    open: (url) =>
      poolVariant(
        new pg.Pool({ connectionString: url, ...poolSettings, Client: poolerSafeClient(5000) }),
      ),
  },
  {
    name: 'alternative: unnamed, client timer only',
    through: 'PgBouncer',
    open: (url) =>
      poolVariant(
        new pg.Pool({ connectionString: url, ...poolSettings, Client: UnnamedStatementsClient }),
      ),
  },
];

interface Sample {
  creates: number;
  errors: number;
  seconds: number;
  /** Every create's latency (database path), or autocannon's percentiles (service). */
  latenciesMs: number[];
  percentilesMs?: { p50: number | null; p99: number | null };
  ownCpu: number;
  backendsCpu: number;
  bouncerCpu: number;
}

let nextId = BigInt.asUintN(60, randomBytes(8).readBigUInt64BE());

async function createFor(
  repository: RepositoryModule.PlantRepository,
  concurrency: number,
  seconds: number,
  latencies?: number[],
): Promise<{ creates: number; errors: number }> {
  const until = performance.now() + seconds * 1000;
  let creates = 0;
  let errors = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until && !abort.signal.aborted) {
        const started = performance.now();
        try {
          await repository.createPlant({ id: nextId++, name: 'Monstera deliciosa', tag: 'aroid' });
          creates++;
          latencies?.push(performance.now() - started);
        } catch {
          errors++;
        }
      }
    }),
  );
  return { creates, errors };
}

// ---- the service as shipped ----

interface ServiceTarget {
  name: string;
  through: 'PostgreSQL' | 'PgBouncer';
  env: (direct: string, pooled: string) => Record<string, string>;
}

const serviceTargets: ServiceTarget[] = [
  { name: 'service', through: 'PostgreSQL', env: (direct) => ({ DATABASE_URL: direct }) },
  {
    name: 'service, DB_POOLER=true',
    through: 'PostgreSQL',
    env: (direct) => ({ DATABASE_URL: direct, DB_POOLER: 'true' }),
  },
  {
    name: 'service, DB_POOLER=true',
    through: 'PgBouncer',
    env: (_, pooled) => ({ DATABASE_URL: pooled, DB_POOLER: 'true' }),
  },
];

// ---- the run ----

interface Row {
  part: 'database path' | 'service';
  variant: string;
  through: string;
  concurrency: number;
  samples: Sample[];
}

function summary(row: Row) {
  const total = (pick: (sample: Sample) => number) =>
    row.samples.reduce((sum, sample) => sum + pick(sample), 0);
  const creates = total((s) => s.creates);
  const seconds = total((s) => s.seconds);
  const latencies = row.samples.flatMap((s) => s.latenciesMs).sort((a, b) => a - b);
  const measured = row.samples.flatMap((s) => (s.percentilesMs ? [s.percentilesMs] : []));
  const mean = (values: (number | null)[]) =>
    values.length === 0
      ? null
      : values.reduce<number>((sum, v) => sum + (v ?? Number.NaN), 0) / values.length;
  const quantile = (q: number) => {
    if (measured.length > 0) return mean(measured.map((m) => (q === 0.5 ? m.p50 : m.p99)));
    return latencies.length === 0 ? null : (latencies[Math.ceil(q * latencies.length) - 1] ?? null);
  };
  const perCreate = (cpu: number) => (creates === 0 ? null : (cpu * 1e6) / creates);
  return {
    part: row.part,
    variant: row.variant,
    through: row.through,
    concurrency: row.concurrency,
    createsPerSecond: creates / seconds,
    p50Ms: quantile(0.5),
    p99Ms: quantile(0.99),
    errors: total((s) => s.errors),
    cpuMicrosPerCreate: {
      process: perCreate(total((s) => s.ownCpu)),
      postgres: perCreate(total((s) => s.backendsCpu)),
      pgbouncer: perCreate(total((s) => s.bouncerCpu)),
    },
  };
}

async function bench(options: Options): Promise<number> {
  const admin = new pg.Client({ connectionString: options.databaseUrl });
  await admin.connect();
  try {
    const database = `plant_store_pooler_${randomBytes(4).toString('hex')}`;
    await admin.query(`create database ${database}`);
    scratch.adminUrl = options.databaseUrl;
    scratch.database = database;
    const work = mkdtempSync(join(tmpdir(), 'plant-store-pooler-'));
    scratch.workFolder = work;
    const direct = withDatabase(options.databaseUrl, database);
    await migratePostgres(direct, 5000);
    const bouncer = await startPgBouncer(options.databaseUrl, work);
    const pooledUrl = new URL(direct);
    pooledUrl.hostname = '127.0.0.1';
    pooledUrl.port = String(bouncer.port);
    const pooled = pooledUrl.toString();

    const rows: Row[] = [];
    const rowFor = (part: Row['part'], variant: string, through: string, concurrency: number) => {
      let row = rows.find(
        (r) =>
          r.part === part &&
          r.variant === variant &&
          r.through === through &&
          r.concurrency === concurrency,
      );
      if (!row) {
        row = { part, variant, through, concurrency, samples: [] };
        rows.push(row);
      }
      return row;
    };

    for (let round = 1; round <= options.rounds && !abort.signal.aborted; round++) {
      for (const concurrency of options.concurrency) {
        for (const variant of pathVariants) {
          const opened = variant.open(variant.through === 'PgBouncer' ? pooled : direct);
          try {
            const queue = { maxBatchSize: 500, maxConcurrentBatches: 4, maxQueued: 10_000 };
            const repository = createPlantRepository(opened.db, {
              textAsBytes: false,
              writes: queue,
              reads: queue,
            });
            await createFor(repository, concurrency, options.warmupSeconds);
            await admin.query('checkpoint').catch(() => {});
            const before = await databaseCpu(admin, database, bouncer.child);
            const own = process.cpuUsage();
            const started = performance.now();
            const latenciesMs: number[] = [];
            const { creates, errors } = await createFor(
              repository,
              concurrency,
              options.durationSeconds,
              latenciesMs,
            );
            const seconds = (performance.now() - started) / 1000;
            const ownUsage = process.cpuUsage(own);
            const database_ = await databaseCpuSince(admin, database, bouncer.child, before);
            rowFor('database path', variant.name, variant.through, concurrency).samples.push({
              creates,
              errors,
              seconds,
              latenciesMs,
              ownCpu: (ownUsage.user + ownUsage.system) / 1e6,
              backendsCpu: database_.backends,
              bouncerCpu: database_.bouncer,
            });
            say(
              `round ${round}, ${concurrency} callers, ${variant.name} via ${variant.through}: ${Math.round(creates / seconds)} creates/s, ${errors} errors`,
            );
          } finally {
            await opened.close();
          }
        }
      }

      for (const target of serviceTargets) {
        const sample = await measureService(
          options,
          target,
          direct,
          pooled,
          work,
          admin,
          database,
          bouncer.child,
        );
        rowFor('service', target.name, target.through, options.httpConnections).samples.push(
          sample,
        );
        say(
          `round ${round}, ${options.httpConnections} connections, ${target.name} via ${target.through}: ${Math.round(sample.creates / sample.seconds)} creates/s, ${sample.errors} errors`,
        );
      }
    }
    await stopChild(bouncer.child);
    writeReport(options, rows.map(summary));
    return 0;
  } finally {
    await admin.end().catch(() => {});
  }
}

async function measureService(
  options: Options,
  target: ServiceTarget,
  direct: string,
  pooled: string,
  work: string,
  admin: pg.Client,
  database: string,
  bouncer: Child,
): Promise<Sample> {
  const logFile = join(work, 'service.log');
  const errorFile = join(work, 'service.stderr');
  const stdout = openSync(logFile, 'w');
  const stderr = openSync(errorFile, 'w');
  const token = randomBytes(16).toString('hex');
  let child: Child;
  try {
    child = spawnChild(target.name, process.execPath, [join(distFolder, 'server.js')], {
      cwd: projectRoot,
      env: {
        PATH: process.env.PATH ?? '',
        API_TOKENS: token,
        HOST: '127.0.0.1',
        PORT: '0',
        SHUTDOWN_DELAY_MS: '0',
        ...target.env(direct, pooled),
      },
      stdio: ['ignore', stdout, stderr],
    });
  } finally {
    closeSync(stdout);
    closeSync(stderr);
  }
  try {
    const baseUrl = await waitForListening(child, logFile, errorFile, {
      timeoutMs: 30_000,
      signal: abort.signal,
    });
    const nextBody = () => `{"id":${nextId++},"name":"Monstera deliciosa","tag":"aroid"}`;
    const load = {
      baseUrl,
      connections: options.httpConnections,
      token,
      nextBody,
      signal: abort.signal,
    };
    await runHttpLoad({ ...load, durationSeconds: options.warmupSeconds || 1 });
    await admin.query('checkpoint').catch(() => {});
    const before = await databaseCpu(admin, database, bouncer);
    const serviceBefore = readProcessCpuSeconds(child.pid) ?? 0;
    const result = await runHttpLoad({ ...load, durationSeconds: options.durationSeconds });
    const serviceCpu = (readProcessCpuSeconds(child.pid) ?? 0) - serviceBefore;
    const databaseSide = await databaseCpuSince(admin, database, bouncer, before);
    return {
      creates: result.succeeded,
      errors: result.errors,
      seconds: result.durationSeconds,
      latenciesMs: [],
      percentilesMs: { p50: result.p50Ms, p99: result.p99Ms },
      ownCpu: serviceCpu,
      backendsCpu: databaseSide.backends,
      bouncerCpu: databaseSide.bouncer,
    };
  } finally {
    await stopChild(child);
  }
}

function writeReport(options: Options, results: ReturnType<typeof summary>[]): void {
  const fixed = (value: number | null, digits = 0) =>
    value === null ? '-' : value.toFixed(digits);
  const header = [
    'part',
    'variant',
    'through',
    'callers',
    'creates/s',
    'p50 ms',
    'p99 ms',
    'errors',
    'µs/create process',
    'µs PostgreSQL',
    'µs PgBouncer',
  ];
  const table = textTable(
    header,
    results.map((r) => [
      r.part,
      r.variant,
      r.through,
      String(r.concurrency),
      fixed(r.createsPerSecond),
      fixed(r.p50Ms, 2),
      fixed(r.p99Ms, 2),
      String(r.errors),
      fixed(r.cpuMicrosPerCreate.process, 1),
      fixed(r.cpuMicrosPerCreate.postgres, 1),
      r.through === 'PgBouncer' ? fixed(r.cpuMicrosPerCreate.pgbouncer, 1) : '-',
    ]),
    3,
  );
  say(`\n${table}`);
  const command = commandLine('BENCH_', 'bench:pooler', 'pooler.js');
  const facts = {
    date: new Date().toISOString(),
    command,
    revision: gitRevision(),
    node: process.version,
    pg: packageVersion('pg'),
    server: redactUrl(options.databaseUrl),
    rounds: options.rounds,
    durationSeconds: options.durationSeconds,
  };
  mkdirSync(resultsFolder, { recursive: true });
  writeFileSync(
    join(resultsFolder, 'pooler.json'),
    `${JSON.stringify({ ...facts, results }, null, 2)}\n`,
  );
  writeFileSync(
    join(resultsFolder, 'pooler.md'),
    [
      '# The cost of DB_POOLER',
      '',
      `\`${command}\`, ${facts.date}, revision ${facts.revision}, Node ${facts.node}, pg ${facts.pg}.`,
      `${options.rounds} rounds of ${options.durationSeconds} s per variant, alternated; CPU is user + system time of each process over the measured seconds, per acknowledged create.`,
      '"database path": the repository in the harness process, its callers creating one plant after another.',
      `"service": node dist/server.js under POST /plants from ${options.httpConnections} HTTP connections (autocannon); "process" is the service's CPU.`,
      '',
      '```',
      table,
      '```',
      '',
    ].join('\n'),
  );
  say(`wrote ${join('bench', 'results', 'pooler.md')}`);
}

await runAndExit(() => readOptions(process.env), bench);
