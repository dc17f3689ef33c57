import { ConfigError, loadConfig } from './config.js';
import { migrateDatabase } from './db/migrate.js';
import { createLogger } from './logger.js';

// Applies pending migrations and exits: `npm run db:migrate`, or a one-shot deploy job.
try {
  const config = loadConfig(process.env, { requireTokens: false });
  if (!config.databaseUrl) throw new ConfigError('DATABASE_URL must be set to a postgres:// URL');
  const logger = createLogger(config.logLevel);
  try {
    await migrateDatabase({ url: config.databaseUrl, connectTimeoutMs: config.dbConnectTimeoutMs });
    logger.info('database schema is up to date');
  } catch (error) {
    logger.fatal({ err: error }, 'migration failed');
    process.exitCode = 1;
  }
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  process.stderr.write(`plant-store: invalid configuration: ${error.message}\n`);
  process.exitCode = 1;
}
