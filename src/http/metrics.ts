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
  /** The deletes' batch queue. */
  deletes?: () => { queued: number; inFlight: number };
  /**
   * Each read replica's lag in seconds, undefined while it is out of the rotation; given only
   * when replicas serve reads, as are the reads' counts by where they went.
   */
  replicaLags?: () => Array<{ server: string; seconds: number | undefined }>;
}

export interface Metrics {
  registry: Registry;
  /** Counts one answered request and its duration. */
  observeRequest(method: string, route: string, status: number, seconds: number): void;
  /** Counts one INSERT of the write path and the creates it carried. */
  observeBatch(size: number): void;
  /** Counts one SELECT of reads by id and the reads it carried. */
  observeReadBatch(size: number): void;
  /** Counts `count` reads answered by a replica, or by the primary and why. */
  observeReads(destination: string, count: number): void;
}

/** A request's labels, as prom-client takes them. */
type RequestLabels = { method: string; route: string; status_code: number };

const durationBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const batchBuckets = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];

/** Prometheus metrics of the service, on a registry of its own (tests build many apps). */
export function createMetrics(sources: MetricsSources = {}): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  // Its count per label set is the requests counter's value, read when scraped: a request
  // costs one histogram observation, not a counter's too.
  new Counter({
    name: 'http_requests_total',
    help: 'HTTP requests answered, by method, route and status',
    labelNames: ['method', 'route', 'status_code'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const { labels, value, metricName } of (await durations.get()).values) {
        if (metricName === 'http_request_duration_seconds_count') this.inc(labels, value);
      }
    },
  });
  const durations = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'Time from receiving a request to sending its answer, by method, route and status',
    labelNames: ['method', 'route', 'status_code'],
    buckets: durationBuckets,
    registers: [registry],
  });
  // Each label set made once, so that a request makes no object of its own.
  const requestLabels = new Map<string, Map<string, Map<number, RequestLabels>>>();
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
  const reads =
    sources.replicaLags &&
    new Counter({
      name: 'plant_store_db_reads_total',
      help: 'Plant reads by the server that answered (replica, primary) and why the primary (behind: no replica has what the read needs; timeline: a token from before a failover; fault: the replica failed, cancelled the query, or restarted or was promoted since it was chosen; none: no replica in rotation)',
      labelNames: ['server', 'reason'],
      registers: [registry],
    });
  if (sources.replicaLags) {
    const lags = sources.replicaLags;
    new Gauge({
      name: 'plant_store_db_replica_lag_seconds',
      help: 'How long each read replica has been missing a write the primary had (0: caught up); absent while out of the rotation',
      labelNames: ['server'],
      registers: [registry],
      collect() {
        this.reset();
        for (const { server, seconds } of lags()) {
          if (seconds !== undefined) this.set({ server }, seconds);
        }
      },
    });
  }
  if (sources.deletes) {
    queueGauge(
      'plant_store_delete_queue',
      'Deletes waiting for a DELETE (queued) and DELETEs in flight (in_flight)',
      sources.deletes,
    );
  }

  return {
    registry,
    observeRequest(method, route, status, seconds) {
      let byMethod = requestLabels.get(route);
      if (!byMethod) {
        byMethod = new Map();
        requestLabels.set(route, byMethod);
      }
      let byStatus = byMethod.get(method);
      if (!byStatus) {
        byStatus = new Map();
        byMethod.set(method, byStatus);
      }
      let labels = byStatus.get(status);
      if (!labels) {
        labels = { method, route, status_code: status };
        byStatus.set(status, labels);
      }
      durations.observe(labels, seconds);
    },
    observeBatch(size) {
      batches.observe(size);
    },
    observeReadBatch(size) {
      readBatches.observe(size);
    },
    observeReads(destination, count) {
      if (destination === 'replica') reads?.inc({ server: 'replica' }, count);
      else reads?.inc({ server: 'primary', reason: destination }, count);
    },
  };
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
