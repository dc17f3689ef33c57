// The replicas suite, `npm run bench -- replicas`: reads by id on a primary and two streaming
// replicas of the suite's own (topology.ts), BENCH_ROUNDS rounds of these configurations, each in
// a service process of its own started once, all held at one request rate (BENCH_RATE):
// - primary only: the service with no DATABASE_REPLICA_URLS, reading stored plants at random;
// - primary only @before: the same, from the build at BENCH_BEFORE_BUILD (when it is set);
// - replicas, no token: DATABASE_REPLICA_URLS naming both replicas, the same reads;
// - replicas, 1-s-old token: reads of the plants a writer created a second before, each sending
//   the Consistency-Token that plant's create answered;
// - replicas, fresh token: the same with the newest token the writer holds.
// Throughout every round, a writer (another service process, with the replicas) creates plants
// at WRITES_PER_SECOND, so that the primary moves on while the reads run and tokens exist. It
// reports the CPU per read of the service's process, of the primary and of the replicas, and
// where the reads went, from the service's plant_store_db_reads_total.
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import {
  fixed,
  markdownTable,
  measure,
  type Service,
  type Session,
  type SuiteReport,
  say,
  startService,
  storePlants,
} from './harness.js';
import { type LoadRequest, type LoadResult, runLoad } from './load.js';
import { readServersCpu, serversCpuBetween, type Topology, urlOn } from './topology.js';
import { startWriter, type Writer } from './writer.js';

/** How old a token is, at least, in the configuration that reads a second after the write. */
const AGED_TOKEN_MS = 1000;

interface Configuration {
  name: string;
  before: boolean;
  replicas: boolean;
  /** The token each read sends: none, one written AGED_TOKEN_MS before, or the newest. */
  token: 'none' | 'aged' | 'fresh';
}

const CONFIGURATIONS: Configuration[] = [
  { name: 'primary only', before: false, replicas: false, token: 'none' },
  { name: 'primary only @before', before: true, replicas: false, token: 'none' },
  { name: 'replicas, no token', before: false, replicas: true, token: 'none' },
  { name: 'replicas, 1-s-old token', before: false, replicas: true, token: 'aged' },
  { name: 'replicas, fresh token', before: false, replicas: true, token: 'fresh' },
];
const BASELINE = 'primary only';

interface Run extends LoadResult {
  configuration: string;
  round: number;
  /** Cores' worth of CPU while measured: the service's process, the primary, the replicas. */
  service?: number;
  primary?: number;
  replicas?: number;
  /** Reads counted by plant_store_db_reads_total while measured, by `replica` or `primary:why`. */
  reads?: Map<string, number>;
  /** How old the tokens sent were, ms. */
  tokenAgeMeanMs?: number;
  tokenAgeMaxMs?: number;
}

/** plant_store_db_reads_total's counts, by `replica` or `primary:<reason>`. */
async function readsByServer(baseUrl: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const counts = new Map<string, number>();
  for (const match of text.matchAll(/^plant_store_db_reads_total\{([^}]*)\} (\S+)$/gm)) {
    const labels = new Map(
      [...(match[1] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]),
    );
    const key = labels.get('server') === 'primary' ? `primary:${labels.get('reason')}` : 'replica';
    counts.set(key, (counts.get(key) ?? 0) + Number(match[2]));
  }
  return counts;
}

const difference = (after: Map<string, number>, before: Map<string, number>) =>
  new Map([...after].map(([key, count]) => [key, count - (before.get(key) ?? 0)]));

/** Token ages of one load's requests. */
interface Ages {
  sumMs: number;
  maxMs: number;
  count: number;
}

