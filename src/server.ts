import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { type Config, ConfigError, loadConfig } from './config.js';
import { type AppDatabase, openDatabase } from './db/client.js';
import { isDatabaseUnavailable } from './db/errors.js';
import { latestMigrationMillis, schemaStatus } from './db/migrate.js';
import { createMetrics, startMetricsServer } from './http/metrics.js';
import { createLogger } from './logger.js';
import { createPlantRepository, type PlantRepository } from './plants/repository.js';

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
let stopping = false;

async function stop(signal: NodeJS.Signals): Promise<void> {
  if (stopping) {
    logger.warn({ signal }, 'second signal: exiting without waiting');
    process.exit(1);
  }
  stopping = true;
  logger.info({ signal }, 'shutting down: finishing in-flight requests');
  setTimeout(() => {
    logger.error({ graceMs: config.shutdownTimeoutMs }, 'grace period expired: exiting');
    process.exit(1);
  }, config.shutdownTimeoutMs).unref();
  try {
    await app?.close();
    await metricsServer?.close();
    await repository?.drain();
    await database?.close();
  } catch (error) {
    logger.error({ err: error }, 'shutdown failed');
    process.exit(1);
  }
  logger.info('stopped');
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

/** Retries `attempt` while the database is unreachable (it may still be starting). */
async function whenDatabaseAnswers(what: string, attempt: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (let delay = 250; ; delay = Math.min(delay * 2, 5000)) {
    try {
      return await attempt();
    } catch (error) {
      if (!isDatabaseUnavailable(error) || Date.now() + delay > deadline || stopping) throw error;
      logger.warn({ err: error, retryInMs: delay }, `${what}: the database is not reachable yet`);
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}

try {
  const db = await openDatabase({
    url: config.databaseUrl,
    dataDir: config.dataDir,
    poolMax: config.dbPoolMax,
    connectTimeoutMs: config.dbConnectTimeoutMs,
    statementTimeoutMs: config.dbStatementTimeoutMs,
    onIdleError: (error) => logger.warn({ err: error }, 'an idle database connection failed'),
  });
  database = db;
  logger.info(
    { engine: db.engine },
    db.engine === 'pglite'
      ? `using ${db.description}: for local runs, demos and tests; set DATABASE_URL to use a PostgreSQL server`
      : `using ${db.description}`,
  );
  if (config.migrateOnStart) {
    await whenDatabaseAnswers('migrating', () => db.migrate());
    logger.info('database schema is up to date');
  }
  const latestMillis = latestMigrationMillis();
  const writes = createPlantRepository(db.db, {
    maxBatchSize: config.writeBatchMax,
    maxConcurrentBatches: config.writeConcurrency,
    maxQueued: config.writeQueueMax,
    onBatch: (size) => metrics.observeBatch(size),
  });
  const metrics = createMetrics({ pool: db.poolStats, writes: writes.stats });
  repository = writes;
  app = await buildApp({
    config,
    logger,
    repository,
    checkReadiness: () => schemaStatus(db.db, latestMillis),
    metrics,
  });
  if (!stopping) await app.listen({ port: config.port, host: config.host });
  if (!stopping && config.metricsPort !== undefined) {
    metricsServer = await startMetricsServer(metrics, {
      port: config.metricsPort,
      host: config.host,
      logger,
    });
  }
} catch (error) {
  logger.fatal({ err: error }, 'failed to start');
  await database?.close().catch(() => {});
  process.exit(1);
}
