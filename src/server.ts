import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { type Config, ConfigError, loadConfig } from './config.js';
import {
  type AppDatabase,
  type DatabaseOptions,
  describeDatabase,
  openDatabase,
} from './db/client.js';
import { DataDirInUseError, isDatabaseUnavailable } from './db/errors.js';
import { describeMigrations, latestMigrationMillis, schemaStatus } from './db/migrate.js';
import { HttpError } from './http/errors.js';
import { createMetrics, startMetricsServer } from './http/metrics.js';
import { createLogger } from './logger.js';
import { createPlantRepository, type PlantRepository } from './plants/repository.js';
import { startTracing } from './tracing/start.js';
import type { Tracing } from './tracing/tracing.js';
import { createDispatcher, type Dispatcher, leaseMsFor } from './webhooks/dispatcher.js';
import { createWebhookMetrics } from './webhooks/metrics.js';
import { createOutbox } from './webhooks/outbox.js';

function readConfig(): Config {
  try {
    return loadConfig(process.env);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`plant-store: invalid configuration: ${error.message}\n`);
    process.exit(1);
  }
}

const config = readConfig();
const logger = createLogger(config.logLevel);
let database: AppDatabase | undefined;
let repository: PlantRepository | undefined;
let app: FastifyInstance | undefined;
let metricsServer: FastifyInstance | undefined;
let dispatcher: Dispatcher | undefined;
let tracing: Tracing | undefined;
let stopping = false;
let stopSignalAt = 0;

// Ctrl-C, or a kill of the process group, reaches npm too, which passes the signal on: a second
// delivery this soon is the same request to stop, not a second one.
const SAME_STOP_REQUEST_MS = 1000;

// Node's default (511) drops connections when thousands arrive at once; the kernel caps it at
// net.core.somaxconn.
const LISTEN_BACKLOG = 4096;

