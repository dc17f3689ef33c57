import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import {
  Counter,
  collectDefaultMetrics,
  Gauge,
  Histogram,
  type Metric,
  Registry,
} from 'prom-client';
import { errorHandler, notFoundHandler } from './errors.js';

/** Live figures the metrics read when scraped. */
export interface MetricsSources {
  /** The server pool's connections; absent on the embedded engine, which has no pool. */
  pool?: () => { total: number; idle: number; waiting: number };
  /** The write path: creates waiting for an INSERT, and INSERTs in flight. */
  writes?: () => { queued: number; inFlight: number };
  /** Reads by id: those waiting for a SELECT, and SELECTs in flight. */
  reads?: () => { queued: number; inFlight: number };
}

export interface Metrics {
  registry: Registry;
  /** Counts one answered request and its duration. */
  observeRequest(method: string, route: string, status: number, seconds: number): void;
  /** Counts one INSERT of the write path and the creates it carried. */
  observeBatch(size: number): void;
  /** Counts one SELECT of reads by id and the reads it carried. */
  observeReadBatch(size: number): void;
}

/** The requests answered with one method, route and status, and how long each took. */
type Answered = {
  labels: { method: string; route: string; status_code: number };
  count: number;
  /** Seconds, all requests together. */
  sum: number;
  /** Requests per duration bucket, not cumulative; the last one is beyond every bound. */
  buckets: number[];
};

const durationBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const batchBuckets = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];

/** Prometheus metrics of the service, on a registry of its own (tests build many apps). */
export function createMetrics(sources: MetricsSources = {}): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  // Each request is counted in plain numbers (see observeRequest), handed to prom-client only
  // when scraped: a request costs three map lookups and a few additions, not label validation
  // and hashing in a counter and a histogram.
  const answered = new Map<string, Map<string, Map<number, Answered>>>();
  const everyAnswered = function* () {
    for (const byMethod of answered.values()) {
      for (const byStatus of byMethod.values()) yield* byStatus.values();
    }
  };
  new Counter({
    name: 'http_requests_total',
    help: 'HTTP requests answered, by method, route and status',
    labelNames: ['method', 'route', 'status_code'],
    registers: [registry],
    collect() {
      this.reset();
      for (const { labels, count } of everyAnswered()) this.inc(labels, count);
    },
  });
  registry.registerMetric(
    durationHistogram(
      'http_request_duration_seconds',
      'Time from receiving a request to sending its answer, by method, route and status',
      everyAnswered,
      () => answered.clear(),
    ),
  );
  const batches = new Histogram({
    name: 'plant_store_write_batch_size',
    help: 'Creates carried by each INSERT of the write path',
    buckets: batchBuckets,
    registers: [registry],
  });
  const readBatches = new Histogram({
    name: 'plant_store_read_batch_size',
    help: 'Reads by id carried by each SELECT',
    buckets: batchBuckets,
    registers: [registry],
  });
  if (sources.pool) {
    const pool = sources.pool;
    new Gauge({
      name: 'plant_store_db_pool_connections',
      help: 'Database pool connections by state (in_use, idle)',
      labelNames: ['state'],
      registers: [registry],
      collect() {
        const { total, idle } = pool();
        this.set({ state: 'in_use' }, total - idle);
        this.set({ state: 'idle' }, idle);
      },
    });
    new Gauge({
      name: 'plant_store_db_pool_waiting',
      help: 'Queries waiting for a free database pool connection',
      registers: [registry],
      collect() {
        this.set(pool().waiting);
      },
    });
  }
  /** A batch queue's waiting items (queued) and statements in flight (in_flight). */
  const queueGauge = (
    name: string,
    help: string,
    stats: () => { queued: number; inFlight: number },
  ) =>
    new Gauge({
      name,
      help,
      labelNames: ['state'],
      registers: [registry],
      collect() {
        const { queued, inFlight } = stats();
        this.set({ state: 'queued' }, queued);
        this.set({ state: 'in_flight' }, inFlight);
      },
    });
  if (sources.writes) {
    queueGauge(
      'plant_store_write_queue',
      'Creates waiting for an INSERT (queued) and INSERTs in flight (in_flight)',
      sources.writes,
    );
  }
  if (sources.reads) {
    queueGauge(
      'plant_store_read_queue',
      'Reads by id waiting for a SELECT (queued) and SELECTs in flight (in_flight)',
      sources.reads,
    );
  }

  return {
    registry,
    observeRequest(method, route, status, seconds) {
      let byMethod = answered.get(route);
      if (!byMethod) {
        byMethod = new Map();
        answered.set(route, byMethod);
      }
      let byStatus = byMethod.get(method);
      if (!byStatus) {
        byStatus = new Map();
        byMethod.set(method, byStatus);
      }
      let requests = byStatus.get(status);
      if (!requests) {
        const labels = { method, route, status_code: status };
        requests = { labels, count: 0, sum: 0, buckets: durationBuckets.map(() => 0).concat(0) };
        byStatus.set(status, requests);
      }
      requests.count++;
      requests.sum += seconds;
      let bucket = 0;
      while (bucket < durationBuckets.length && seconds > (durationBuckets[bucket] as number)) {
        bucket++;
      }
      requests.buckets[bucket] = (requests.buckets[bucket] as number) + 1;
    },
    observeBatch(size) {
      batches.observe(size);
    },
    observeReadBatch(size) {
      readBatches.observe(size);
    },
  };
}

/**
 * A histogram of request durations in prom-client's registry, its values read when scraped from
 * the counts of observeRequest: the same series, names and labels as a prom-client Histogram.
 */
function durationHistogram(
  name: string,
  help: string,
  answered: () => Iterable<Answered>,
  forget: () => void,
) {
  const values = () => {
    const samples: Array<{ labels: object; value: number; metricName: string }> = [];
    for (const { labels, count, sum, buckets } of answered()) {
      let cumulative = 0;
      durationBuckets.forEach((bound, i) => {
        cumulative += buckets[i] as number;
        samples.push({
          labels: { le: bound, ...labels },
          value: cumulative,
          metricName: `${name}_bucket`,
        });
      });
      samples.push({
        labels: { le: '+Inf', ...labels },
        value: count,
        metricName: `${name}_bucket`,
      });
      samples.push({ labels, value: sum, metricName: `${name}_sum` });
      samples.push({ labels, value: count, metricName: `${name}_count` });
    }
    return samples;
  };
  const metric = {
    name,
    help,
    type: 'histogram',
    aggregator: 'sum',
    get: async () => ({ name, help, type: 'histogram', aggregator: 'sum', values: values() }),
    // registry.resetMetrics(): the counts behind both request metrics start again from zero.
    reset: forget,
  };
  // prom-client's registry takes any object of this shape; its types name only its own classes.
  return metric as unknown as Metric;
}

/** GET /metrics in Prometheus' text format, without authentication. */
export async function metricsRoute(app: FastifyInstance, { metrics }: { metrics: Metrics }) {
  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    reply.header('content-type', metrics.registry.contentType);
    return metrics.registry.metrics();
  });
}

/** A server of its own for /metrics (METRICS_PORT), so the main port need not expose it. */
export async function startMetricsServer(
  metrics: Metrics,
  { port, host, logger }: { port: number; host: string; logger: FastifyBaseLogger },
): Promise<FastifyInstance> {
  const server = Fastify({
    loggerInstance: logger,
    logController: new Fastify.LogController({ disableRequestLogging: true }),
  });
  server.setErrorHandler(errorHandler);
  server.setNotFoundHandler(notFoundHandler);
  await server.register(metricsRoute, { metrics });
  await server.listen({ port, host });
  return server;
}
