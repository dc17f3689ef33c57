// `npm run bench -- [suite]`: creates a database of its own on the PostgreSQL at
// BENCH_DATABASE_URL (dropped however the run ends), runs the suite named by the first argument
// or BENCH_SUITE, and writes its report to BENCH_RESULTS_DIR (bench/results):
// - targets (the default): creates, reads and deletes of the service against bare Fastify, with
//   and without webhook deliveries, at each concurrency level, and of another build of the
//   service where BENCH_BEFORE_BUILD names one (latest.md);
// - soak: minutes of mixed load, the service's memory over them (soak.md);
// - replicas: reads by id on a primary and two streaming replicas the suite makes itself, on
//   PostgreSQL servers of its own rather than BENCH_DATABASE_URL's (replicas.md).
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import {
  openBeforeSession,
  openSession,
  projectRoot,
  running,
  type Session,
  say,
} from './harness.js';
import { type BenchOptions, buildOf, OptionsError, readOptions, type Suite } from './options.js';
import { replicasSuite } from './replicas.js';
import { soakSuite } from './soak.js';
import { targetsSuite } from './targets.js';
import { createTopology, destroyTopology, type Topology } from './topology.js';

const abort = new AbortController();
let session: Session | undefined;
let topology: Topology | undefined;

const RESULTS_FILES: Record<Suite, string> = {
  targets: 'latest.md',
  soak: 'soak.md',
  replicas: 'replicas.md',
};

async function cleanUp(options: BenchOptions): Promise<void> {
  for (const child of running) child.kill('SIGTERM');
  await session?.admin.end().catch(() => {});
  if (session) rmSync(session.work, { recursive: true, force: true });
  // The suite's own servers go whole, with their databases.
  if (topology) return destroyTopology(topology);
  if (!session) return;
  const admin = new pg.Client({ connectionString: options.databaseUrl });
  await admin.connect();
  for (const { database } of [session, ...(session.before ? [session.before] : [])]) {
    await admin.query(`drop database if exists ${database} with (force)`);
    say(`dropped database ${database}`);
  }
  await admin.end();
}

/** Migrates the session's database with its own build's dist/migrate.js. */
function migrate(built: Session) {
  say(`created database ${built.database}; migrating it with ${built.root}`);
  execFileSync(process.execPath, [join(built.root, 'dist', 'migrate.js')], {
    env: { PATH: process.env.PATH ?? '', DATABASE_URL: built.databaseUrl, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

const revisionOf = (root: string) =>
  execFileSync('git', ['describe', '--always', '--dirty'], { cwd: root }).toString().trim();

/** The command as typed: the BENCH_* variables set (passwords hidden), then npm's or node's. */
function commandLine(args: string[]): string {
  const quote = (value: string) => (/^[\w@%+=:,./-]+$/.test(value) ? value : `'${value}'`);
  const variables = Object.keys(process.env)
    .filter((name) => name.startsWith('BENCH_'))
    .sort()
    .map((name) => `${name}=${quote((process.env[name] ?? '').replace(/:[^:@/]+@/, ':***@'))}`);
  const command =
    process.env.npm_lifecycle_event === 'bench'
      ? `npm run bench${args.length > 0 ? ' --' : ''}`
      : 'node dist-bench/bench/run.js';
  return [...variables, command, ...args.map(quote)].join(' ');
}

async function bench(options: BenchOptions): Promise<number> {
  const date = new Date().toISOString();
  const load = loadavg().map((value) => value.toFixed(2));
  if (options.suite === 'replicas') {
    say('making a primary and its streaming replicas');
    await createTopology((made) => {
      topology = made;
    });
  }
  const primary = topology?.primary.url;
  session = await openSession(
    primary ? { ...options, databaseUrl: primary } : options,
    abort.signal,
  );
  migrate(session);
  const compared =
    options.suite === 'replicas' ||
    (options.suite === 'targets' && options.targets.some((t) => buildOf(t).before));
  if (compared && options.beforeBuild !== undefined) {
    session.before = await openBeforeSession(session, options.beforeBuild);
    migrate(session.before);
  }
  const opened = session;
  const suites = {
    targets: () => targetsSuite(opened),
    soak: () => soakSuite(opened),
    replicas: () => {
      if (!topology) throw new Error('no servers for the replicas suite');
      return replicasSuite(opened, topology);
    },
  };
  const report = await suites[options.suite]();
  // An interrupted run leaves the last results file alone rather than write a partial one.
  if (abort.signal.aborted) throw new Error('interrupted');
  const { rows } = await session.admin.query<{ v: string }>(
    "select current_setting('server_version') as v",
  );
  const machine = {
    cpu: `${availableParallelism()} × ${cpus()[0]?.model ?? 'unknown'}`,
    'load average at start': load.join(', '),
    node: process.version,
    postgres: rows[0]?.v ?? 'unknown',
    revision: revisionOf(projectRoot),
    ...(session.before && { 'revision of the @before targets': revisionOf(session.before.root) }),
  };
  mkdirSync(options.resultsFolder, { recursive: true });
  const file = join(options.resultsFolder, RESULTS_FILES[options.suite]);
  const facts = Object.entries(machine).map(([key, value]) => `- ${key}: ${value}`);
  writeFileSync(
    file,
    `# ${report.title}\n\nRun on ${date} with:\n\n\`\`\`sh\n${commandLine(process.argv.slice(2))}\n\`\`\`\n\n${report.body.trim()}\n\n## Machine\n\n${facts.join('\n')}\n`,
  );
  say(`\nwrote ${file}`);
  return report.failed ? 1 : 0;
}

let options: BenchOptions;
try {
  options = readOptions(process.env, process.argv.slice(2), projectRoot);
} catch (error) {
  if (!(error instanceof OptionsError)) throw error;
  process.stderr.write(`bench: ${error.message}\n`);
  process.exit(2);
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    process.stderr.write(`\nbench: ${signal}: stopping and dropping its database\n`);
    abort.abort();
  });
}
let code = 1;
try {
  code = await bench(options);
} catch (error) {
  if (!abort.signal.aborted) process.stderr.write(`bench: ${(error as Error).stack}\n`);
} finally {
  await cleanUp(options);
}
process.exit(abort.signal.aborted ? 130 : code);