async function stop(signal: NodeJS.Signals): Promise<void> {
  if (stopping) {
    if (performance.now() - stopSignalAt < SAME_STOP_REQUEST_MS) return;
    logger.warn({ signal }, 'second signal: exiting without waiting');
    process.exit(1);
  }
  stopping = true;
  stopSignalAt = performance.now();
  // Orchestrators stop with SIGTERM: serve on, not ready, until the load balancer has noticed.
  if (signal === 'SIGTERM' && config.shutdownDelayMs > 0 && app?.server.listening) {
    logger.info({ signal, delayMs: config.shutdownDelayMs }, 'shutting down: not ready, serving');
    await new Promise((resolve) => setTimeout(resolve, config.shutdownDelayMs));
  }
  logger.info({ signal }, 'shutting down: finishing in-flight requests');
  setTimeout(() => {
    logger.error({ graceMs: config.shutdownTimeoutMs }, 'grace period expired: exiting');
    process.exit(1);
  }, config.shutdownTimeoutMs).unref();
  try {
    await app?.close();
    await metricsServer?.close();
    await repository?.drain();
    // Attempts in flight get half the grace period; the rest are given back to other replicas.
    await dispatcher?.stop(config.shutdownTimeoutMs / 2);
    await database?.close();
    // The spans of the last requests and deliveries, still buffered.
    await tracing?.shutdown();
  } catch (error) {
    logger.error({ err: error }, 'shutdown failed');
    process.exit(1);
  }
  logger.info('stopped');
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

/**
 * Retries `attempt` while the database is unreachable (it may still be starting), for as long
 * as it takes: meanwhile /healthz answers 200, /readyz and the API 503 with Retry-After.
 */
async function whenDatabaseAnswers<T>(what: string, attempt: () => Promise<T>): Promise<T> {
  for (let delay = 250; ; delay = Math.min(delay * 2, 5000)) {
    try {
      return await attempt();
    } catch (error) {
      if (!isDatabaseUnavailable(error) || stopping) throw error;
      const cause = error instanceof Error ? error.message : String(error);
      logger.warn(
        { cause, retryInMs: delay },
        `${what}: the database is not reachable yet (${cause}); retrying in ${delay} ms`,
      );
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}

const idle = { queued: 0, inFlight: 0 };

const databaseOptions: DatabaseOptions = {
  url: config.databaseUrl,
  pooler: config.dbPooler,
  dataDir: config.dataDir,
  poolMax: config.dbPoolMax,
  connectTimeoutMs: config.dbConnectTimeoutMs,
  statementTimeoutMs: config.dbStatementTimeoutMs,
  onIdleError: (error) => logger.warn({ err: error }, 'an idle database connection failed'),
};

/**
 * The plant store as the routes see it: the repository once the database is open and migrated;
 * until then (the service listens first) every call answers 503 with Retry-After.
 */
function plantsOnceStarted(): PlantRepository {
  const starting = async (): Promise<never> => {
    throw new HttpError(503, 'the service is starting; retry shortly', { 'retry-after': '1' });
  };
  const notYet: PlantRepository = {
    createPlant: starting,
    getPlant: starting,
    listPlants: starting,
    deletePlant: starting,
    drain: async () => {},
    stats: () => ({ writes: idle, reads: idle }),
  };
  const plants = () => repository ?? notYet;
  return {
    createPlant: (plant) => plants().createPlant(plant),
    getPlant: (id) => plants().getPlant(id),
    listPlants: (page) => plants().listPlants(page),
    deletePlant: (id) => plants().deletePlant(id),
    drain: () => plants().drain(),
    stats: () => plants().stats(),
  };
}

/**
 * One line for a failure to start that the operator can put right (the port or the data
 * directory taken, a server that refuses the credentials); undefined for anything else.
 */
function refusalOf(error: unknown): string | undefined {
  if (error instanceof DataDirInUseError) {
    return `${error.message}: one process at a time can use an embedded database; stop the other service or set another DATA_DIR`;
  }
  const { code, syscall, path, message, port } = error as NodeJS.ErrnoException & {
    port?: number;
  };
  if (syscall === 'listen' && code === 'EADDRINUSE') {
    const variable = port !== undefined && port === config.metricsPort ? 'METRICS_PORT' : 'PORT';
    return `port ${port ?? config.port} on ${config.host} is in use by another process; stop it or set ${variable}`;
  }
  if (syscall === 'listen' && code === 'EACCES') {
    return `this user may not listen on port ${config.port}; set PORT to 1024 or above`;
  }
  if (path !== undefined && (code === 'EACCES' || code === 'EPERM' || code === 'EROFS')) {
    return `the data directory ${config.dataDir} cannot be written (${code} on ${path}); mount a writable directory there, set DATA_DIR to one, or set DATABASE_URL`;
  }
  // Wrong credentials, no such database or role: the server answered, and will answer the same.
  if (code === '28P01' || code === '28000' || code === '3D000') {
    return `${describeDatabase(databaseOptions).description} refused the connection: ${message}`;
  }
  return undefined;
}

async function start(): Promise<void> {
  tracing = await startTracing(process.env, { databaseUrl: config.databaseUrl });
  if (tracing) {
    logger.info({ endpoint: tracing.endpoint }, `tracing: exporting spans to ${tracing.endpoint}`);
  }
  const metrics = createMetrics({
    pool:
      config.databaseUrl === undefined
        ? undefined
        : () => database?.poolStats?.() ?? { total: 0, idle: 0, waiting: 0 },
    writes: () => repository?.stats().writes ?? idle,
    reads: () => repository?.stats().reads ?? idle,
  });
  const latestMillis = latestMigrationMillis();
  app = await buildApp({
    config,
    logger,
    repository: plantsOnceStarted(),
    checkReadiness: async () =>
      database && repository ? schemaStatus(database.db, latestMillis) : 'starting',
    isStopping: () => stopping,
    metrics,
    tracing,
  });
  // Listen first: probes get their answers while the database opens, which can take seconds.
  if (!stopping) {
    await app.listen({ port: config.port, host: config.host, backlog: LISTEN_BACKLOG });
  }
  if (!stopping && config.metricsPort !== undefined) {
    metricsServer = await startMetricsServer(metrics, {
      port: config.metricsPort,
      host: config.host,
      logger,
    });
  }

  const { engine, description, creating } = describeDatabase(databaseOptions);
  logger.info(
    { engine },
    engine === 'pglite'
      ? `${creating ? 'creating' : 'opening'} ${description}${creating ? ' (a new database takes a few seconds)' : ''}: for trying things out, local runs and tests; set DATABASE_URL to use a PostgreSQL server`
      : `using ${description}`,
  );
  const db = await openDatabase(databaseOptions);
  database = db;
  if (config.migrateOnStart) {
    const applied = await whenDatabaseAnswers('migrating', () => db.migrate());
    logger.info({ migrations: applied }, describeMigrations(applied, 'the database'));
  }
  const webhooks = config.webhooks && {
    ...config.webhooks,
    outbox: createOutbox(db.db, {
      urls: config.webhooks.urls,
      leaseMs: leaseMsFor(config.webhooks),
    }),
  };
  repository = createPlantRepository(db.db, {
    textAsBytes: db.engine === 'pglite',
    tracing,
    ...(webhooks && { recordEvents: true, onCreated: () => dispatcher?.wake() }),
    writes: {
      maxBatchSize: config.writeBatchMax,
      maxConcurrentBatches: config.writeConcurrency,
      maxQueued: config.writeQueueMax,
      onBatch: (size) => metrics.observeBatch(size),
    },
    reads: {
      maxBatchSize: config.readBatchMax,
      maxConcurrentBatches: config.readConcurrency,
      maxQueued: config.readQueueMax,
      onBatch: (size) => metrics.observeReadBatch(size),
    },
  });
  if (webhooks) {
    dispatcher = createDispatcher({
      db: db.db,
      config: webhooks,
      logger,
      outbox: webhooks.outbox,
      metrics: createWebhookMetrics(metrics.registry, () => webhooks.outbox.stats()),
      tracing,
    });
    if (!stopping) dispatcher.start();
  }
  const startupMs = Math.round(process.uptime() * 1000);
  logger.info({ startupMs }, `started in ${startupMs} ms`);
}

try {
  await start();
} catch (error) {
  // A signal during the start: stop() is shutting down, and decides the exit code.
  if (!stopping) {
    const refusal = refusalOf(error);
    if (refusal) process.stderr.write(`plant-store: cannot start: ${refusal}\n`);
    else logger.fatal({ err: error }, 'failed to start');
    await database?.close().catch(() => {});
    process.exit(1);
  }
}
