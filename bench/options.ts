import { availableParallelism } from 'node:os';

export const TARGETS = [
  'floor',
  'service',
  'service+webhooks',
  'service-traced',
  'service-unbatched',
  'http-ceiling',
  'pgbench',
  'get-by-id',
  'get-by-id-unbatched',
  'get-page',
] as const;
export type Target = (typeof TARGETS)[number];

export interface BenchOptions {
  /** The server the bench creates its own database on (and drops it afterwards). */
  databaseUrl: string;
  connections: number[];
  durationSeconds: number;
  warmupSeconds: number;
  targets: Target[];
  pgbenchPath: string;
  /** pgbench --jobs; undefined: as many as cores, at most one per client. */
  pgbenchJobs: number | undefined;
  /** Connection slots pgbench leaves free for others on a shared server. */
  pgbenchSpareConnections: number;
  /** Plants stored before the runs, for the read targets to read. */
  readPlants: number;
  /**
   * Requests per second each target is held at (all its connections together); undefined: as
   * many as it answers. At one rate, CPU per answer compares targets under the same load.
   */
  rate: number | undefined;
}

export class OptionsError extends Error {
  override name = 'OptionsError';
}

/** `raw` as an integer of at least `minimum`; an OptionsError naming `name` otherwise. */
export function positiveInteger(name: string, raw: string, minimum = 1): number {
  if (!/^\d+$/.test(raw.trim()) || Number(raw) < minimum || !Number.isSafeInteger(Number(raw))) {
    throw new OptionsError(`${name} must be an integer of at least ${minimum}, not "${raw}"`);
  }
  return Number(raw);
}

function list(raw: string): string[] {
  return raw
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');
}

/** Reads the BENCH_* environment variables; a bad value throws an OptionsError naming it. */
export function readBenchOptions(env: NodeJS.ProcessEnv): BenchOptions {
  const get = (name: string, fallback: string) => {
    const value = env[name];
    return value === undefined || value.trim() === '' ? fallback : value;
  };

  const databaseUrl = get('BENCH_DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/postgres');
  if (!/^postgres(ql)?:\/\//.test(databaseUrl) || !URL.canParse(databaseUrl)) {
    throw new OptionsError('BENCH_DATABASE_URL must be a postgres:// URL');
  }

  const connections = list(get('BENCH_CONNECTIONS', '1,16,64,256')).map((item) =>
    positiveInteger('BENCH_CONNECTIONS', item),
  );
  if (connections.length === 0) throw new OptionsError('BENCH_CONNECTIONS lists no level');

  const targets = list(get('BENCH_TARGETS', TARGETS.join(','))).map((item) => {
    const target = TARGETS.find((known) => known === item);
    if (!target) throw new OptionsError(`BENCH_TARGETS: unknown target "${item}"`);
    return target;
  });

  const jobs = get('BENCH_PGBENCH_JOBS', '');
  const rate = get('BENCH_RATE', '');
  return {
    databaseUrl,
    connections: [...new Set(connections)],
    // pgbench -T takes whole seconds, so every target runs for a whole number of them.
    durationSeconds: positiveInteger('BENCH_DURATION_SECONDS', get('BENCH_DURATION_SECONDS', '10')),
    warmupSeconds: positiveInteger('BENCH_WARMUP_SECONDS', get('BENCH_WARMUP_SECONDS', '3'), 0),
    targets: TARGETS.filter((target) => targets.includes(target)),
    pgbenchPath: get('BENCH_PGBENCH', 'pgbench'),
    pgbenchJobs: jobs === '' ? undefined : positiveInteger('BENCH_PGBENCH_JOBS', jobs),
    pgbenchSpareConnections: positiveInteger(
      'BENCH_PGBENCH_SPARE_CONNECTIONS',
      get('BENCH_PGBENCH_SPARE_CONNECTIONS', '20'),
      0,
    ),
    readPlants: positiveInteger('BENCH_READ_PLANTS', get('BENCH_READ_PLANTS', '100000'), 1000),
    rate: rate === '' ? undefined : positiveInteger('BENCH_RATE', rate),
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
