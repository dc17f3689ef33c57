import { parseArgs } from 'node:util';
import {
  commandDatabaseOf,
  counted,
  endOnBadInput,
  reportNotMigrated,
  UsageError,
} from './command.js';
import { ConfigError, loadConfig } from './config.js';
import { openCommandDatabase } from './db/client.js';
import { failureForLog } from './db/errors.js';
import { createLogger } from './logger.js';
import { rekeySecrets } from './webhooks/security/rekey.js';

const usage = `usage: npm run webhooks:rekey -- [--batch-size N]
Seals every stored endpoint key and set of custom headers anew under the first key of
WEBHOOK_ENCRYPTION_KEYS, N endpoints (default 100, at most 10000) at a time, while the service
runs; then the other keys can go.`;

function readBatchSize(): number {
  const { values } = parseArgs({
    options: {
      'batch-size': { type: 'string', default: '100' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }
  const size = Number(values['batch-size']);
  if (!/^\d{1,5}$/.test(values['batch-size']) || size < 1 || size > 10_000) {
    throw new UsageError('--batch-size must be an integer from 1 to 10000');
  }
  return size;
}

// Re-seals endpoint keys and custom headers under the first encryption key and exits:
// `npm run webhooks:rekey`.
try {
  const batchSize = readBatchSize();
  const config = loadConfig(process.env, { requireTokens: false });
  if (config.webhooks.encryptionKeys.length === 0) {
    throw new ConfigError(
      'WEBHOOK_ENCRYPTION_KEYS must be set: it is the key ring to seal under (the first key)',
    );
  }
  const logger = createLogger(config.logLevel);
  const where = commandDatabaseOf(config.database);
  try {
    const database = await openCommandDatabase(config.database);
    try {
      const { keyId, resealed, resealedHeaders, unreadable } = await rekeySecrets(
        database.db,
        config.webhooks.encryptionKeys,
        batchSize,
      );
      const keys = counted(resealed, 'stored key', 'stored keys');
      const headers = counted(resealedHeaders, 'set of custom headers', 'sets of custom headers');
      process.stdout.write(
        `${keys} and ${headers} re-sealed under the key "${keyId}" in ${where}\n`,
      );
      if (unreadable.length > 0) {
        const endpoints = counted(unreadable.length, 'endpoint has', 'endpoints have');
        process.stderr.write(
          `plant-store: ${endpoints} a stored key or custom headers that open under no key of WEBHOOK_ENCRYPTION_KEYS, left as they are: ${unreadable.join(', ')}\n`,
        );
        process.exitCode = 1;
      }
    } finally {
      await database.close();
    }
  } catch (error) {
    if (!reportNotMigrated(error, 'the re-sealing', config.database)) {
      logger.fatal({ ...failureForLog(error), database: where }, 'the re-sealing failed');
    }
    process.exitCode = 1;
  }
} catch (error) {
  endOnBadInput(error, usage);
}
