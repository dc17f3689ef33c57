import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { AttemptResult } from './sending.js';
import type { OutboxStats } from './upkeep.js';

export type WebhookMetrics = ReturnType<typeof createWebhookMetrics>;

/** A scrape reads the outbox at most this often; scrapes in between get the last figures. */
const STATS_MAX_AGE_MS = 2000;

const lagBuckets = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600, 86_400];

function resultLabel(result: AttemptResult): string {
  if (result.kind !== 'answered') return result.kind;
  return `${Math.floor(result.status / 100)}xx`;
}

/** The webhook's metrics, on the service's registry. */
export function createWebhookMetrics(registry: Registry, readStats: () => Promise<OutboxStats>) {
  const attempts = new Counter({
    name: 'plant_store_webhook_attempts_total',
    help: 'Delivery attempts made by this process, by result (2xx, 3xx, 4xx, 5xx, timeout, unreachable)',
    labelNames: ['result'],
    registers: [registry],
  });
  const deliveries = new Counter({
    name: 'plant_store_webhook_deliveries_total',
    help: 'Deliveries ended by this process, by outcome (delivered, failed after the last attempt, gone: 410)',
    labelNames: ['outcome'],
    registers: [registry],
  });
  for (const outcome of ['delivered', 'failed', 'gone']) deliveries.labels({ outcome }).inc(0);
  const lag = new Histogram({
    name: 'plant_store_webhook_delivery_lag_seconds',
    help: 'Time from recording an event to its delivery',
    buckets: lagBuckets,
    registers: [registry],
  });

  const disabled = new Counter({
    name: 'plant_store_webhook_endpoints_disabled_total',
    help: 'Endpoints disabled by this process, by reason (gone: the receiver answered 410; failing: every attempt failed for WEBHOOK_DISABLE_AFTER_S)',
    labelNames: ['reason'],
    registers: [registry],
  });
  for (const reason of ['gone', 'failing']) disabled.labels({ reason }).inc(0);

  let cached: { at: number; stats: Promise<OutboxStats> } | undefined;
  let last: OutboxStats = { pending: 0, failed: 0, oldestDueSeconds: 0 };
  const stats = async (): Promise<OutboxStats> => {
    const now = Date.now();
    if (!cached || now - cached.at > STATS_MAX_AGE_MS) {
      cached = { at: now, stats: readStats() };
    }
    try {
      last = await cached.stats;
    } catch {
      // The database is away: the scrape still answers, with the last figures.
    }
    return last;
  };
  new Gauge({
    name: 'plant_store_webhook_backlog',
    help: 'Deliveries in the outbox by state: pending (not yet delivered) and failed (awaiting a redelivery); counted up to 100000',
    labelNames: ['state'],
    registers: [registry],
    async collect() {
      const { pending, failed } = await stats();
      this.set({ state: 'pending' }, pending);
      this.set({ state: 'failed' }, failed);
    },
  });
  new Gauge({
    name: 'plant_store_webhook_oldest_due_seconds',
    help: 'How long the oldest due delivery has waited for an attempt (0 when none is due)',
    registers: [registry],
    async collect() {
      this.set((await stats()).oldestDueSeconds);
    },
  });

  // Label lookups cost more than the increments: keep one child per label.
  const attemptsBy = new Map<string, Counter.Internal>();
  return {
    observeAttempt(result: AttemptResult): void {
      const label = resultLabel(result);
      let child = attemptsBy.get(label);
      if (!child) {
        child = attempts.labels({ result: label });
        attemptsBy.set(label, child);
      }
      child.inc();
    },
    /** A delivery ended: delivered, failed after its last attempt, or gone (410). */
    observeDelivery(outcome: 'delivered' | 'failed' | 'gone', lagSeconds?: number): void {
      deliveries.labels({ outcome }).inc();
      if (outcome === 'delivered' && lagSeconds !== undefined) lag.observe(lagSeconds);
    },
    /** An endpoint was disabled by what its receiver did: a 410, or failing too long. */
    observeEndpointDisabled(reason: 'gone' | 'failing'): void {
      disabled.labels({ reason }).inc();
    },
  };
}
