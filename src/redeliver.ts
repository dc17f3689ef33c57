import { parseArgs } from 'node:util';
import {
  commandDatabaseOf,
  counted,
  endOnBadInput,
  reportNotMigrated,
  UsageError,
} from './command.js';
import { loadConfig } from './config.js';
import { openCommandDatabase } from './db/client.js';
import { failureForLog } from './db/errors.js';
import { createLogger } from './logger.js';
import { type RecoveryFilter, redeliverFailed } from './webhooks/delivery/recovery.js';
import { eventUuidOf } from './webhooks/tables/ids.js';

const usage = `usage: npm run webhooks:redeliver -- [--url URL] [--event msg_...] [--failed-since ISO-TIME] [--dry-run]
Sends failed webhook deliveries again (every one unless a filter is given): they become
due at once with a fresh retry schedule, and the running service delivers them.`;

function readFilter(): { filter: RecoveryFilter; dryRun: boolean } {
  const { values } = parseArgs({
    options: {
      url: { type: 'string' },
      event: { type: 'string' },
      'failed-since': { type: 'string' },
      'dry-run': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }
  const filter: RecoveryFilter = { url: values.url };
  if (values.event !== undefined) {
    filter.eventId = eventUuidOf(values.event);
    if (filter.eventId === undefined) {
      throw new UsageError('--event must be a webhook-id (msg_...)');
    }
  }
  if (values['failed-since'] !== undefined) {
    const since = new Date(values['failed-since']);
    if (Number.isNaN(since.getTime()))
      throw new UsageError('--failed-since must be a date and time');
    filter.failedSince = since.toISOString();
  }
  return { filter, dryRun: values['dry-run'] };
}

// Sends failed webhook deliveries again and exits: `npm run webhooks:redeliver`.
try {
  const { filter, dryRun } = readFilter();
  const config = loadConfig(process.env, { requireTokens: false });
  const logger = createLogger(config.logLevel);
  const where = commandDatabaseOf(config.database);
  try {
    const database = await openCommandDatabase(config.database);
    try {
      const count = await redeliverFailed(database.db, filter, dryRun);
      const deliveries = counted(count, 'failed delivery', 'failed deliveries');
      process.stdout.write(
        `${deliveries} in ${where} ${dryRun ? 'would' : 'will'} be sent again\n`,
      );
    } finally {
      await database.close();
    }
  } catch (error) {
    if (!reportNotMigrated(error, 'redelivery', config.database)) {
      logger.fatal({ ...failureForLog(error), database: where }, 'redelivery failed');
    }
    process.exitCode = 1;
  }
} catch (error) {
  endOnBadInput(error, usage);
}