/** The requests of a configuration: a stored plant, or a written one with its token. */
function requestsOf(
  configuration: Configuration,
  stored: { count: number; step: bigint },
  writer: Writer,
  ages: Ages,
): () => LoadRequest {
  if (configuration.token === 'none') {
    return () => ({
      method: 'GET',
      path: `/plants/${BigInt(1 + Math.floor(Math.random() * stored.count)) * stored.step}`,
    });
  }
  const minimumAgeMs = configuration.token === 'aged' ? AGED_TOKEN_MS : 0;
  let index = 0;
  return () => {
    const now = performance.now();
    const { written } = writer;
    // The newest plant at least `minimumAgeMs` old (written in order of their answers).
    while ((written[index + 1]?.at ?? Number.POSITIVE_INFINITY) <= now - minimumAgeMs) index++;
    const plant = written[index];
    if (plant === undefined) throw new Error('the writer has written nothing yet');
    const age = now - plant.at;
    ages.sumMs += age;
    ages.maxMs = Math.max(ages.maxMs, age);
    ages.count++;
    return {
      method: 'GET',
      path: `/plants/${plant.id}`,
      headers: { 'consistency-token': plant.token },
    };
  };
}

/** A configuration's service, started once and measured in every round. */
interface Started {
  configuration: Configuration;
  build: Session;
  service: Service;
}

async function startConfiguration(
  session: Session,
  topology: Topology,
  configuration: Configuration,
): Promise<Started> {
  const build = configuration.before ? session.before : session;
  if (!build) throw new Error('no session for the build at BENCH_BEFORE_BUILD');
  const env: Record<string, string> = configuration.replicas
    ? { DATABASE_REPLICA_URLS: replicaUrls(build, topology) }
    : {};
  const service = await startService(build, configuration.name.replace(/\W+/g, '-'), env);
  return { configuration, build, service };
}

/** A warm-up, then the measured load, of one configuration's service. */
async function measureConfiguration(
  { configuration, build, service }: Started,
  topology: Topology,
  round: number,
  stored: { count: number; step: bigint },
  writer: Writer,
): Promise<Run> {
  const { options } = build;
  await build.admin.query('checkpoint');
  const common = {
    baseUrl: service.baseUrl,
    token: build.token,
    connections: options.connections[0] ?? 1,
    rate: options.rate,
    signal: build.signal,
  };
  if (options.warmupSeconds > 0) {
    const next = requestsOf(configuration, stored, writer, { sumMs: 0, maxMs: 0, count: 0 });
    await runLoad({ ...common, next, seconds: options.warmupSeconds });
  }
  const ages: Ages = { sumMs: 0, maxMs: 0, count: 0 };
  const next = requestsOf(configuration, stored, writer, ages);
  const readsBefore = configuration.replicas ? await readsByServer(service.baseUrl) : undefined;
  const { result, cpu } = await measure(build, service.pid, {}, async () => {
    const from = readServersCpu(topology);
    const load = await runLoad({ ...common, next, seconds: options.durationSeconds });
    return { load, servers: serversCpuBetween(from, readServersCpu(topology)) };
  });
  if (service.exited()) {
    const log = readFileSync(service.logFile, 'utf8').slice(-2000);
    throw new Error(`${configuration.name} exited during the load: ${log}`);
  }
  const { load, servers } = result;
  const seconds = options.durationSeconds;
  return {
    configuration: configuration.name,
    round,
    ...load,
    service: cpu.service,
    ...(servers.primary !== undefined && { primary: servers.primary / seconds }),
    ...(servers.standbys !== undefined && { replicas: servers.standbys / seconds }),
    ...(readsBefore && {
      reads: difference(await readsByServer(service.baseUrl), readsBefore),
    }),
    ...(ages.count > 0 && {
      tokenAgeMeanMs: ages.sumMs / ages.count,
      tokenAgeMaxMs: ages.maxMs,
    }),
  };
}

/** DATABASE_REPLICA_URLS for the session's database: the same database on each standby. */
const replicaUrls = (session: Session, topology: Topology) =>
  topology.standbys.map((standby) => urlOn(standby, session.databaseUrl)).join(',');

