// `npm run bench`: bare Fastify with the same schemas (floor), the service, the same HTTP app
// without a database (http-ceiling) and pgbench running the service's INSERT, at each
// concurrency level, against a database of its own on the PostgreSQL at BENCH_DATABASE_URL; then
// the service's reads (by id and a page at a time) of the plants stored there. Each run measures
// the CPU of the target's process and of the PostgreSQL server's processes per answer. Prints a
// table and writes bench/results/latest.{json,md,svg}.
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { availableParallelism, cpus, loadavg, release, tmpdir, totalmem } from 'node:os';
import { join, relative } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { chartSvg } from './chart.js';
import { cleanUpOnExit } from './cleanup.js';
import { commandLine, gitRevision, packageVersion } from './facts.js';
import { type LoadRequests, runHttpLoad } from './http-load.js';
import {
  type BenchOptions,
  pgbenchJobsFor,
  readBenchOptions,
  redactUrl,
  type Target,
  withDatabase,
} from './options.js';
import { benchBuildFolder, distFolder, projectRoot, resultsFolder } from './paths.js';
import { pgbenchVersion, runPgbench } from './pgbench.js';
import {
  type Child,
  describeExit,
  type ProcessTreeCpu,
  readMachineCpuSeconds,
  readParentPid,
  readProcessCpuSeconds,
  readProcessName,
  readProcessTreeCpu,
  runToCompletion,
  sampleResidentMemory,
  spawnChild,
  stopChild,
  tailOf,
  treeCpuBetween,
  waitForListening,
} from './processes.js';
import {
  type BenchReport,
  CPU_RATIO_HEADER,
  type CpuUse,
  cpuRatioRows,
  markdownReport,
  RATIO_HEADER,
  type RunResult,
  ratioRows,
  ratios,
  runSummary,
  TABLE_HEADER,
  tableRows,
  textTable,
  WEBHOOK_HEADER,
  type WebhookFigures,
  webhookRows,
} from './report.js';

const PLANT_NAME = 'Monstera deliciosa';
const PLANT_TAG = 'aroid';
const START_TIMEOUT_MS = 30_000;
/** The `limit` of the get-page target's requests. */
const PAGE_SIZE = 100;

/** A target that could not be brought up: the harness exits non-zero. */
class StartError extends Error {
  override name = 'StartError';
}

const say = (line: string) => process.stdout.write(`${line}\n`);
const { scratch, abort, runAndExit } = cleanUpOnExit('bench', say);

// ---- the targets ----

/** The plants stored for the read targets: ids step, 2·step, … count·step, spread over int64. */
interface StoredPlants {
  count: number;
  step: bigint;
}

interface Session {
  options: BenchOptions;
  admin: pg.Client;
  databaseUrl: string;
  work: string;
  token: string;
  nextBody: () => string;
  stored: StoredPlants;
  notes: Set<string>;
  /** The PostgreSQL server's postmaster, when it runs on this machine. */
  postmasterPid: number | undefined;
  benchDatabase: string;
}

type HttpTarget = Exclude<Target, 'pgbench'>;

/** Ids never repeat: a random 62-bit base per run plus a counter, well inside int64. */
function plantBodies(): () => string {
  const base = BigInt.asUintN(62, randomBytes(8).readBigUInt64BE());
  let counter = 0n;
  return () => `{"id":${base + counter++},"name":"${PLANT_NAME}","tag":"${PLANT_TAG}"}`;
}

/** Stores `count` plants (and fresh statistics) for the read targets. */
async function storePlantsToRead(databaseUrl: string, count: number): Promise<StoredPlants> {
  const step = (2n ** 63n - 1n) / BigInt(count);
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query(
      `insert into plants (id, name, tag)
         select g * $2::int8, $3, $4 from generate_series(1, $1::int) g`,
      [count, String(step), PLANT_NAME, PLANT_TAG],
    );
    await client.query('vacuum analyze plants');
  } finally {
    await client.end();
  }
  return { count, step };
}

