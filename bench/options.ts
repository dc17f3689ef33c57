import { availableParallelism } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { projectRoot } from './paths.js';

/** What `npm run bench -- <suite>` measures; `targets` when none is named. */
export const SUITES = ['targets', 'start', 'engines', 'pooler', 'soak'] as const;
export type Suite = (typeof SUITES)[number];

const TARGETS = [
  'floor',
  'service',
  'service+webhooks',
  'service+endpoints-1',
  'service+endpoints-10',
  'service+endpoints-100',
  'service-traced',
  'service-unbatched',
  'http-ceiling',
  'pgbench',
  'get-by-id',
  'get-by-id-unbatched',
  'get-page',
] as const;
export type Target = (typeof TARGETS)[number];

/** The webhook endpoints a service+endpoints-N target subscribes; undefined for the others. */
export function endpointsOf(target: Target): number | undefined {
  const match = /^service\+endpoints-(\d+)$/.exec(target);
  return match ? Number(match[1]) : undefined;
}

export interface BenchOptions {
  suite: Suite;
  /** The server the bench creates its own database on (and drops it afterwards). */
  databaseUrl: string;
  /** Where the suite's Markdown report goes. */
  resultsFolder: string;
  connections: number[];
  durationSeconds: number;
  warmupSeconds: number;
  /** start: starts of each kind; pooler: alternated rounds of the variants. */
  rounds: number;
  /**
   * Requests per second each load is held at (all its connections together); undefined: as
   * many as answered. At one rate, CPU per answer compares targets under the same load.
   */
  rate: number | undefined;
  targets: Target[];
  pgbenchPath: string;
  /** pgbench --jobs; undefined: as many as cores, at most one per client. */
  pgbenchJobs: number | undefined;
  /** Connection slots pgbench leaves free for others on a shared server. */
  pgbenchSpareConnections: number;
  /** Plants stored before the runs, for the read targets to read. */
  readPlants: number;
  /** soak: share of requests, in percent, that replay an earlier body. */
  replayPercent: number;
  /** soak: seconds between two samples of the service's memory. */
  sampleSeconds: number;
  /**
   * soak: `mixed` (creates, reads by id, pages and deletes of what it created) or `creates`
   * (POST /plants alone).
   */
  soakLoad: 'mixed' | 'creates';
  /**
   * soak: `unruly` turns the webhook on, to receivers that answer well or badly (500, 429,
   * too late, never, a reset), each misbehaving in turn round after round; `off` leaves it off.
   */
  soakWebhooks: 'unruly' | 'off';
  /** soak: the service's NODE_OPTIONS (e.g. V8's heap limits); none when empty. */
  serviceNodeOptions: string;
  /** soak: the service's MALLOC_ARENA_MAX (glibc's malloc arenas); unset when empty. */
  serviceMallocArenaMax: string;
  /** soak: after these rounds the service writes a heap snapshot into the results folder. */
  heapSnapshotRounds: number[];
}

/** Each suite's defaults for the options they share. */
const DEFAULTS: Record<
  Suite,
  { connections: string; duration: string; warmup: string; rounds: string }
> = {
  targets: { connections: '1,16,64,256', duration: '10', warmup: '3', rounds: '1' },
  start: { connections: '1', duration: '1', warmup: '0', rounds: '5' },
  engines: { connections: '64', duration: '10', warmup: '0', rounds: '1' },
  pooler: { connections: '64', duration: '5', warmup: '2', rounds: '2' },
  soak: { connections: '32', duration: '180', warmup: '0', rounds: '6' },
};

export class OptionsError extends Error {
  override name = 'OptionsError';
}

/** `raw` as an integer of at least `minimum`; an OptionsError naming `name` otherwise. */
function positiveInteger(name: string, raw: string, minimum = 1): number {
  if (!/^\d+$/.test(raw.trim()) || Number(raw) < minimum || !Number.isSafeInteger(Number(raw))) {
    throw new OptionsError(`${name} must be an integer of at least ${minimum}, not "${raw}"`);
  }
  return Number(raw);
}

function oneOf<T extends string>(name: string, raw: string, values: readonly T[]): T {
  const value = values.find((known) => known === raw.trim());
  if (value === undefined) throw new OptionsError(`${name} must be one of ${values.join(', ')}`);
  return value;
}

function list(raw: string): string[] {
  return raw
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');
}

/**
 * The suite (the first argument, else BENCH_SUITE) and the BENCH_* environment variables; a bad
 * value throws an OptionsError naming it.
 */
