import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describeExit, runToCompletion, spawnChild } from './processes.js';

/**
 * The statement the service sends for a new plant, with a fresh random int64 id per
 * transaction. pgbench's random() refuses a range wider than int64 can count, hence not the
 * full range; two ids out of 2^63 - 2 do not meet in practice.
 */
const PGBENCH_SCRIPT = `\\set id random(1, 9223372036854775806)
insert into plants (id, name, tag) values (:id, 'Monstera deliciosa', 'aroid') on conflict (id) do nothing returning name, tag;
`;

export interface PgbenchOptions {
  pgbench: string;
  databaseUrl: string;
  clients: number;
  jobs: number;
  durationSeconds: number;
  /** Transactions per second, all clients together; undefined: as many as it can. */
  rate?: number | undefined;
  /** A folder of its own for the script and the per-transaction logs. */
  workFolder: string;
  /** Write per-transaction logs for latency percentiles (off for the warm-up). */
  measure: boolean;
  signal: AbortSignal;
}

export interface PgbenchResult {
  /** Transactions per second, as pgbench reports it (without the initial connection time). */
  throughput: number;
  succeeded: number;
  p50Ms: number | null;
  p99Ms: number | null;
  /** Failed transactions plus clients that aborted. */
  errors: number;
  failed: number;
  abortedClients: number;
  /** Non-zero when pgbench gave up (for instance it could not connect). */
  exitCode: number | null;
  output: string;
}

/** `pgbench --version`, or undefined when it is not installed. */
export async function pgbenchVersion(pgbench: string): Promise<string | undefined> {
  try {
    const { stdout } = await runToCompletion('pgbench --version', pgbench, ['--version'], {
      cwd: process.cwd(),
      env: { PATH: process.env.PATH ?? '' },
    });
    return stdout.trim();
  } catch {
    return undefined;
  }
}

function percentile(sorted: Float64Array, q: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? null;
}

/** The per-transaction logs: "client_id transaction_no time_us script_no epoch epoch_us". */
function readLatencies(folder: string): { latenciesMs: Float64Array; failed: number } {
  const values: number[] = [];
  let failed = 0;
  for (const file of readdirSync(folder).filter((name) => name.startsWith('log.'))) {
    for (const line of readFileSync(join(folder, file), 'utf8').split('\n')) {
      const field = line.split(' ')[2];
      if (field === undefined) continue;
      if (/^\d+$/.test(field)) values.push(Number(field) / 1000);
      else if (field === 'failed') failed++;
    }
  }
  return { latenciesMs: Float64Array.from(values).sort(), failed };
}

export async function runPgbench(options: PgbenchOptions): Promise<PgbenchResult> {
  rmSync(options.workFolder, { recursive: true, force: true });
  mkdirSync(options.workFolder, { recursive: true });
  const script = join(options.workFolder, 'insert-plant.sql');
  writeFileSync(script, PGBENCH_SCRIPT);
  const args = [
    '--no-vacuum',
    '--protocol=prepared',
    `--client=${options.clients}`,
    `--jobs=${options.jobs}`,
    `--time=${options.durationSeconds}`,
    ...(options.rate !== undefined ? [`--rate=${options.rate}`] : []),
    `--file=${script}`,
    ...(options.measure ? ['--log', `--log-prefix=${join(options.workFolder, 'log')}`] : []),
    options.databaseUrl,
  ];
  const child = spawnChild('pgbench', options.pgbench, args, {
    cwd: options.workFolder,
    env: { PATH: process.env.PATH ?? '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: Buffer[] = [];
  child.process.stdout?.on('data', (chunk: Buffer) => output.push(chunk));
  child.process.stderr?.on('data', (chunk: Buffer) => output.push(chunk));
  const stop = () => child.process.kill('SIGINT');
  options.signal.addEventListener('abort', stop, { once: true });
  const exit = await child.exited.finally(() => options.signal.removeEventListener('abort', stop));
  const text = Buffer.concat(output).toString('utf8');

  const number = (pattern: RegExp) => {
    const match = pattern.exec(text);
    return match?.[1] === undefined ? undefined : Number(match[1]);
  };
  const tps = number(/^tps = ([\d.]+) \(without initial connection time\)/m);
  const processed = number(/^number of transactions actually processed: (\d+)/m) ?? 0;
  const reportedFailures = number(/^number of failed transactions: (\d+)/m) ?? 0;
  const abortedClients = (text.match(/^pgbench: error: client \d+ aborted/gm) ?? []).length;
  const logged = options.measure
    ? readLatencies(options.workFolder)
    : { latenciesMs: new Float64Array(), failed: 0 };
  const failed = Math.max(reportedFailures, logged.failed);

  if (tps === undefined && exit.code !== 0) {
    throw new Error(`pgbench exited with ${describeExit(exit)}:\n${text.trim()}`);
  }
  return {
    throughput: tps ?? 0,
    succeeded: processed,
    p50Ms: percentile(logged.latenciesMs, 0.5),
    p99Ms: percentile(logged.latenciesMs, 0.99),
    errors: failed + abortedClients,
    failed,
    abortedClients,
    exitCode: exit.code,
    output: text.trim(),
  };
}
