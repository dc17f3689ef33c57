// The targets suite, `npm run bench`: at each concurrency level, one target after another, each
// in a process of its own after a VACUUM ANALYZE and a CHECKPOINT, so that no run pays for an
// earlier one's rows:
// - floor: bare Fastify with the service's schemas (floor.ts), the least a create can cost;
// - service: dist/server.js as shipped, creating plants;
// - service+webhooks: the same with WEBHOOK_URLS at a receiver on loopback (receiver.ts);
// - service+endpoints-N: the same receiver through N webhook endpoints instead;
// - get-by-id, get-page: the service reading plants stored beforehand, by id and 100 at a time;
// - delete: the service deleting plants stored beforehand for it, each once;
// - any of the service's targets with `@before`: the same, from the build at BENCH_BEFORE_BUILD
//   on a database of its own, so that one run compares two builds.
// It reports, per answer, the CPU of the target's process, of PostgreSQL and of the machine, and
// for the webhook targets how soon each plant reached every subscriber after its commit.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import {
  benchFolder,
  type CpuUse,
  fixed,
  insertPlants,
  markdownTable,
  measure,
  mebibytes,
  PLANT_NAME,
  plantBody,
  plantIds,
  type Receiver,
  type Session,
  type SuiteReport,
  say,
  startReceiver,
  startService,
  storePlants,
  withClient,
} from './harness.js';
import { type LoadRequest, type LoadResult, runLoad } from './load.js';
import { buildOf, endpointsOf } from './options.js';

const PAGE_SIZE = 100;
/**
 * Deletes per second no build reaches on these machines (each is a commit of its own): a delete
 * target without BENCH_RATE stores that many plants per second of its load. Should one run out,
 * its 404s are counted as errors.
 */
const DELETES_PER_SECOND_CEILING = 30_000;

/** The plants a delete target stores for itself: ids `first` to `first + count - 1`. */
interface Deletable {
  first: bigint;
  count: number;
}

interface Deliveries {
  subscribers: number;
  plants: number;
  /** Plants that reached every subscriber, and deliveries beyond one per subscriber. */
  complete: number;
  duplicates: number;
  /** Deliveries still owed when the load ended. */
  behindAtEnd: number;
  /** From the plant's created_at to its first delivery's arrival, ms. */
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
}

interface Run extends LoadResult {
  target: string;
  connections: number;
  peakRssBytes: number | undefined;
  cpu: CpuUse;
  deliveries?: Deliveries;
}

const quantile = (sorted: number[], q: number) =>
  sorted.length === 0 ? null : (sorted[Math.floor(q * (sorted.length - 1))] ?? null);

/** The plants created since `sinceMs`, with their created_at in ms. */
const plantsSince = (session: Session, sinceMs: number) =>
  withClient(session, async (client) => {
    const { rows } = await client.query<{ id: string; ms: number }>(
      `select id::text as id, (extract(epoch from created_at) * 1000)::float8 as ms
         from plants where created_at >= to_timestamp($1::float8 / 1000)`,
      [sinceMs],
    );
    return rows;
  });

/** Waits (30 s, and 0.6 s more per subscriber, at most) for every plant's deliveries. */
async function measureDeliveries(
  session: Session,
  receiver: Receiver,
  sinceMs: number,
  subscribers: number,
): Promise<Deliveries> {
  let plants = await plantsSince(session, sinceMs);
  const behindAtEnd = Math.max(
    0,
    subscribers * plants.length - (await receiver.ask('count')).requests,
  );
  const deadline = Date.now() + 30_000 + 600 * subscribers;
  while ((await receiver.ask('count')).requests < subscribers * plants.length) {
    if (Date.now() > deadline || session.signal.aborted) break;
    await new Promise((resolve) => setTimeout(resolve, 250));
    plants = await plantsSince(session, sinceMs);
  }
  const arrivals = new Map(
    (await receiver.ask('report')).arrivals.map(([id, first, count]) => [id, { first, count }]),
  );
  const latencies: number[] = [];
  let complete = 0;
  let duplicates = 0;
  for (const plant of plants) {
    const arrived = arrivals.get(plant.id);
    if (!arrived) continue;
    latencies.push(arrived.first - plant.ms);
    if (arrived.count >= subscribers) complete++;
    duplicates += Math.max(0, arrived.count - subscribers);
  }
  latencies.sort((a, b) => a - b);
  return {
    subscribers,
    plants: plants.length,
    complete,
    duplicates,
    behindAtEnd,
    p50Ms: quantile(latencies, 0.5),
    p99Ms: quantile(latencies, 0.99),
    maxMs: latencies.at(-1) ?? null,
  };
}

/**
 * Subscribes `count` endpoints straight in the table, as the management API would (a path of
 * the receiver each, a key of its own, unsealed: the service runs without an encryption key).
 */