export function readBenchOptions(env: NodeJS.ProcessEnv, args: string[]): BenchOptions {
  const get = (name: string, fallback: string) => {
    const value = env[name];
    return value === undefined || value.trim() === '' ? fallback : value;
  };

  const named = args[0] ?? get('BENCH_SUITE', 'targets');
  const suite = SUITES.find((known) => known === named);
  if (!suite) throw new OptionsError(`unknown suite "${named}": one of ${SUITES.join(', ')}`);
  const defaults = DEFAULTS[suite];

  const databaseUrl = get('BENCH_DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/postgres');
  if (!/^postgres(ql)?:\/\//.test(databaseUrl) || !URL.canParse(databaseUrl)) {
    throw new OptionsError('BENCH_DATABASE_URL must be a postgres:// URL');
  }

  const connections = list(get('BENCH_CONNECTIONS', defaults.connections)).map((item) =>
    positiveInteger('BENCH_CONNECTIONS', item),
  );
  if (connections.length === 0) throw new OptionsError('BENCH_CONNECTIONS lists no level');
  if (suite === 'soak' && connections.length > 1) {
    throw new OptionsError('BENCH_CONNECTIONS: the soak suite runs at one level');
  }

  // The endpoint targets only when named: unthrottled, 100 endpoints owe minutes of deliveries.
  const defaultTargets = TARGETS.filter((target) => endpointsOf(target) === undefined);
  const targets = list(get('BENCH_TARGETS', defaultTargets.join(','))).map((item) => {
    const target = TARGETS.find((known) => known === item);
    if (!target) throw new OptionsError(`BENCH_TARGETS: unknown target "${item}"`);
    return target;
  });

  const replayPercent = positiveInteger(
    'BENCH_REPLAY_PERCENT',
    get('BENCH_REPLAY_PERCENT', '5'),
    0,
  );
  if (replayPercent > 100) throw new OptionsError('BENCH_REPLAY_PERCENT must be at most 100');
  const results = get('BENCH_RESULTS_DIR', join('bench', 'results'));
  const jobs = get('BENCH_PGBENCH_JOBS', '');
  const rate = get('BENCH_RATE', '');
  return {
    suite,
    databaseUrl,
    resultsFolder: isAbsolute(results) ? results : join(projectRoot, results),
    connections: [...new Set(connections)],
    // pgbench -T takes whole seconds, so every load runs for a whole number of them.
    durationSeconds: positiveInteger(
      'BENCH_DURATION_SECONDS',
      get('BENCH_DURATION_SECONDS', defaults.duration),
    ),
    warmupSeconds: positiveInteger(
      'BENCH_WARMUP_SECONDS',
      get('BENCH_WARMUP_SECONDS', defaults.warmup),
      0,
    ),
    rounds: positiveInteger('BENCH_ROUNDS', get('BENCH_ROUNDS', defaults.rounds)),
    rate: rate === '' ? undefined : positiveInteger('BENCH_RATE', rate),
    targets: TARGETS.filter((target) => targets.includes(target)),
    pgbenchPath: get('BENCH_PGBENCH', 'pgbench'),
    pgbenchJobs: jobs === '' ? undefined : positiveInteger('BENCH_PGBENCH_JOBS', jobs),
    pgbenchSpareConnections: positiveInteger(
      'BENCH_PGBENCH_SPARE_CONNECTIONS',
      get('BENCH_PGBENCH_SPARE_CONNECTIONS', '20'),
      0,
    ),
    readPlants: positiveInteger('BENCH_READ_PLANTS', get('BENCH_READ_PLANTS', '100000'), 1000),
    replayPercent,
    sampleSeconds: positiveInteger('BENCH_SAMPLE_SECONDS', get('BENCH_SAMPLE_SECONDS', '10')),
    soakLoad: oneOf('BENCH_SOAK_LOAD', get('BENCH_SOAK_LOAD', 'mixed'), ['mixed', 'creates']),
    soakWebhooks: oneOf('BENCH_SOAK_WEBHOOKS', get('BENCH_SOAK_WEBHOOKS', 'unruly'), [
      'unruly',
      'off',
    ]),
    serviceNodeOptions: get('BENCH_NODE_OPTIONS', '').trim(),
    serviceMallocArenaMax:
      get('BENCH_MALLOC_ARENA_MAX', '') === ''
        ? ''
        : String(positiveInteger('BENCH_MALLOC_ARENA_MAX', get('BENCH_MALLOC_ARENA_MAX', ''))),
    heapSnapshotRounds: list(get('BENCH_HEAP_SNAPSHOT_ROUNDS', '')).map((item) =>
      positiveInteger('BENCH_HEAP_SNAPSHOT_ROUNDS', item),
    ),
  };
}

export function pgbenchJobsFor(clients: number, options: BenchOptions): number {
  return Math.min(clients, options.pgbenchJobs ?? availableParallelism());
}

/** The same server and credentials, another database. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** A URL safe to print: any password replaced. */
export function redactUrl(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = '***';
  return parsed.toString();
}
