import { existsSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';

/** What `npm run bench -- <suite>` measures; `targets` when none is named. */
export const SUITES = ['targets', 'soak', 'replicas'] as const;
export type Suite = (typeof SUITES)[number];

/** The targets run unless BENCH_TARGETS names others (service+endpoints-N among them). */
const DEFAULT_TARGETS = ['floor', 'service', 'service+webhooks', 'get-by-id', 'get-page'];
/** A service target with `@before` runs the build at BENCH_BEFORE_BUILD instead of this one. */
const TARGET =
  /^(floor|(service|service\+webhooks|service\+endpoints-\d+|get-by-id|get-page|delete)(@before)?)$/;

/** A target's name without its build, and whether it runs the build at BENCH_BEFORE_BUILD. */
export function buildOf(target: string): { kind: string; before: boolean } {
  const [kind = target, build] = target.split('@');
  return { kind, before: build === 'before' };
}

/** The webhook endpoints a service+endpoints-N target subscribes; undefined for the others. */
export function endpointsOf(target: string): number | undefined {
  const match = /^service\+endpoints-(\d+)$/.exec(buildOf(target).kind);
  return match ? Number(match[1]) : undefined;
}

export interface BenchOptions {
  suite: Suite;
  /** The server the bench creates its own database on (and drops it afterwards). */
  databaseUrl: string;
  resultsFolder: string;
  connections: number[];
  durationSeconds: number;
  warmupSeconds: number;
  /** Requests per second each load is held at; undefined: as many as answered. */
  rate: number | undefined;
  targets: string[];
  /** Another checkout, built, whose dist/ the `@before` targets run; undefined: none. */
  beforeBuild: string | undefined;
  /** Plants stored before the runs, for the reads. */
  readPlants: number;
  /** soak and replicas: rounds; soak: the share of creates that replay one (%), and what it sends. */
  rounds: number;
  replayPercent: number;
  soakLoad: 'mixed' | 'creates';
  soakWebhooks: 'unruly' | 'off';
  /** soak: the service's NODE_OPTIONS (the shipped flags when empty) and MALLOC_ARENA_MAX. */
  serviceNodeOptions: string;
  serviceMallocArenaMax: string;
  /** soak: after these rounds the service writes a heap snapshot. */
  heapSnapshotRounds: number[];
}

/** Each suite's defaults for the options they share. */
const DEFAULTS = {
  targets: { connections: '1,16,64,256', duration: '10', warmup: '3', rounds: '6', rate: '' },
  soak: { connections: '32', duration: '180', warmup: '0', rounds: '6', rate: '' },
  // Three rounds of five configurations in about three minutes; at one rate, so CPU per read compares.
  replicas: { connections: '32', duration: '5', warmup: '2', rounds: '3', rate: '1000' },
};

export class OptionsError extends Error {
  override name = 'OptionsError';
}

function integer(name: string, raw: string, minimum = 1): number {
  const value = Number(raw.trim());
  if (!/^\d+$/.test(raw.trim()) || value < minimum || !Number.isSafeInteger(value)) {
    throw new OptionsError(`${name} must be an integer of at least ${minimum}, not "${raw}"`);
  }
  return value;
}

function oneOf<T extends string>(name: string, raw: string, values: readonly T[]): T {
  const value = values.find((known) => known === raw.trim());
  if (value === undefined) throw new OptionsError(`${name} must be one of ${values.join(', ')}`);
  return value;
}

const list = (raw: string) =>
  raw
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');

/** The suite (the first argument, else BENCH_SUITE) and the BENCH_* variables. */
export function readOptions(env: NodeJS.ProcessEnv, args: string[], root: string): BenchOptions {
  const get = (name: string, fallback: string) => env[name]?.trim() || fallback;
  const suite = oneOf('the suite', args[0] ?? get('BENCH_SUITE', 'targets'), SUITES);
  const defaults = DEFAULTS[suite];
  const databaseUrl = get('BENCH_DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/postgres');
  if (!/^postgres(ql)?:\/\//.test(databaseUrl) || !URL.canParse(databaseUrl)) {
    throw new OptionsError('BENCH_DATABASE_URL must be a postgres:// URL');
  }
  const connections = list(get('BENCH_CONNECTIONS', defaults.connections)).map((item) =>
    integer('BENCH_CONNECTIONS', item),
  );
  if (connections.length === 0 || (suite !== 'targets' && connections.length > 1)) {
    throw new OptionsError(
      'BENCH_CONNECTIONS: one level or more (the soak and replicas run at one)',
    );
  }
  const targets = list(get('BENCH_TARGETS', DEFAULT_TARGETS.join(',')));
  const unknown = targets.find((target) => !TARGET.test(target));
  if (unknown) throw new OptionsError(`BENCH_TARGETS: unknown target "${unknown}"`);
  const before = get('BENCH_BEFORE_BUILD', '');
  const beforeBuild = before === '' ? undefined : resolve(root, before);
  if (beforeBuild === undefined && targets.some((target) => buildOf(target).before)) {
    throw new OptionsError('BENCH_TARGETS: an @before target needs BENCH_BEFORE_BUILD');
  }
  const missing = ['server.js', 'migrate.js'].find(
    (file) => beforeBuild !== undefined && !existsSync(join(beforeBuild, 'dist', file)),
  );
  if (missing) {
    throw new OptionsError(`BENCH_BEFORE_BUILD: no dist/${missing} (npm run build there)`);
  }
  const replayPercent = integer('BENCH_REPLAY_PERCENT', get('BENCH_REPLAY_PERCENT', '5'), 0);
  if (replayPercent > 100) throw new OptionsError('BENCH_REPLAY_PERCENT must be at most 100');
  const results = get('BENCH_RESULTS_DIR', join('bench', 'results'));
  const rate = get('BENCH_RATE', defaults.rate);
  const arenas = get('BENCH_MALLOC_ARENA_MAX', '');
  return {
    suite,
    databaseUrl,
    resultsFolder: isAbsolute(results) ? results : join(root, results),
    connections: [...new Set(connections)],
    durationSeconds: integer(
      'BENCH_DURATION_SECONDS',
      get('BENCH_DURATION_SECONDS', defaults.duration),
    ),
    warmupSeconds: integer('BENCH_WARMUP_SECONDS', get('BENCH_WARMUP_SECONDS', defaults.warmup), 0),
    rate: rate === '' ? undefined : integer('BENCH_RATE', rate),
    targets: [...new Set(targets)],
    beforeBuild,
    readPlants: integer('BENCH_READ_PLANTS', get('BENCH_READ_PLANTS', '100000'), 1000),
    rounds: integer('BENCH_ROUNDS', get('BENCH_ROUNDS', defaults.rounds)),
    replayPercent,
    soakLoad: oneOf('BENCH_SOAK_LOAD', get('BENCH_SOAK_LOAD', 'mixed'), ['mixed', 'creates']),
    soakWebhooks: oneOf('BENCH_SOAK_WEBHOOKS', get('BENCH_SOAK_WEBHOOKS', 'unruly'), [
      'unruly',
      'off',
    ]),
    serviceNodeOptions: get('BENCH_NODE_OPTIONS', ''),
    serviceMallocArenaMax: arenas === '' ? '' : String(integer('BENCH_MALLOC_ARENA_MAX', arenas)),
    heapSnapshotRounds: list(get('BENCH_HEAP_SNAPSHOT_ROUNDS', '')).map((item) =>
      integer('BENCH_HEAP_SNAPSHOT_ROUNDS', item),
    ),
  };
}