const randomBelow = (n: number) => BigInt(Math.floor(Math.random() * n));

/** What the target's requests are: creates of new plants, or reads of the stored ones. */
function requestsOf(session: Session, target: HttpTarget): LoadRequests {
  const { count, step } = session.stored;
  if (target === 'get-by-id' || target === 'get-by-id-unbatched') {
    return { nextGetPath: () => `/plants/${(randomBelow(count) + 1n) * step}` };
  }
  if (target === 'get-page') {
    // Every page is full: at least PAGE_SIZE stored plants follow `after`.
    const afters = count - PAGE_SIZE + 1;
    return { nextGetPath: () => `/plants?limit=${PAGE_SIZE}&after=${randomBelow(afters) * step}` };
  }
  return { nextBody: session.nextBody };
}

const isCreateTarget = (target: HttpTarget) =>
  target === 'floor' ||
  target === 'service' ||
  target === 'service+webhooks' ||
  target === 'service-traced' ||
  target === 'service-unbatched' ||
  target === 'http-ceiling';

// ---- the webhook receiver of service+webhooks ----

const BENCH_WEBHOOK_SECRET = `whsec_${randomBytes(32).toString('base64')}`;

interface WebhookReceiver {
  url: string;
  pid: number;
  report(): Promise<{ requests: number; arrivals: Array<[string, number]> }>;
  stop(): Promise<void>;
}

/** bench/receiver.ts in a process of its own, so its CPU is not the load generator's. */
async function startWebhookReceiver(): Promise<WebhookReceiver> {
  return startReceiverProcess('receiver.js', (port) => `http://127.0.0.1:${port}/webhooks/plants`);
}

interface OtlpCollector {
  url: string;
  report(): Promise<{ requests: number; spans: number }>;
  stop(): Promise<void>;
}

/** bench/otlp-receiver.ts, the OTLP collector of service-traced, in a process of its own. */
function startOtlpCollector(): Promise<OtlpCollector> {
  return startReceiverProcess('otlp-receiver.js', (port) => `http://127.0.0.1:${port}`);
}

