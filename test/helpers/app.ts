import { createHash } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { DestinationStream } from 'pino';
import { loadConfig } from '../../src/config.js';
import type { AppDatabase } from '../../src/db/app-database.js';
import type { Metrics } from '../../src/http/metrics.js';
import { createLogger } from '../../src/logger.js';
import type { PlantRepository, RepositoryOptions } from '../../src/plants/repository.js';
import { createService, type Service } from '../../src/service.js';
import type { Dispatcher } from '../../src/webhooks/delivery/engine.js';
import type { EngineTiming } from '../../src/webhooks/delivery/timing.js';
import type { WebhookSettings } from '../../src/webhooks/settings.js';
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
  service: Service;
  database: ScratchDatabase;
  /** The app's handle on the database. */
  appDatabase: AppDatabase;
  metrics: Metrics;
  /** Every log line the app wrote, as JSON text. */
  logs: string[];
  /** The webhook's dispatcher, once the service is open. */
  dispatcher: Dispatcher | undefined;
  close(): Promise<void>;
}

export interface TestAppOptions {
  /**
   * Settings that differ from the production defaults, as the environment gives them; a
   * function is given the URL of the app's database (absent on the embedded engine).
   */
  env?: Record<string, string> | ((databaseUrl: string | undefined) => Record<string, string>);
  /** Apply the migrations to the scratch database first (the default). */
  migrated?: boolean;
  /** Another replica of `replicaOf`: on its database, which closing this one leaves in place. */
  replicaOf?: TestApp;
  /** A server to use instead of the scratch database (e.g. an unreachable one). */
  databaseUrl?: string;
  repository?: (database: AppDatabase) => PlantRepository;
  /** As the process tells the app that it is shutting down. */
  isStopping?: () => boolean;
  /** Send the newPlant webhook, with a dispatcher running as in production. */
  /** Webhook settings over those of the environment (WEBHOOK_* in `env`). */
  webhooks?: Partial<WebhookSettings>;
  /** Timings of the delivery engine over production's (see EngineTiming). */
  webhookTiming?: Partial<EngineTiming>;
  /** Where the log goes instead of `logs`, e.g. the service's own stdout destination. */
  logDestination?: DestinationStream;
}

/** The configuration of a service given its tokens and `env`: otherwise the production defaults. */
export function testConfig(env: Record<string, string> = {}) {
  return loadConfig({ API_TOKENS: TOKEN_ENTRIES.join(','), ...env });
}

/** The configuration of a service given only its tokens: the production defaults. */
export const defaultConfig = testConfig();

/**
 * The batching of creates and reads by id as the WRITE_* and READ_* settings default it, and
 * text read the way the service reads it on this project's engine.
 */
export const batching: RepositoryOptions = {
  textAsBytes: testEngine() === 'pglite',
  writes: defaultConfig.writes,
  reads: defaultConfig.reads,
};

/** The service built as in production (createService), on a fresh database of its own. */
export async function startTestApp(options: TestAppOptions = {}): Promise<TestApp> {
  const database =
    options.replicaOf?.database ??
    (await createScratchDatabase({ migrated: options.migrated ?? true }));
  const logs: string[] = [];
  const logger = createLogger(
    'info',
    options.logDestination ?? { write: (line: string) => logs.push(line) },
  );
  // A server's scratch database is opened by the service, as DATABASE_URL says; the embedded
  // engine is one instance in this process, so the service is handed the scratch one.
  const databaseUrl = options.databaseUrl ?? database.url;
  const config = testConfig({
    // The scratch database is migrated (or not) as the test asks.
    MIGRATE_ON_START: 'false',
    // Closing does not wait for webhook attempts in flight.
    SHUTDOWN_TIMEOUT_MS: '0',
    ...(databaseUrl && { DATABASE_URL: databaseUrl, DB_CONNECT_TIMEOUT_MS: '2000' }),
    ...(typeof options.env === 'function' ? options.env(databaseUrl) : options.env),
  });
  const service = await createService(
    { ...config, webhooks: { ...config.webhooks, ...options.webhooks } },
    {
      logger,
      ...(!databaseUrl && { database: database.open() }),
      ...(options.repository && { repository: options.repository }),
      ...(options.isStopping && { isStopping: options.isStopping }),
      ...(options.webhookTiming && { webhookTiming: options.webhookTiming }),
    },
  );
  await service.open();
  const appDatabase = service.database;
  if (!appDatabase) throw new Error('the service did not open its database');
  return {
    app: service.app,
    service,
    database,
    appDatabase,
    metrics: service.metrics,
    logs,
    dispatcher: service.dispatcher,
    async close() {
      await service.close();
      if (!options.replicaOf) await database.drop();
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
