// The targets suite, `npm run bench`: bare Fastify with the same schemas (floor), the service as
// shipped with and without the webhook (a static URL, or 1, 10 or 100 endpoints), tracing or
// coalescing, the same app without database I/O
// (http-ceiling) and pgbench running the service's INSERT, at each concurrency level; then the
// service's reads (by id and a page at a time) of plants stored beforehand. Each run measures the
// CPU of the target's process and of the PostgreSQL server's processes per answer.
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { rmSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { type LoadRequests, runHttpLoad } from './http-load.js';
import { endpointsOf, pgbenchJobsFor, type Target } from './options.js';
import { benchBuildFolder } from './paths.js';
import { pgbenchVersion, runPgbench } from './pgbench.js';
import { describeExit } from './processes.js';
import type { SuiteReport } from './report.js';
import type { RunResult, WebhookFigures } from './run-result.js';
import {
  checkpoint,
  exitedEarly,
  measureLoad,
  PLANT_NAME,
  PLANT_TAG,
  plantBodies,
  type Session,
  StartError,
  say,
  startService,
} from './session.js';
import { markdownBody, runSummary, textTables } from './targets-report.js';

/** The server's settings that decide what a commit costs, for the report. */
const POSTGRES_SETTINGS = [
  'synchronous_commit',
  'fsync',
  'full_page_writes',
  'wal_sync_method',
  'commit_delay',
  'shared_buffers',
  'max_wal_size',
  'max_connections',
];

/** The `limit` of the get-page target's requests. */
export const PAGE_SIZE = 100;

/** The plants stored for the read targets: ids step, 2·step, … count·step, spread over int64. */
export interface StoredPlants {
  count: number;
  step: bigint;
}

interface Targets {
  session: Session;
  nextBody: () => string;
  stored: StoredPlants;
}

type HttpTarget = Exclude<Target, 'pgbench'>;

/** Stores `count` plants (and fresh statistics) for the read targets. */
export async function storePlantsToRead(databaseUrl: string, count: number): Promise<StoredPlants> {
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
function requestsOf(targets: Targets, target: HttpTarget): LoadRequests {
  const { count, step } = targets.stored;
  if (target === 'get-by-id' || target === 'get-by-id-unbatched') {
    return { nextGetPath: () => `/plants/${(randomBelow(count) + 1n) * step}` };
  }
  if (target === 'get-page') {
    // Every page is full: at least PAGE_SIZE stored plants follow `after`.
    const afters = count - PAGE_SIZE + 1;
    return { nextGetPath: () => `/plants?limit=${PAGE_SIZE}&after=${randomBelow(afters) * step}` };
  }
  return { nextBody: targets.nextBody };
}

const isCreateTarget = (target: HttpTarget) => !target.startsWith('get-');

// ---- the webhook receiver of service+webhooks and the OTLP collector of service-traced ----

const BENCH_WEBHOOK_SECRET = `whsec_${randomBytes(32).toString('base64')}`;

interface Receiver<Report> {
  url: string;
  pid: number;
  report(): Promise<Report>;
  /** The requests it got so far. */
  count(): Promise<number>;
  stop(): Promise<void>;
}
/** Per plant id: the first delivery's arrival (ms since the epoch) and the deliveries that came. */
type WebhookReceiver = Receiver<{
  requests: number;
  arrivals: Array<[string, number, number]>;
}>;
type OtlpCollector = Receiver<{ requests: number; spans: number }>;

/** bench/receiver.ts or bench/otlp-receiver.ts, in a process of its own. */
async function startReceiver<Report>(
  script: string,
  urlOf: (port: number) => string,
): Promise<Receiver<Report>> {
  const child: ChildProcess = fork(join(benchBuildFolder, script), [], {
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const [{ port }] = (await once(child, 'message')) as [{ port: number }];
  const ask = async (message: string) => {
    const answer = once(child, 'message');
    child.send(message);
    return (await answer)[0];
  };
  return {
    url: urlOf(port),
    pid: child.pid as number,
    report: () => ask('report'),
    count: async () => (await ask('count')).requests,
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
 * Waits until every plant the target stored since `sinceMs` was delivered to each of its
 * `subscribers` (up to 30 s, and 0.6 s more per subscriber), then measures commit-to-delivery:
 * from the plant's created_at (the start of its transaction, a little before the commit) to the
 * first delivery's arrival at the receiver.
 */
async function measureDeliveries(
  session: Session,
  receiver: WebhookReceiver,
  sinceMs: number,
  subscribers: number,
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
    const startedAt = Date.now();
    const deadline = startedAt + 30_000 + 600 * subscribers;
    let plants = await read();
    // The request count is cheap to ask for; the arrivals are read once it is high enough.
    while (
      (await receiver.count()) < subscribers * plants.length &&
      Date.now() < deadline &&
      !session.signal.aborted
    ) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      plants = await read();
    }
    const drainSeconds = (Date.now() - startedAt) / 1000;
    const report = await receiver.report();
    const arrivals = new Map(report.arrivals.map(([id, first, count]) => [id, { first, count }]));
    const latencies: number[] = [];
    let complete = 0;
    let duplicates = 0;
    for (const plant of plants) {
      const arrived = arrivals.get(plant.id);
      if (arrived === undefined) continue;
      latencies.push(arrived.first - plant.created_ms);
      if (arrived.count >= subscribers) complete++;
      duplicates += Math.max(0, arrived.count - subscribers);
    }
    latencies.sort((a, b) => a - b);
    const delivered = latencies.length;
    return {
      subscribers,
      plants: plants.length,
      delivered,
      undelivered: plants.length - delivered,
      complete,
      deliveriesPerPlant: plants.length === 0 ? null : report.requests / plants.length,
      drainSeconds,
      duplicates,
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

/**
 * Subscribes `count` webhook endpoints straight in the table, as the management API would
 * (`<receiver>/<i>` each, a key of its own stored unsealed: the service runs without
 * WEBHOOK_ENCRYPTION_KEY), so that the target pays for deliveries and not for the API.
 */
async function subscribeEndpoints(databaseUrl: string, url: string, count: number): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query('truncate webhook_endpoints cascade');
    const urls = Array.from({ length: count }, (_, i) => `${url}/${i + 1}`);
    // As the service's generateSecret makes them: whsec_ and 32 random bytes in base64.
    const secrets = urls.map(() => `plain:whsec_${randomBytes(32).toString('base64')}`);
    await client.query(
      'insert into webhook_endpoints (url, secret) select * from unnest($1::text[], $2::text[])',
      [urls, secrets],
    );
  } finally {
    await client.end();
  }
}

async function unsubscribeEndpoints(databaseUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query('truncate webhook_endpoints cascade');
  } finally {
    await client.end();
  }
}

/** Deliveries of the plants stored since `sinceMs` that the receiver has not got yet. */
async function pendingDeliveries(
  session: Session,
  receiver: WebhookReceiver,
  sinceMs: number,
  subscribers: number,
): Promise<number> {
  const client = new pg.Client({ connectionString: session.databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ plants: number }>(
      `select count(*)::int as plants from plants
        where created_at >= to_timestamp($1::float8 / 1000)`,
      [sinceMs],
    );
    const requests = await receiver.count();
    return Math.max(0, subscribers * (rows[0]?.plants ?? 0) - requests);
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

const entryOf = (target: HttpTarget) =>
  target === 'http-ceiling'
    ? join(benchBuildFolder, 'ceiling.js')
    : target === 'floor'
      ? join(benchBuildFolder, 'floor.js')
      : undefined;

/** One request before the load: the token, the request and the answer are what the load expects. */
async function checkAnswers(baseUrl: string, targets: Targets, target: HttpTarget): Promise<void> {
  const authorization = `Bearer ${targets.session.token}`;
  if (!isCreateTarget(target)) {
    const { step } = targets.stored;
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
    body: targets.nextBody(),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  if (response.status !== 200 || text !== JSON.stringify({ name: PLANT_NAME, tag: PLANT_TAG })) {
    throw new StartError(`POST /plants answered ${response.status} ${text}`);
  }
}

async function runHttpTarget(
  targets: Targets,
  target: HttpTarget,
  connections: number,
): Promise<RunResult> {
  const { session } = targets;
  const { options } = session;
  const endpoints = endpointsOf(target);
  const receiver: WebhookReceiver | undefined =
    target === 'service+webhooks' || endpoints !== undefined
      ? await startReceiver('receiver.js', (port) => `http://127.0.0.1:${port}/webhooks/plants`)
      : undefined;
  const collector: OtlpCollector | undefined =
    target === 'service-traced'
      ? await startReceiver('otlp-receiver.js', (port) => `http://127.0.0.1:${port}`)
      : undefined;
  const startedAtMs = Date.now();
  try {
    const service = await startService(
      session,
      `${target}-${connections}`,
      {
        ...targetEnvironment(target),
        ...(receiver &&
          endpoints === undefined && {
            WEBHOOK_URLS: receiver.url,
            WEBHOOK_SECRET: BENCH_WEBHOOK_SECRET,
          }),
        // The receiver listens on loopback, which endpoints may reach only when allowed.
        ...(endpoints !== undefined && { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' }),
        ...(collector && { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url }),
      },
      entryOf(target),
    );
    try {
      // Before the first create: an endpoint gets the events recorded after it was made.
      if (receiver && endpoints !== undefined) {
        await subscribeEndpoints(session.databaseUrl, receiver.url, endpoints);
      }
      await checkAnswers(service.baseUrl, targets, target);
      await checkpoint(session);
      const load = {
        ...requestsOf(targets, target),
        baseUrl: service.baseUrl,
        connections,
        token: session.token,
        signal: session.signal,
        rate: options.rate,
      };
      if (options.warmupSeconds > 0) {
        await runHttpLoad({ ...load, durationSeconds: options.warmupSeconds });
      }
      const measured = await measureLoad(
        session,
        service.child.pid,
        receiver ? { receiver: receiver.pid } : {},
        () => runHttpLoad({ ...load, durationSeconds: options.durationSeconds }),
      );
      // What the receiver still waited for when the load ended: a backlog that grows with the
      // run means the service does not keep up with this rate.
      const behind =
        receiver && (await pendingDeliveries(session, receiver, startedAtMs, endpoints ?? 1));
      const exited = exitedEarly(service);
      if (exited !== undefined) throw new Error(`the server exited during the run:\n${exited}`);
      // Before the service stops: what it still has to deliver, it delivers.
      const webhooks =
        receiver && (await measureDeliveries(session, receiver, startedAtMs, endpoints ?? 1));
      const exit = await service.stop();
      // Stopping flushed the spans still buffered.
      const traces = collector && (await collector.report());
      const { result } = measured;
      const run: RunResult = {
        target,
        connections,
        status: 'ok',
        throughput: result.throughput,
        p50Ms: result.p50Ms,
        p99Ms: result.p99Ms,
        errors: result.errors,
        peakRssBytes: measured.peakRssBytes,
        cpu: measured.cpu,
      };
      if (target === 'get-page') run.rowsPerAnswer = PAGE_SIZE;
      if (traces) {
        session.notes.add(
          `service-traced at ${connections} connections: the collector got ${traces.spans} spans in ${traces.requests} OTLP requests, for the ${result.succeeded} creates measured and those of the warm-up.`,
        );
      }
      if (webhooks) {
        const receiverCpu = measured.others.receiver;
        run.webhooks = {
          ...webhooks,
          ...(receiverCpu !== undefined && { receiverCpu }),
          ...(behind !== undefined && { behindAtEnd: behind }),
        };
      }
      if (exit.code !== 0) run.note = `the server stopped with ${describeExit(exit)}`;
      return run;
    } finally {
      await service.stop();
      // The next target starts with no subscriber: the endpoints go, and with them their
      // deliveries and attempt log.
      if (endpoints !== undefined) await unsubscribeEndpoints(session.databaseUrl);
    }
  } finally {
    await receiver?.stop();
    await collector?.stop();
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
  const common = {
    pgbench: options.pgbenchPath,
    databaseUrl: session.databaseUrl,
    clients,
    jobs: pgbenchJobsFor(clients, options),
    workFolder: join(session.work, `pgbench-${connections}`),
    signal: session.signal,
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
  const { result, cpu } = await measureLoad(session, undefined, {}, () =>
    runPgbench({ ...common, durationSeconds: options.durationSeconds, measure: true }),
  );
  rmSync(common.workFolder, { recursive: true, force: true });
  const run: RunResult = {
    target: 'pgbench',
    connections,
    status: 'ok',
    throughput: result.throughput,
    p50Ms: result.p50Ms,
    p99Ms: result.p99Ms,
    errors: result.errors,
    // pgbench is a process of its own: this one's CPU is not the load's.
    cpu: {
      ...(cpu.machine !== undefined && { machine: cpu.machine }),
      ...(cpu.postgres !== undefined && { postgres: cpu.postgres }),
    },
  };
  if (clients !== connections) run.clients = clients;
  if (result.exitCode !== 0) run.note = `pgbench exited with code ${result.exitCode}`;
  return run;
}

export async function targetsSuite(session: Session): Promise<SuiteReport> {
  const { options, notes } = session;
  let targetList = options.targets;
  let pgbench = 'not used';
  if (targetList.includes('pgbench')) {
    pgbench = (await pgbenchVersion(options.pgbenchPath)) ?? 'not installed';
    if (pgbench === 'not installed') {
      say(`pgbench (${options.pgbenchPath}) is not installed: skipping the pgbench target`);
      notes.add('pgbench is not installed on this machine, so the pgbench target was skipped.');
      targetList = targetList.filter((target) => target !== 'pgbench');
    }
  }

  let stored: StoredPlants = { count: 0, step: 1n };
  if (targetList.some((target) => target.startsWith('get-'))) {
    say(`storing ${options.readPlants} plants for the read targets`);
    stored = await storePlantsToRead(session.databaseUrl, options.readPlants);
    notes.add(
      `The read targets read ${options.readPlants} plants stored before the first run, with ids spread over int64 (${stored.step} apart, up to ${BigInt(stored.count) * stored.step}); get-by-id asks for one at random, get-page for the ${PAGE_SIZE} after one at random, so every page is full. The creates of the other targets add to the same table.`,
    );
  }
  const targets: Targets = { session, nextBody: plantBodies(), stored };
  const settings = await session.admin.query<{ name: string; value: string }>(
    'select name, current_setting(name) as value from unnest($1::text[]) as name',
    [POSTGRES_SETTINGS],
  );
  const postgres = Object.fromEntries(settings.rows.map(({ name, value }) => [name, value]));
  const perRun = options.warmupSeconds + options.durationSeconds + 2;
  say(
    `levels ${options.connections.join(', ')}; targets ${targetList.join(', ')}; ` +
      `${options.warmupSeconds} s warm-up + ${options.durationSeconds} s each; ` +
      `about ${Math.ceil((perRun * targetList.length * options.connections.length) / 60)} min`,
  );

  const runs: RunResult[] = [];
  const broken = new Map<Target, string>();
  let failed = false;
  for (const connections of options.connections) {
    say(`\n== ${connections} connection${connections === 1 ? '' : 's'}`);
    for (const target of targetList) {
      if (session.signal.aborted) throw new Error('interrupted');
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
            : await runHttpTarget(targets, target, connections);
      } catch (error) {
        if (session.signal.aborted) throw error;
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

  say(`\n${textTables(runs, options.connections)}`);
  notes.add(
    "A VACUUM ANALYZE of the plants and a CHECKPOINT precede each run's warm-up, so no run pays for vacuuming or writing out what an earlier run inserted, and the warm-up rather than the measurement takes the burst of full-page writes that follows a checkpoint.",
  );
  return {
    title: 'Plant Store benchmark',
    body: markdownBody(runs, options.connections, [...notes], postgres),
    settings: {
      targets: targetList.join(', '),
      connections: options.connections.join(', '),
      'duration per run (s)': options.durationSeconds,
      'warm-up per run (s)': options.warmupSeconds,
      pgbench,
      'pgbench jobs': options.pgbenchJobs ?? `min(clients, ${availableParallelism()})`,
      'pipelining (autocannon)': 1,
      'requests per second per target': options.rate ?? 'as many as answered',
      'service environment':
        'DATABASE_URL, API_TOKENS (a fresh token), HOST=127.0.0.1, PORT=0, LOG_LEVEL=info; everything else (DB_POOL_MAX, timeouts, batching) at the service defaults, but for the unbatched targets',
      'plants stored for the read targets': options.readPlants,
    },
    failed,
  };
}
