import { createHash } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { DestinationStream } from 'pino';
import { type AppConfig, buildApp } from '../../src/app.js';
import { loadConfig, type WebhookConfig } from '../../src/config.js';
import type { AppDatabase } from '../../src/db/client.js';
import { latestMigrationMillis, schemaStatus } from '../../src/db/migrate.js';
import { openPostgres } from '../../src/db/postgres.js';
import { createMetrics, type Metrics } from '../../src/http/metrics.js';
import { createLogger } from '../../src/logger.js';
import {
  createPlantRepository,
  type PlantRepository,
  type RepositoryOptions,
} from '../../src/plants/repository.js';
import { createDispatcher, type Dispatcher, leaseMsFor } from '../../src/webhooks/dispatcher.js';
import { createWebhookMetrics } from '../../src/webhooks/metrics.js';
import { createOutbox } from '../../src/webhooks/outbox.js';
import { createScratchDatabase, type ScratchDatabase, testEngine } from './database.js';

/** A token configured as itself. */
export const TOKEN = 'test-token-4f1d2c';
/** A token configured only by its SHA-256 digest. */
export const HASHED_TOKEN = 'hashed-token-9b7e3a';
export const TOKEN_ENTRIES = [
  TOKEN,
  `sha256:${createHash('sha256').update(HASHED_TOKEN).digest('hex')}`,
];

export interface TestApp {
  app: FastifyInstance;
  database: ScratchDatabase;
  /** The app's handle on the database. */
  appDatabase: AppDatabase;
  metrics: Metrics;
  /** Every log line the app wrote, as JSON text. */
  logs: string[];
  /** The newPlant webhook's dispatcher, when `webhooks` was given. */
  dispatcher: Dispatcher | undefined;
  close(): Promise<void>;
}

export interface TestAppOptions {
  /** Settings that differ from the production defaults. */
  config?: Partial<AppConfig>;
  /** Apply the migrations to the scratch database first (the default). */
  migrated?: boolean;
  /** A server to use instead of the scratch database (e.g. an unreachable one). */
  databaseUrl?: string;
  repository?: (database: AppDatabase) => PlantRepository;
  /** As the process tells the app that it is shutting down. */
  isStopping?: () => boolean;
  /** Send the newPlant webhook, with a dispatcher running as in production. */
  webhooks?: WebhookConfig;
  /** Where the log goes instead of `logs`, e.g. the service's own stdout destination. */
  logDestination?: DestinationStream;
}

/** The configuration of a service given only its tokens: the production defaults. */
export const defaultConfig = loadConfig({ API_TOKENS: TOKEN_ENTRIES.join(',') });

/**
 * The batching of creates and reads by id as the WRITE_* and READ_* settings default it, and
 * text read the way the service reads it on this project's engine.
 */
export const batching: RepositoryOptions = {
  textAsBytes: testEngine() === 'pglite',
  writes: {
    maxBatchSize: defaultConfig.writeBatchMax,
    maxConcurrentBatches: defaultConfig.writeConcurrency,
    maxQueued: defaultConfig.writeQueueMax,
  },
  reads: {
    maxBatchSize: defaultConfig.readBatchMax,
    maxConcurrentBatches: defaultConfig.readConcurrency,
    maxQueued: defaultConfig.readQueueMax,
  },
};

/** The app wired as in production, on a fresh database of its own. */
export async function startTestApp(options: TestAppOptions = {}): Promise<TestApp> {
  const database = await createScratchDatabase({ migrated: options.migrated ?? true });
  const appDatabase = options.databaseUrl
    ? openPostgres({
        url: options.databaseUrl,
        pooler: false,
        poolMax: 10,
        connectTimeoutMs: 2000,
        statementTimeoutMs: 5000,
        onIdleError: () => {},
      })
    : database.open();
  const logs: string[] = [];
  const logger = createLogger(
    'info',
    options.logDestination ?? { write: (line: string) => logs.push(line) },
  );
  const latestMillis = latestMigrationMillis();
  let repository: PlantRepository | undefined;
  const idle = { queued: 0, inFlight: 0 };
  const metrics = createMetrics({
    pool: appDatabase.poolStats,
    writes: () => repository?.stats().writes ?? idle,
    reads: () => repository?.stats().reads ?? idle,
  });
  const { webhooks } = options;
  let dispatcher: Dispatcher | undefined;
  const outbox = webhooks && { urls: webhooks.urls, leaseMs: leaseMsFor(webhooks) };
  repository = options.repository
    ? options.repository(appDatabase)
    : createPlantRepository(appDatabase.db, {
        textAsBytes: batching.textAsBytes,
        writes: { ...batching.writes, onBatch: (size) => metrics.observeBatch(size) },
        reads: { ...batching.reads, onBatch: (size) => metrics.observeReadBatch(size) },
        ...(outbox && { recordEvents: true, onCreated: () => dispatcher?.wake() }),
      });
  if (webhooks && outbox) {
    const statements = createOutbox(appDatabase.db, outbox);
    dispatcher = createDispatcher({
      db: appDatabase.db,
      config: webhooks,
      logger,
      outbox: statements,
      metrics: createWebhookMetrics(metrics.registry, () => statements.stats()),
    });
    dispatcher.start();
  }
  const app = await buildApp({
    config: { ...defaultConfig, ...options.config },
    logger,
    repository,
    checkReadiness: () => schemaStatus(appDatabase.db, latestMillis),
    ...(options.isStopping && { isStopping: options.isStopping }),
    metrics,
  });
  return {
    app,
    database,
    appDatabase,
    metrics,
    logs,
    dispatcher,
    async close() {
      await app.close();
      await dispatcher?.stop(0);
      await appDatabase.close();
      await database.drop();
    },
  };
}

/** POST /plants with a valid token and a JSON content type unless `headers` says otherwise. */
export function postPlant(
  app: FastifyInstance,
  body: string | object,
  headers: Record<string, string | undefined> = {},
): Promise<LightMyRequestResponse> {
  const allHeaders: Record<string, string> = {};
  for (const [name, value] of Object.entries({
    authorization: `Bearer ${TOKEN}`,
    'content-type': 'application/json',
    ...headers,
  })) {
    if (value !== undefined) allHeaders[name] = value;
  }
  return app.inject({
    method: 'POST',
    url: '/plants',
    headers: allHeaders,
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

// Keeps a leading U+FEFF, which a default TextDecoder (the embedded engine's driver) drops.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const fromHex = (hex: string) => utf8.decode(Buffer.from(hex, 'hex'));

/** The row of `id`, its text read as UTF-8 bytes so that nothing in between can alter it. */
export async function storedPlant(database: ScratchDatabase, id: string | number | bigint) {
  const rows = await database.query<{ id: string; name: string; tag: string | null }>(
    `select id::text as id,
            encode(convert_to(name, 'UTF8'), 'hex') as name,
            encode(convert_to(tag, 'UTF8'), 'hex') as tag
       from plants where id = $1`,
    [String(id)],
  );
  const [row] = rows;
  return (
    row && { id: row.id, name: fromHex(row.name), tag: row.tag === null ? null : fromHex(row.tag) }
  );
}