async function startReceiverProcess<Report>(
  script: string,
  urlOf: (port: number) => string,
): Promise<{ url: string; pid: number; report(): Promise<Report>; stop(): Promise<void> }> {
  const child: ChildProcess = fork(join(benchBuildFolder, script), [], {
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const [{ port }] = (await once(child, 'message')) as [{ port: number }];
  return {
    url: urlOf(port),
    pid: child.pid as number,
    async report() {
      const answer = once(child, 'message');
      child.send('report');
      return (await answer)[0];
    },
    async stop() {
      child.disconnect();
      if (child.exitCode === null) await once(child, 'exit');
    },
  };
}

const quantile = (sorted: number[], q: number) =>
  sorted.length === 0
    ? null
    : (sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? null);

/**
 * Waits until every plant the target stored since `sinceMs` was delivered (up to 30 s), then
 * measures commit-to-delivery: from the plant's created_at (the start of its transaction, a
 * little before the commit) to the first delivery's arrival at the receiver.
 */
async function measureDeliveries(
  session: Session,
  receiver: WebhookReceiver,
  sinceMs: number,
): Promise<WebhookFigures> {
  const client = new pg.Client({ connectionString: session.databaseUrl });
  await client.connect();
  try {
    const read = async () =>
      (
        await client.query<{ id: string; created_ms: number }>(
          `select id::text as id, (extract(epoch from created_at) * 1000)::float8 as created_ms
             from plants where created_at >= to_timestamp($1::float8 / 1000)`,
          [sinceMs],
        )
      ).rows;
    const deadline = Date.now() + 30_000;
    let plants = await read();
    let report = await receiver.report();
    while (report.arrivals.length < plants.length && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      plants = await read();
      report = await receiver.report();
    }
    const arrivals = new Map(report.arrivals);
    const latencies: number[] = [];
    for (const plant of plants) {
      const arrived = arrivals.get(plant.id);
      if (arrived !== undefined) latencies.push(arrived - plant.created_ms);
    }
    latencies.sort((a, b) => a - b);
    const delivered = latencies.length;
    return {
      plants: plants.length,
      delivered,
      undelivered: plants.length - delivered,
      duplicates: report.requests - report.arrivals.length,
      p50Ms: quantile(latencies, 0.5),
      p99Ms: quantile(latencies, 0.99),
      maxMs: latencies.at(-1) ?? null,
      withinOneSecond:
        delivered === 0 ? null : latencies.filter((ms) => ms <= 1000).length / plants.length,
    };
  } finally {
    await client.end();
  }
}

/** The environment that makes the service the target, beside the common one. */
function targetEnvironment(target: HttpTarget): Record<string, string> {
  // One statement per request: as many in flight as the pool has connections (its default).
  if (target === 'service-unbatched') return { WRITE_BATCH_MAX: '1', WRITE_CONCURRENCY: '10' };
  if (target === 'get-by-id-unbatched') return { READ_BATCH_MAX: '1', READ_CONCURRENCY: '10' };
  return {};
}

/** A reading of the PostgreSQL server's CPU, and its client backends of other databases. */
interface PostgresCpuReading {
  tree: ProcessTreeCpu;
  otherDatabases: Set<number>;
}

/**
 * The CPU of every process of the PostgreSQL server so far (the postmaster, its background
 * processes and backends, and those that exited), when the server runs on this machine. The
 * pids of client backends of other databases are noted, so a shared server's other users can be
 * left out.
 */
async function readPostgresCpu(session: Session): Promise<PostgresCpuReading | undefined> {
  if (session.postmasterPid === undefined) return undefined;
  const { rows } = await session.admin.query<{ pid: number }>(
    `select pid from pg_stat_activity
      where backend_type = 'client backend' and datname is distinct from $1`,
    [session.benchDatabase],
  );
  const tree = readProcessTreeCpu(session.postmasterPid);
  return tree && { tree, otherDatabases: new Set(rows.map((row) => row.pid)) };
}

/**
 * CPU seconds PostgreSQL spent between two readings, without the client backends of other
 * databases that lived through both (those that came and went in between cannot be told apart).
 */
function postgresCpuBetween(
  before: PostgresCpuReading | undefined,
  after: PostgresCpuReading | undefined,
): number | undefined {
  if (!before || !after) return undefined;
  const excluded = new Set(
    [...before.otherDatabases].filter((pid) => after.otherDatabases.has(pid)),
  );
  return treeCpuBetween(before.tree, after.tree, excluded);
}

async function checkpoint(session: Session): Promise<void> {
  // The rows earlier runs inserted are vacuumed and analysed now, not by an autovacuum that
  // starts during the next run and takes its cores.
  const bench = new pg.Client({ connectionString: session.databaseUrl });
  await bench.connect();
  try {
    await bench.query('vacuum analyze plants');
  } finally {
    await bench.end();
  }
  // Dirty pages from the previous run are written now rather than during the next one.
  try {
    await session.admin.query('checkpoint');
  } catch (error) {
    session.notes.add(
      `CHECKPOINT before each run was not allowed (${(error as Error).message}); runs may include checkpoints of earlier ones.`,
    );
  }
}

async function waitForServer(child: Child, logFile: string, errorFile: string): Promise<string> {
  try {
    return await waitForListening(child, logFile, errorFile, {
      timeoutMs: START_TIMEOUT_MS,
      signal: abort.signal,
    });
  } catch (error) {
    throw new StartError((error as Error).message);
  }
}

/** One request before the load: the token, the request and the answer are what the load expects. */
async function checkAnswers(baseUrl: string, session: Session, target: HttpTarget): Promise<void> {
  if (target !== 'http-ceiling' && target !== 'floor') {
    const ready = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(10_000) });
    if (ready.status !== 200) throw new StartError(`/readyz answered ${ready.status}`);
  }
  const authorization = `Bearer ${session.token}`;
  if (!isCreateTarget(target)) {
    const { step } = session.stored;
    const path = target === 'get-page' ? `/plants?limit=${PAGE_SIZE}&after=0` : `/plants/${step}`;
    const response = await fetch(`${baseUrl}${path}`, {
      headers: { authorization },
      signal: AbortSignal.timeout(10_000),
    });
    const text = await response.text();
    const expected = `{"id":${step},"name":"${PLANT_NAME}","tag":"${PLANT_TAG}"}`;
    // The creates of the other targets land between the stored plants: count, do not compare.
    const rows = text.split(`"name":"${PLANT_NAME}","tag":"${PLANT_TAG}"}`).length - 1;
    const right =
      target === 'get-page'
        ? rows === PAGE_SIZE && response.headers.has('link')
        : text === expected;
    if (response.status !== 200 || !right) {
      throw new StartError(`GET ${path} answered ${response.status} ${text.slice(0, 200)}`);
    }
    return;
  }
  const response = await fetch(`${baseUrl}/plants`, {
    method: 'POST',
    headers: { authorization, 'content-type': 'application/json' },
    body: session.nextBody(),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  if (response.status !== 200 || text !== JSON.stringify({ name: PLANT_NAME, tag: PLANT_TAG })) {
    throw new StartError(`POST /plants answered ${response.status} ${text}`);
  }
}

function countLines(file: string): number {
  const content = readFileSync(file);
  let lines = 0;
  for (let at = content.indexOf(10); at !== -1; at = content.indexOf(10, at + 1)) lines++;
  return lines;
}

async function runHttpTarget(
  session: Session,
  target: HttpTarget,
  connections: number,
): Promise<RunResult> {
  const { options } = session;
  const logFile = join(session.work, `${target}-${connections}.log`);
  const errorFile = join(session.work, `${target}-${connections}.stderr`);
  const stdout = openSync(logFile, 'w');
  const stderr = openSync(errorFile, 'w');
  const entry =
    target === 'http-ceiling'
      ? join(benchBuildFolder, 'ceiling.js')
      : target === 'floor'
        ? join(benchBuildFolder, 'floor.js')
        : join(distFolder, 'server.js');
  const receiver = target === 'service+webhooks' ? await startWebhookReceiver() : undefined;
  const collector = target === 'service-traced' ? await startOtlpCollector() : undefined;
  const startedAtMs = Date.now();
  let child: Child;
  try {
    child = spawnChild(target, process.execPath, [entry], {
      cwd: projectRoot,
      // Only what the service needs; everything else at the shipped defaults.
      env: {
        PATH: process.env.PATH ?? '',
        DATABASE_URL: session.databaseUrl,
        API_TOKENS: session.token,
        HOST: '127.0.0.1',
        PORT: '0',
        LOG_LEVEL: 'info',
        // Nothing load-balances here: stop at once.
        SHUTDOWN_DELAY_MS: '0',
        ...targetEnvironment(target),
        ...(receiver && { WEBHOOK_URLS: receiver.url, WEBHOOK_SECRET: BENCH_WEBHOOK_SECRET }),
        ...(collector && { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url }),
      },
      // The request log goes to a file: the kernel drains it, not the load generator's core.
      stdio: ['ignore', stdout, stderr],
    });
  } catch (error) {
    throw new StartError((error as Error).message);
  } finally {
    closeSync(stdout);
    closeSync(stderr);
  }

  try {
    const baseUrl = await waitForServer(child, logFile, errorFile);
    await checkAnswers(baseUrl, session, target);
    await checkpoint(session);
    const load = {
      ...requestsOf(session, target),
      baseUrl,
      connections,
      token: session.token,
      signal: abort.signal,
      rate: options.rate,
    };
    if (options.warmupSeconds > 0) {
      await runHttpLoad({ ...load, durationSeconds: options.warmupSeconds });
    }

    const serverCpuBefore = readProcessCpuSeconds(child.pid);
    const receiverCpuBefore = receiver && readProcessCpuSeconds(receiver.pid);
    const postgresBefore = await readPostgresCpu(session);
    const machineBefore = readMachineCpuSeconds();
    const ownBefore = process.cpuUsage();
    const startedAt = performance.now();
    const memory = sampleResidentMemory(child.pid);
    const result = await runHttpLoad({ ...load, durationSeconds: options.durationSeconds });
    const peakRssBytes = memory.stop();
    const seconds = (performance.now() - startedAt) / 1000;
    const serverCpuAfter = readProcessCpuSeconds(child.pid);
    const receiverCpuAfter = receiver && readProcessCpuSeconds(receiver.pid);
    const machineAfter = readMachineCpuSeconds();
    const own = process.cpuUsage(ownBefore);
    const postgresAfter = await readPostgresCpu(session);

    if (child.exit) {
      throw new Error(
        `the server exited during the run with ${describeExit(child.exit)}:\n${tailOf(errorFile)}`,
      );
    }
    // Before the service stops: what it still has to deliver, it delivers.
    const webhooks = receiver && (await measureDeliveries(session, receiver, startedAtMs));
    const exit = await stopChild(child);
    // Stopping flushed the spans still buffered.
    const traces = collector && (await collector.report());
    const cpu: CpuUse = {
      loadGenerator: (own.user + own.system) / 1e6 / seconds,
    };
    if (serverCpuBefore !== undefined && serverCpuAfter !== undefined) {
      cpu.server = (serverCpuAfter - serverCpuBefore) / seconds;
    }
    if (machineBefore && machineAfter) {
      cpu.machine = (machineAfter.busy - machineBefore.busy) / seconds;
    }
    const postgresSeconds = postgresCpuBetween(postgresBefore, postgresAfter);
    if (postgresSeconds !== undefined) cpu.postgres = postgresSeconds / seconds;
    const run: RunResult = {
      target,
      connections,
      status: 'ok',
      durationSeconds: result.durationSeconds,
      throughput: result.throughput,
      succeeded: result.succeeded,
      p50Ms: result.p50Ms,
      p99Ms: result.p99Ms,
      errors: result.errors,
      errorDetail: {
        non2xx: result.non2xx,
        socketErrors: result.socketErrors,
        timeouts: result.timeouts,
        statusCodes: result.statusCodes,
      },
      peakRssBytes,
      cpu,
      logLines: countLines(logFile),
    };
    if (target === 'get-page') run.rowsPerAnswer = PAGE_SIZE;
    if (traces) {
      run.traces = { spans: traces.spans, exports: traces.requests };
      session.notes.add(
        `service-traced at ${connections} connections: the collector got ${traces.spans} spans in ${traces.requests} OTLP requests, for the ${result.succeeded} creates measured and those of the warm-up.`,
      );
    }
    if (webhooks) {
      run.webhooks = webhooks;
      if (receiverCpuBefore !== undefined && receiverCpuAfter !== undefined) {
        webhooks.receiverCpu = (receiverCpuAfter - receiverCpuBefore) / seconds;
      }
    }
    if (exit.code !== 0) run.note = `the server stopped with ${describeExit(exit)}`;
    return run;
  } finally {
    await stopChild(child);
    await receiver?.stop();
    await collector?.stop();
    rmSync(logFile, { force: true });
    rmSync(errorFile, { force: true });
  }
}

/** pgbench clients this server can take now, leaving the configured spare slots to others. */
async function pgbenchClients(session: Session, connections: number): Promise<number> {
  const { rows } = await session.admin.query<{ max: number; used: number }>(
    `select current_setting('max_connections')::int as max,
            (select count(*)::int from pg_stat_activity where backend_type = 'client backend') as used`,
  );
  const { max = 0, used = 0 } = rows[0] ?? {};
  const free = max - used - session.options.pgbenchSpareConnections;
  const clients = Math.max(1, Math.min(connections, free));
  if (clients < connections) {
    session.notes.add(
      `pgbench ran fewer clients than the level asks where shown as "(ran N)": the server allows max_connections = ${max}, and the harness leaves ${session.options.pgbenchSpareConnections} slots (BENCH_PGBENCH_SPARE_CONNECTIONS) for other users of the server.`,
    );
  }
  return clients;
}

async function runPgbenchTarget(session: Session, connections: number): Promise<RunResult> {
  const { options } = session;
  const clients = await pgbenchClients(session, connections);
  const jobs = pgbenchJobsFor(clients, options);
  const common = {
    pgbench: options.pgbenchPath,
    databaseUrl: session.databaseUrl,
    clients,
    jobs,
    workFolder: join(session.work, `pgbench-${connections}`),
    signal: abort.signal,
    rate: options.rate,
  };
  await checkpoint(session);
  try {
    if (options.warmupSeconds > 0) {
      await runPgbench({ ...common, durationSeconds: options.warmupSeconds, measure: false });
    }
  } catch (error) {
    throw new StartError((error as Error).message);
  }
  const postgresBefore = await readPostgresCpu(session);
  const machineBefore = readMachineCpuSeconds();
  const startedAt = performance.now();
  const result = await runPgbench({
    ...common,
    durationSeconds: options.durationSeconds,
    measure: true,
  });
  const seconds = (performance.now() - startedAt) / 1000;
  const machineAfter = readMachineCpuSeconds();
  const postgresAfter = await readPostgresCpu(session);
  rmSync(common.workFolder, { recursive: true, force: true });
  const run: RunResult = {
    target: 'pgbench',
    connections,
    status: 'ok',
    durationSeconds: options.durationSeconds,
    throughput: result.throughput,
    succeeded: result.succeeded,
    p50Ms: result.p50Ms,
    p99Ms: result.p99Ms,
    errors: result.errors,
    errorDetail: { failed: result.failed, abortedClients: result.abortedClients, jobs },
  };
  if (clients !== connections) run.clients = clients;
  if (machineBefore && machineAfter) {
    run.cpu = { machine: (machineAfter.busy - machineBefore.busy) / seconds };
  }
  const postgresSeconds = postgresCpuBetween(postgresBefore, postgresAfter);
  if (postgresSeconds !== undefined) run.cpu = { ...run.cpu, postgres: postgresSeconds / seconds };
  if (result.exitCode !== 0) run.note = `pgbench exited with code ${result.exitCode}`;
  return run;
}

// ---- the session ----

/** The postmaster: the parent of this connection's backend, if /proc shows it here. */
async function findPostmaster(admin: pg.Client): Promise<number | undefined> {
  const { rows } = await admin.query<{ pid: number }>('select pg_backend_pid() as pid');
  const backend = rows[0]?.pid;
  // A server elsewhere has pids of its own: one that matches here must be PostgreSQL's too.
  if (backend === undefined || readProcessName(backend) !== 'postgres') return undefined;
  const parent = readParentPid(backend);
  return parent !== undefined && parent > 1 && readProcessName(parent) === 'postgres'
    ? parent
    : undefined;
}

async function benchmark(options: BenchOptions): Promise<number> {
  const startedAt = new Date();
  const loadAtStart = loadavg();
  const adminUrl = options.databaseUrl;
  scratch.adminUrl = adminUrl;
  const benchDatabase = `plant_store_bench_${randomBytes(4).toString('hex')}`;
  scratch.database = benchDatabase;
  const workFolder = mkdtempSync(join(tmpdir(), 'plant-store-bench-'));
  scratch.workFolder = workFolder;
  const admin = new pg.Client({
    connectionString: adminUrl,
    application_name: 'plant-store-bench',
  });
  await admin.connect();
  try {
    const settings = await admin.query<{ name: string; value: string }>(
      'select name, current_setting(name) as value from unnest($1::text[]) as name',
      [
        [
          'server_version',
          'synchronous_commit',
          'fsync',
          'full_page_writes',
          'wal_sync_method',
          'commit_delay',
          'shared_buffers',
          'max_wal_size',
          'max_connections',
        ],
      ],
    );
    const postgres: Record<string, string> = {};
    for (const { name, value } of settings.rows) postgres[name] = value;
    await admin.query(`create database ${benchDatabase}`);
    const databaseUrl = withDatabase(adminUrl, benchDatabase);
    say(`created database ${benchDatabase}; migrating it with dist/migrate.js`);
    await runToCompletion('migrate', process.execPath, [join(distFolder, 'migrate.js')], {
      cwd: projectRoot,
      env: { PATH: process.env.PATH ?? '', DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' },
    });

    const notes = new Set<string>();
    let targets = options.targets;
    let pgbench = 'not used';
    if (targets.includes('pgbench')) {
      pgbench = (await pgbenchVersion(options.pgbenchPath)) ?? 'not installed';
      if (pgbench === 'not installed') {
        say(`pgbench (${options.pgbenchPath}) is not installed: skipping the pgbench target`);
        notes.add('pgbench is not installed on this machine, so the pgbench target was skipped.');
        targets = targets.filter((target) => target !== 'pgbench');
      }
    }

    let stored: StoredPlants = { count: 0, step: 1n };
    if (targets.some((target) => target.startsWith('get-'))) {
      say(`storing ${options.readPlants} plants for the read targets`);
      stored = await storePlantsToRead(databaseUrl, options.readPlants);
      notes.add(
        `The read targets read ${options.readPlants} plants stored before the first run, with ids spread over int64 (${stored.step} apart, up to ${BigInt(stored.count) * stored.step}); get-by-id asks for one at random, get-page for the ${PAGE_SIZE} after one at random, so every page is full. The creates of the other targets add to the same table.`,
      );
    }
    const session: Session = {
      options,
      admin,
      databaseUrl,
      work: workFolder,
      token: randomBytes(32).toString('base64url'),
      nextBody: plantBodies(),
      stored,
      notes,
      postmasterPid: await findPostmaster(admin),
      benchDatabase,
    };
    if (session.postmasterPid === undefined) {
      notes.add(
        'The PostgreSQL server does not run on this machine (or its processes cannot be read), so its CPU is not measured.',
      );
    } else {
      notes.add(
        "PostgreSQL's CPU is that of all the server's processes together (postmaster, background processes, every backend, and those that exited during the run), from /proc, without the client backends of other databases that lived through the whole run; connections of other databases that opened and closed during the run are counted, so on a shared server the figure can only be too high.",
      );
    }
    const perRun = options.warmupSeconds + options.durationSeconds + 2;
    say(
      `levels ${options.connections.join(', ')}; targets ${targets.join(', ')}; ` +
        `${options.warmupSeconds} s warm-up + ${options.durationSeconds} s each; ` +
        `about ${Math.ceil((perRun * targets.length * options.connections.length) / 60)} min`,
    );

    const runs: RunResult[] = [];
    const broken = new Map<Target, string>();
    let failed = false;
    for (const connections of options.connections) {
      say(`\n== ${connections} connection${connections === 1 ? '' : 's'}`);
      for (const target of targets) {
        if (abort.signal.aborted) throw new Error('interrupted');
        const brokenBecause = broken.get(target);
        if (brokenBecause) {
          runs.push({ target, connections, status: 'skipped', note: brokenBecause });
          continue;
        }
        let run: RunResult;
        try {
          run =
            target === 'pgbench'
              ? await runPgbenchTarget(session, connections)
              : await runHttpTarget(session, target, connections);
        } catch (error) {
          if (abort.signal.aborted) throw error;
          const message = (error as Error).message;
          failed = true;
          process.stderr.write(`bench: ${target} at ${connections} connections: ${message}\n`);
          if (error instanceof StartError) {
            broken.set(target, `did not start at an earlier level (${connections})`);
          }
          const lines = message.split('\n').filter((line) => line.trim() !== '');
          run = {
            target,
            connections,
            status: 'failed',
            note: lines.slice(0, 2).join(' ').slice(0, 160),
          };
        }
        runs.push(run);
        say(`  ${runSummary(run)}`);
      }
    }

    // An interrupted session leaves the last results file alone rather than write a partial one.
    if (abort.signal.aborted) throw new Error('interrupted');
    notes.add(
      `Load average when the run began: ${loadAtStart.map((value) => value.toFixed(2)).join(', ')} (1, 5, 15 min). Anything else running on the machine takes cores from the targets.`,
    );
    notes.add(
      'The service and http-ceiling write their request log (pino, JSON lines, info level) to a file; the log line count of each run is in latest.json.',
    );
    notes.add(
      "A VACUUM ANALYZE of the plants and a CHECKPOINT precede each run's warm-up, so no run pays for vacuuming or writing out what an earlier run inserted, and the warm-up rather than the measurement takes the burst of full-page writes that follows a checkpoint.",
    );
    const report: BenchReport = {
      date: startedAt.toISOString(),
      command: commandLine('BENCH_', 'bench', 'run.js'),
      machine: {
        cpu: cpus()[0]?.model ?? 'unknown',
        cores: availableParallelism(),
        memory: `${(totalmem() / 1024 ** 3).toFixed(1)} GiB`,
        kernel: release(),
        node: process.version,
        postgres: postgres.server_version ?? 'unknown',
        pgbench,
        autocannon: packageVersion('autocannon'),
        revision: gitRevision(),
      },
      settings: {
        connections: options.connections.join(', '),
        'duration per run (s)': options.durationSeconds,
        'warm-up per run (s)': options.warmupSeconds,
        'database server': redactUrl(options.databaseUrl),
        'pgbench jobs': options.pgbenchJobs ?? `min(clients, ${availableParallelism()})`,
        'pipelining (autocannon)': 1,
        'requests per second per target': options.rate ?? 'as many as answered',
        'service environment':
          'DATABASE_URL, API_TOKENS (a fresh token), HOST=127.0.0.1, PORT=0, LOG_LEVEL=info; everything else (DB_POOL_MAX, timeouts, batching) at the service defaults, but for the unbatched targets',
        'plants stored for the read targets': options.readPlants,
      },
      postgres,
      runs,
      ratios: ratios(runs, options.connections),
      notes: [...notes],
    };
    writeResults(report, options.connections);
    return failed ? 1 : 0;
  } finally {
    await admin.end().catch(() => {});
  }
}

function writeResults(report: BenchReport, levels: number[]): void {
  say(`\n${textTable(TABLE_HEADER, tableRows(report.runs))}`);
  say(`\n${textTable(RATIO_HEADER, ratioRows(report.ratios), 0)}`);
  say(`\n${textTable(CPU_RATIO_HEADER, cpuRatioRows(report.ratios), 0)}`);
  const webhooks = webhookRows(report.runs);
  if (webhooks.length > 0) say(`\n${textTable(WEBHOOK_HEADER, webhooks, 1)}`);
  mkdirSync(resultsFolder, { recursive: true });
  const files = {
    json: join(resultsFolder, 'latest.json'),
    markdown: join(resultsFolder, 'latest.md'),
    svg: join(resultsFolder, 'latest.svg'),
  };
  writeFileSync(files.json, `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(files.markdown, markdownReport(report, 'latest.svg'));
  writeFileSync(
    files.svg,
    chartSvg(
      report.runs,
      levels,
      `${report.date.slice(0, 16).replace('T', ' ')} UTC, ${report.machine.cores} cores, ${report.settings['duration per run (s)']} s per run`,
    ),
  );
  say(
    `\nwrote ${Object.values(files)
      .map((file) => relative(projectRoot, file))
      .join(', ')}`,
  );
}

await runAndExit(() => readBenchOptions(process.env), benchmark);
