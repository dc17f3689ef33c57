import type { Target } from './options.js';
import type { CpuUse } from './session.js';

// What one run of a target measured: the record the targets suite makes and its reports read.

export interface RunResult {
  target: Target;
  /** The concurrency level: HTTP connections, or pgbench clients. */
  connections: number;
  status: 'ok' | 'failed' | 'skipped';
  /** Why it failed or was skipped, or what differs from the plan (pgbench clients capped). */
  note?: string;
  /** pgbench clients actually run, when fewer than `connections`. */
  clients?: number;
  /** Successful requests (2xx) or transactions per second. */
  throughput?: number;
  p50Ms?: number | null;
  p99Ms?: number | null;
  errors?: number;
  /** Largest VmRSS sampled from the server process during the measurement. */
  peakRssBytes?: number;
  cpu?: CpuUse;
  /** Plants in each answer, when not one (a page). */
  rowsPerAnswer?: number;
  /** service+webhooks and service+endpoints-N: what the receiver got, and how long after each commit. */
  webhooks?: WebhookFigures;
}

export interface WebhookFigures {
  /** Subscribers every plant goes to: the static URL, or the endpoints. */
  subscribers: number;
  /** Plants the target stored (warm-up included). */
  plants: number;
  /** Plants delivered at least once. */
  delivered: number;
  undelivered: number;
  /** Plants delivered at least `subscribers` times. */
  complete: number;
  /** Requests the receiver got per plant stored (`subscribers` when all came once). */
  deliveriesPerPlant: number | null;
  /** Seconds from the end of the load until every delivery came (or the wait gave up). */
  drainSeconds: number;
  /** Deliveries still owed when the measured load ended. */
  behindAtEnd?: number;
  /** Deliveries beyond the `subscribers` each plant is owed. */
  duplicates: number;
  /** From the plant's created_at to the first delivery's arrival. */
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
  /** Share of the plants delivered within 1 s of their commit. */
  withinOneSecond: number | null;
  /** Cores' worth of CPU the receiver used while measured. */
  receiverCpu?: number;
}
