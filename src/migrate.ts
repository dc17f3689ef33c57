import { commandDatabaseOf } from './command.js';
import { ConfigError, loadConfig } from './config.js';
import { openCommandDatabase } from './db/client.js';
import { fatalLineOf } from './db/lock-waits.js';
import { describeMigrations } from './db/migrate.js';
import { createLogger } from './logger.js';

// Applies pending migrations and exits: `npm run db:migrate`, or a one-shot deploy job.
try {
  const config = loadConfig(process.env, { requireTokens: false });
  const logger = createLogger(config.logLevel);
  const where = commandDatabaseOf(config.database);
  try {
    const database = await openCommandDatabase(config.database);
    try {
      const applied = await database.migrate({ ...config.database.migration, log: logger });
      logger.info({ migrations: applied }, describeMigrations(applied, where));
    } finally {
      await database.close();
    }
  } catch (error) {
    const [fields, message] = fatalLineOf(error, 'migration failed');
    logger.fatal({ ...fields, database: where }, message);
    process.exitCode = 1;
  }
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  process.stderr.write(error.line);
  process.exitCode = 1;
}
