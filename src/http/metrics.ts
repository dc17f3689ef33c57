import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
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

/** The requests answered with one method, route and status. */
type Answered = {
  labels: { method: string; route: string; status_code: number };
  count: number;
  duration: Histogram.Internal<string>;
};

const durationBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const batchBuckets = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];

/** Prometheus metrics of the service, on a registry of its own (tests build many apps). */
export function createMetrics(sources: MetricsSources = {}): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const labelNames = ['method', 'route', 'status_code'] as const;
  // Counted in a plain number per label set (see observeRequest), handed to the counter when
  // scraped: a request costs an increment, not a second label lookup in prom-client.
  const answered = new Map<string, Answered>();
  new Counter({
    name: 'http_requests_total',
    help: 'HTTP requests answered, by method, route and status',
    labelNames,
    registers: [registry],
    collect() {
      this.reset();
      for (const { labels, count } of answered.values()) this.inc(labels, count);
    },
  });
  const durations = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'Time from receiving a request to sending its answer, by method, route and status',
    labelNames,
    buckets: durationBuckets,
    registers: [registry],
  });
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
      const key = `${method} ${status} ${route}`;
      let requests = answered.get(key);
      if (!requests) {
        // Label lookups cost more than the counting: one histogram child per label set.
        const labels = { method, route, status_code: status };
        requests = { labels, count: 0, duration: durations.labels(labels) };
        answered.set(key, requests);
      }
      requests.count++;
      requests.duration.observe(seconds);
    },
    observeBatch(size) {
      batches.observe(size);
    },
    observeReadBatch(size) {
      readBatches.observe(size);
    },
  };
}

/** Counts every answered request; routes without a match count as one label, not per URL. */
export function registerRequestMetrics(app: FastifyInstance, metrics: Metrics): void {
  app.addHook('onResponse', (request, reply, done) => {
    const route = request.routeOptions.url ?? 'unmatched';
    metrics.observeRequest(request.method, route, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
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
