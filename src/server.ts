import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { type Config, ConfigError, loadConfig } from './config.js';
import { createPostgresDatabase } from './db/client.js';
import { isDatabaseUnavailable } from './db/errors.js';
import { latestMigrationMillis, migrateDatabase, schemaStatus } from './db/migrate.js';
import { createLogger } from './logger.js';
import { createDrizzlePlantRepository } from './plants/repository.js';

function readConfig(): Config & { databaseUrl: string } {
  try {
    const config = loadConfig(process.env);
    if (!config.databaseUrl) throw new ConfigError('DATABASE_URL must be set to a postgres:// URL');
    return { ...config, databaseUrl: config.databaseUrl };
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`plant-store: invalid configuration: ${error.message}\n`);
    process.exit(1);
  }
}

const config = readConfig();
const logger = createLogger(config.logLevel);
let app: FastifyInstance | undefined;
let stopping = false;

const database = createPostgresDatabase(
  {
    url: config.databaseUrl,
    poolMax: config.dbPoolMax,
    connectTimeoutMs: config.dbConnectTimeoutMs,
    statementTimeoutMs: config.dbStatementTimeoutMs,
  },
  (error) => logger.warn({ err: error }, 'an idle database connection failed'),
);

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
    await database.close();
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
  if (config.migrateOnStart) {
    await whenDatabaseAnswers('migrating', () =>
      migrateDatabase({ url: config.databaseUrl, connectTimeoutMs: config.dbConnectTimeoutMs }),
    );
    logger.info('database schema is up to date');
  }
  const latestMillis = latestMigrationMillis();
  app = await buildApp({
    logger,
    repository: createDrizzlePlantRepository(database.db),
    checkReadiness: () => schemaStatus(database.db, latestMillis),
    tokens: config.apiTokens,
    bodyLimit: config.bodyLimit,
    jsonMaxDepth: config.jsonMaxDepth,
  });
  if (!stopping) await app.listen({ port: config.port, host: config.host });
} catch (error) {
  logger.fatal({ err: error }, 'failed to start');
  await database.close().catch(() => {});
  process.exit(1);
}
