import { createHash } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { type AppConfig, buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import type { AppDatabase } from '../../src/db/client.js';
import { latestMigrationMillis, schemaStatus } from '../../src/db/migrate.js';
import { openPostgres } from '../../src/db/postgres.js';
import { createMetrics, type Metrics } from '../../src/http/metrics.js';
import { createLogger } from '../../src/logger.js';
import {
  type BatchingOptions,
  createPlantRepository,
  type PlantRepository,
} from '../../src/plants/repository.js';
import { createScratchDatabase, type ScratchDatabase } from './database.js';

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
}

/** The configuration of a service given only its tokens: the production defaults. */
export const defaultConfig = loadConfig({ API_TOKENS: TOKEN_ENTRIES.join(',') });

/** The write path as WRITE_BATCH_MAX, WRITE_CONCURRENCY and WRITE_QUEUE_MAX default it. */
export const batching: BatchingOptions = {
  maxBatchSize: defaultConfig.writeBatchMax,
  maxConcurrentBatches: defaultConfig.writeConcurrency,
  maxQueued: defaultConfig.writeQueueMax,
};

/** The app wired as in production, on a fresh database of its own. */
export async function startTestApp(options: TestAppOptions = {}): Promise<TestApp> {
  const database = await createScratchDatabase({ migrated: options.migrated ?? true });
  const appDatabase = options.databaseUrl
    ? openPostgres({
        url: options.databaseUrl,
        poolMax: 10,
        connectTimeoutMs: 2000,
        statementTimeoutMs: 5000,
        onIdleError: () => {},
      })
    : database.open();
  const logs: string[] = [];
  const latestMillis = latestMigrationMillis();
  let repository: PlantRepository | undefined;
  const metrics = createMetrics({
    pool: appDatabase.poolStats,
    writes: () => repository?.stats() ?? { queued: 0, inFlight: 0 },
  });
  repository = options.repository
    ? options.repository(appDatabase)
    : createPlantRepository(appDatabase.db, {
        ...batching,
        onBatch: (size) => metrics.observeBatch(size),
      });
  const app = await buildApp({
    config: { ...defaultConfig, ...options.config },
    logger: createLogger('info', { write: (line: string) => logs.push(line) }),
    repository,
    checkReadiness: () => schemaStatus(appDatabase.db, latestMillis),
    metrics,
  });
  return {
    app,
    database,
    appDatabase,
    metrics,
    logs,
    async close() {
      await app.close();
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