/** Microseconds of CPU per read answered. */
const perRead = (cores: number | undefined, throughput: number) =>
  cores === undefined || throughput === 0 ? undefined : (cores * 1e6) / throughput;

const median = (values: number[]) => {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return undefined;
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? sorted[middle]
    : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
};

/** The median of `values`, and their range when there are several. */
function withRange(values: Array<number | undefined>, digits: number): string {
  const known = values.filter((value): value is number => value !== undefined);
  const middle = median(known);
  if (middle === undefined) return '-';
  if (known.length < 2) return fixed(middle, digits);
  return `${fixed(middle, digits)} (${fixed(Math.min(...known), digits)} to ${fixed(Math.max(...known), digits)})`;
}

const REASONS = ['behind', 'timeline', 'fault', 'none'];

/** Reads on the primary among those counted, as a percentage. */
function primaryShare(reads: Map<string, number> | undefined): number | undefined {
  if (!reads) return undefined;
  const total = [...reads.values()].reduce((sum, n) => sum + n, 0);
  return total === 0 ? undefined : (100 * (total - (reads.get('replica') ?? 0))) / total;
}

function roundsTable(runs: Run[]): string {
  return markdownTable(
    (
      'round|configuration|reads/s|p50 ms|p99 ms|errors|token age mean / max ms|' +
      'on a replica|on the primary: behind|timeline|fault|none|' +
      'CPU µs/read: service|primary|replicas'
    ).split('|'),
    runs.map((run) => [
      String(run.round),
      run.configuration,
      fixed(run.throughput, 0),
      fixed(run.p50Ms, 2),
      fixed(run.p99Ms, 2),
      String(run.errors),
      run.tokenAgeMeanMs === undefined
        ? '-'
        : `${fixed(run.tokenAgeMeanMs, 0)} / ${fixed(run.tokenAgeMaxMs, 0)}`,
      ...['replica', ...REASONS.map((reason) => `primary:${reason}`)].map((key) =>
        run.reads ? String(run.reads.get(key) ?? 0) : '-',
      ),
      ...[run.service, run.primary, run.replicas].map((cores) =>
        fixed(perRead(cores, run.throughput), 1),
      ),
    ]),
  );
}

function summaryTable(runs: Run[], configurations: Configuration[]): string {
  const baseline = new Map(
    runs
      .filter((run) => run.configuration === BASELINE)
      .map((run) => [run.round, perRead(run.service, run.throughput)]),
  );
  const rows = configurations.map(({ name }) => {
    const of = runs.filter((run) => run.configuration === name);
    const service = of.map((run) => perRead(run.service, run.throughput));
    // Against the baseline of the same round: both ran at one rate within a minute of each other.
    const added = of.map((run, index) => {
      const base = baseline.get(run.round);
      const own = service[index];
      return base === undefined || own === undefined ? undefined : own - base;
    });
    const reads = of.reduce<Map<string, number> | undefined>(
      (sum, run) =>
        run.reads
          ? new Map([...run.reads].map(([key, n]) => [key, n + (sum?.get(key) ?? 0)]))
          : sum,
      undefined,
    );
    return [
      name,
      withRange(
        of.map((run) => run.throughput),
        0,
      ),
      withRange(service, 1),
      name === BASELINE ? '-' : withRange(added, 1),
      withRange(
        of.map((run) => perRead(run.primary, run.throughput)),
        1,
      ),
      withRange(
        of.map((run) => perRead(run.replicas, run.throughput)),
        1,
      ),
      fixed(primaryShare(reads), 2),
    ];
  });
  return markdownTable(
    (
      'configuration|reads/s|service CPU µs/read|minus primary only, same round|' +
      'primary µs/read|replicas µs/read|reads on the primary %'
    ).split('|'),
    rows,
  );
}