const subscribe = (session: Session, url: string, count: number) =>
  withClient(session, async (client) => {
    const urls = Array.from({ length: count }, (_, i) => `${url}/${i + 1}`);
    const secrets = urls.map(() => `plain:whsec_${randomBytes(32).toString('base64')}`);
    await client.query(
      'insert into webhook_endpoints (url, secret) select * from unnest($1::text[], $2::text[])',
      [urls, secrets],
    );
  });

/** A plant for every request of a delete target's warm-up and load, and some to spare. */
async function storeDeletable(session: Session, connections: number): Promise<Deletable> {
  const { options } = session;
  const seconds = options.warmupSeconds + options.durationSeconds;
  const rate = options.rate ?? DELETES_PER_SECOND_CEILING;
  const count = Math.ceil(seconds * rate * 1.1) + connections;
  const first = plantIds()();
  say(`  storing ${count} plants to delete`);
  await insertPlants(session, count, first, 1n);
  return { first, count };
}

/** The requests of a target: a new plant, a stored one, a page, or a stored plant to delete. */
function requestsOf(
  kind: string,
  stored: { count: number; step: bigint },
  deletable: Deletable | undefined,
): () => LoadRequest {
  const random = (below: number) => BigInt(Math.floor(Math.random() * below));
  if (kind === 'get-by-id') {
    return () => ({ method: 'GET', path: `/plants/${(random(stored.count) + 1n) * stored.step}` });
  }
  if (kind === 'get-page') {
    return () => ({
      method: 'GET',
      path: `/plants?limit=${PAGE_SIZE}&after=${random(stored.count - PAGE_SIZE) * stored.step}`,
    });
  }
  if (deletable) {
    let id = deletable.first;
    return () => ({ method: 'DELETE', path: `/plants/${id++}` });
  }
  const nextId = plantIds();
  return () => ({ method: 'POST', path: '/plants', body: plantBody(nextId()) });
}