export async function replicasSuite(session: Session, topology: Topology): Promise<SuiteReport> {
  const { options } = session;
  say(`storing ${options.readPlants} plants for the reads`);
  const stored = await storePlants(session, options.readPlants);
  if (session.before) await storePlants(session.before, options.readPlants);
  const configurations = CONFIGURATIONS.filter((c) => !c.before || session.before);
  const writerService = await startService(session, 'writer', {
    DATABASE_REPLICA_URLS: replicaUrls(session, topology),
  });
  const writer = startWriter(writerService.baseUrl, session.token);
  const started: Started[] = [];
  const runs: Run[] = [];
  let failed = false;
  const startedAt = new Date();
  try {
    for (const configuration of configurations) {
      started.push(await startConfiguration(session, topology, configuration));
    }
    await writer.aged(AGED_TOKEN_MS);
    for (let round = 1; round <= options.rounds; round++) {
      say(`\n== round ${round}`);
      // Every other round runs the other way round, so that a drift of the machine falls on each.
      const order = round % 2 === 1 ? started : [...started].reverse();
      for (const each of order) {
        if (session.signal.aborted) throw new Error('interrupted');
        const { name } = each.configuration;
        try {
          const run = await measureConfiguration(each, topology, round, stored, writer);
          runs.push(run);
          say(
            `  ${name}: ${fixed(run.throughput, 0)}/s, ${run.errors} errors, ` +
              `${fixed(perRead(run.service, run.throughput), 1)} µs CPU/read, ` +
              `${fixed(primaryShare(run.reads), 2)} % on the primary`,
          );
        } catch (error) {
          if (session.signal.aborted) throw error;
          failed = true;
          process.stderr.write(`bench: ${name}: ${(error as Error).message}\n`);
        }
      }
    }
  } finally {
    await writer.stop();
    for (const { configuration, service } of [...started, { service: writerService }]) {
      const exit = await service.stop();
      if (exit !== 0) say(`  ${configuration?.name ?? 'the writer'} stopped with ${exit}`);
    }
  }
  const endedAt = new Date();
  for (const [why, count] of writer.failures) {
    failed = true;
    process.stderr.write(`bench: ${count} of the writer's creates failed: ${why}\n`);
  }
  runs.sort((a, b) => a.round - b.round);
  const rate = options.rate === undefined ? 'as fast as answered' : `${options.rate} reads/s`;
  const before = session.before
    ? ` The @before configuration ran the service built at ${session.before.root}, on a database of its own on the same primary, which that build migrated.`
    : '';
  const time = (date: Date) => date.toISOString().slice(11, 19);
  return {
    title: 'Reads from replicas: where reads go, and what choosing costs',
    body: `A primary and ${topology.standbys.length} streaming replicas of it (asynchronous, no apply delay), each a PostgreSQL server of this run's own on this machine. ${options.rounds} rounds from ${time(startedAt)} to ${time(endedAt)} UTC (load average ${loadavg()
      .map((value) => value.toFixed(2))
      .join(
        ', ',
      )} at the end), every other one in reverse order; each configuration in a service process of its own, started once before the first round, in each round ${options.warmupSeconds} s of warm-up then ${options.durationSeconds} s measured, ${rate} of \`GET /plants/{id}\` from ${options.connections[0]} connections. Reads without a token ask for one of ${options.readPlants} plants stored beforehand, at random. Throughout, a writer (another process of this build, with the replicas) created ${writer.written.length} plants through \`POST /plants\`, ${writer.perSecond} a second; reads with a token ask for a plant it created and send the \`Consistency-Token\` that create answered: the newest at least ${AGED_TOKEN_MS} ms old, or the newest of all (fresh).${before} CPU is per read answered 2xx: of the service's process, and of every process of the primary and of the replicas (the writer's creates and both services' polls included; they are the same in every configuration). Where the reads went is the service's \`plant_store_db_reads_total\` over the measured seconds; an error is any answer but 2xx (a 404 would be a read that missed its own write).

## Summary

Medians of the rounds, with their range.

${summaryTable(runs, configurations)}

## Every round

${roundsTable(runs)}`,
    failed,
  };
}