/** Runs one target on the session of its build. */
async function runTarget(
  session: Session,
  target: string,
  connections: number,
  stored: { count: number; step: bigint },
): Promise<Run> {
  const { options } = session;
  const { kind } = buildOf(target);
  const endpoints = endpointsOf(target);
  const subscribers = kind === 'service+webhooks' ? 1 : endpoints;
  const receiver = subscribers === undefined ? undefined : await startReceiver();
  const env: Record<string, string> =
    endpoints !== undefined
      ? { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' }
      : receiver
        ? {
            WEBHOOK_URLS: `${receiver.url}/webhooks/plants`,
            WEBHOOK_SECRET: `whsec_${randomBytes(32).toString('base64')}`,
          }
        : {};
  const entry = kind === 'floor' ? join(benchFolder, 'floor.js') : undefined;
  const deletable = kind === 'delete' ? await storeDeletable(session, connections) : undefined;
  const startedAt = Date.now();
  const service = await startService(session, `${target}-${connections}`, env, entry);
  try {
    // Before the first create: an endpoint gets the events recorded after it was made.
    if (receiver && endpoints !== undefined) await subscribe(session, receiver.url, endpoints);
    await withClient(session, (client) => client.query('vacuum analyze plants'));
    await session.admin.query('checkpoint');
    const next = requestsOf(kind, stored, deletable);
    const { token, signal } = session;
    const common = {
      baseUrl: service.baseUrl,
      token,
      connections,
      next,
      rate: options.rate,
      signal,
    };
    if (options.warmupSeconds > 0) await runLoad({ ...common, seconds: options.warmupSeconds });
    const { result, cpu, peakRssBytes } = await measure(
      session,
      service.pid,
      receiver ? { receiver: receiver.pid } : {},
      () => runLoad({ ...common, seconds: options.durationSeconds }),
    );
    if (service.exited()) throw new Error(`${target} exited during the load`);
    const run: Run = { target, connections, ...result, peakRssBytes, cpu };
    if (receiver && subscribers !== undefined) {
      run.deliveries = await measureDeliveries(session, receiver, startedAt, subscribers);
    }
    return run;
  } finally {
    const exit = await service.stop();
    if (exit !== 0) say(`  ${target} stopped with ${exit}`);
    receiver?.stop();
    // The next target starts with no subscriber; their deliveries and attempts go with them.
    if (endpoints !== undefined) {
      await withClient(session, (client) => client.query('truncate webhook_endpoints cascade'));
    }
    // Nor with the plants a delete target left.
    if (deletable) {
      await withClient(session, (client) =>
        client.query('delete from plants where id between $1::int8 and $2::int8', [
          String(deletable.first),
          String(deletable.first + BigInt(deletable.count - 1)),
        ]),
      );
    }
  }
}

/** Microseconds of CPU per answer, or per plant delivered to a subscriber. */
const perAnswer = (cores: number | undefined, throughput: number) =>
  cores === undefined || throughput === 0 ? undefined : (cores * 1e6) / throughput;

function levelTables(runs: Run[], connections: number): string {
  const at = runs.filter((run) => run.connections === connections);
  const rows = at.map((run) => [
    run.target,
    fixed(run.throughput, 0),
    fixed(run.p50Ms, 2),
    fixed(run.p99Ms, 2),
    String(run.errors),
    mebibytes(run.peakRssBytes),
    ...[run.cpu.service, run.cpu.postgres, run.cpu.machine].map((cores) =>
      fixed(perAnswer(cores, run.throughput), 1),
    ),
  ]);
  const cpu = (target: string, withPostgres = false) => {
    const run = at.find((candidate) => candidate.target === target);
    if (!run) return undefined;
    const own = perAnswer(run.cpu.service, run.throughput);
    const postgres = withPostgres ? perAnswer(run.cpu.postgres, run.throughput) : 0;
    return own === undefined || postgres === undefined ? undefined : own + postgres;
  };
  const ratio = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined ? '-' : (a / b).toFixed(2);
  // Each @before target against the same target of this build.
  const builds = at
    .filter((run) => buildOf(run.target).before)
    .map((run) => [buildOf(run.target).kind, run.target]);
  const ratios = [
    ['service', 'floor'],
    ['get-by-id', 'service'],
    ['get-page', 'service'],
    ['service+webhooks', 'service'],
    ...builds,
  ]
    .map(([a = '', b = '']) => [
      `${a} / ${b}`,
      ratio(cpu(a), cpu(b)),
      b === 'floor' ? '-' : ratio(cpu(a, true), cpu(b, true)),
    ])
    .filter((row) => row[1] !== '-');
  const delivered = at.flatMap(({ target, deliveries: d, cpu }) =>
    d
      ? [
          [
            target,
            ...[d.subscribers, d.plants, d.complete, d.duplicates, d.behindAtEnd].map(String),
            ...[d.p50Ms, d.p99Ms, d.maxMs].map((ms) => fixed(ms, 1)),
            fixed(cpu.others.receiver, 2),
          ],
        ]
      : [],
  );
  return [
    `## ${connections} connection${connections === 1 ? '' : 's'}`,
    markdownTable(
      (
        'target|answers/s|p50 ms|p99 ms|errors|peak RSS MiB|' +
        'CPU µs/answer: target|PostgreSQL|machine'
      ).split('|'),
      rows,
    ),
    ratios.length > 0
      ? markdownTable(['CPU per answer', 'target process', 'with PostgreSQL'], ratios)
      : '',
    delivered.length > 0
      ? markdownTable(
          (
            'target|subscribers|plants|reached all|duplicates|owed at end|' +
            'commit to delivery p50 ms|p99 ms|max ms|receiver cores'
          ).split('|'),
          delivered,
        )
      : '',
  ]
    .filter((part) => part !== '')
    .join('\n\n');
}

export async function targetsSuite(session: Session): Promise<SuiteReport> {
  const { options } = session;
  say(`storing ${options.readPlants} plants for the reads`);
  const stored = await storePlants(session, options.readPlants);
  if (session.before) await storePlants(session.before, options.readPlants);
  const runs: Run[] = [];
  let failed = false;
  for (const connections of options.connections) {
    say(`\n== ${connections} connections`);
    for (const target of options.targets) {
      if (session.signal.aborted) throw new Error('interrupted');
      try {
        const build = buildOf(target).before ? session.before : session;
        if (!build) throw new Error('no session for the build at BENCH_BEFORE_BUILD');
        const run = await runTarget(build, target, connections, stored);
        runs.push(run);
        say(
          `  ${target}: ${fixed(run.throughput, 0)}/s, p99 ${fixed(run.p99Ms, 2)} ms, ` +
            `${run.errors} errors, ${fixed(perAnswer(run.cpu.service, run.throughput), 1)} µs CPU/answer`,
        );
      } catch (error) {
        if (session.signal.aborted) throw error;
        failed = true;
        process.stderr.write(`bench: ${target} at ${connections}: ${(error as Error).message}\n`);
      }
    }
  }
  const rate = options.rate === undefined ? 'as fast as answered' : `${options.rate} requests/s`;
  const before = session.before
    ? ` Targets marked @before ran the service built at ${session.before.root}, on a database of its own that build migrated.`
    : '';
  return {
    title: 'Plant Store benchmark',
    body: `Each target ran ${options.warmupSeconds} s of warm-up, then ${options.durationSeconds} s measured, ${rate}, from autocannon in the harness's process; ${PLANT_NAME} plants with fresh ids for creates, ${options.readPlants} plants stored beforehand for the reads (a page is ${PAGE_SIZE} of them), plants stored beforehand for each delete target, each deleted once (a 404 is an error).${before} CPU is per 2xx answer: of the target's process, of every PostgreSQL process together (without other databases' client backends), and of the whole machine. Commit to delivery runs from the plant's created_at to the first delivery's arrival at the receiver.

${options.connections.map((connections) => levelTables(runs, connections)).join('\n\n')}`,
    failed,
  };
}
