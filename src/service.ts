import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import type { Config } from './config.js';
import type { AppDatabase } from './db/app-database.js';
import { createAuthFailureCounts } from './db/auth-failures.js';
import { describeDatabase, openDatabase } from './db/client.js';
import { failureForLog, isDatabaseUnavailable } from './db/errors.js';
import { describeMigrations, latestMigrationMillis, schemaStatus } from './db/migrate.js';
import type { AuthFailureStore } from './http/auth-throttle.js';
import { HttpError, SERVICE_STARTING_MESSAGE } from './http/errors.js';
import { createMetrics, type Metrics, startMetricsServer } from './http/metrics.js';
import { collectWhenIdle } from './idle-collection.js';
import { createLogger } from './logger.js';
import { createPlantRepository, type PlantRepository } from './plants/repository.js';
import { startTracing } from './tracing/start.js';
import type { EndpointStore } from './webhooks/api/endpoints.js';
import type { Dispatcher } from './webhooks/delivery/engine.js';
import type { Replays } from './webhooks/delivery/replays.js';
import type { EngineTiming } from './webhooks/delivery/timing.js';
import { openWebhooks } from './webhooks/open.js';

export interface ServiceDeps {
  /** The service's logger; JSON lines on stdout at `config.logLevel` when absent. */
  logger?: FastifyBaseLogger;
  /** The database to use instead of opening the one `config.database` names (tests). */
  database?: AppDatabase;
  /** Replaces the repository made over the database (tests that inject faults). */
  repository?: (database: AppDatabase) => PlantRepository;
  /** The environment that may ask for traces (OTEL_*); none when absent. */
  env?: NodeJS.ProcessEnv;
  /** The delivery engine's timings, other than production's (tests). */
  webhookTiming?: Partial<EngineTiming>;
  /** True when the service should act as shutting down before close() is called (tests). */
  isStopping?: () => boolean;
}

export interface Service {
  /** The HTTP app: it answers at once, 503 "starting" on the API until open() has resolved. */
  app: FastifyInstance;
  logger: FastifyBaseLogger;
  metrics: Metrics;
  /** Listens on `config.port` (and `config.metricsPort`, when set). */
  listen(): Promise<void>;
  /** Opens the database (waiting while it is unreachable), migrates it, starts the webhook. */
  open(): Promise<void>;
  /**
   * Reports not ready at once, keeps serving for `notReadyMs`, then stops accepting, finishes
   * in-flight work and closes every resource, in order. Safe to call more than once.
   */
  close(options?: { notReadyMs?: number }): Promise<void>;
  /** The database once open() has it: for tests and one-off checks. */
  readonly database: AppDatabase | undefined;
  readonly dispatcher: Dispatcher | undefined;
}

// Node's default (511) drops connections when thousands arrive at once; the kernel caps it at
// net.core.somaxconn.
const LISTEN_BACKLOG = 4096;

const idle = { queued: 0, inFlight: 0 };

const starting = () => new HttpError(503, SERVICE_STARTING_MESSAGE, { 'retry-after': '1' });

/** The one place the service is assembled: every part is made here, and closed here. */
export async function createService(config: Config, deps: ServiceDeps = {}): Promise<Service> {
  const logger = deps.logger ?? createLogger(config.logLevel);
  let database = deps.database;
  let repository: PlantRepository | undefined;
  let authFailures: AuthFailureStore | undefined;
  let endpoints: EndpointStore | undefined;
  let replays: Replays | undefined;
  let dispatcher: Dispatcher | undefined;
  let metricsServer: FastifyInstance | undefined;
  let stopping = false;
  let opening: Promise<void> | undefined;
  let closing: Promise<void> | undefined;

  const tracing = await startTracing(deps.env ?? {});
  if (tracing) {
    logger.info({ endpoint: tracing.endpoint }, `tracing: exporting spans to ${tracing.endpoint}`);
  }
  const metrics = createMetrics({
    pool:
      config.database.url === undefined && deps.database?.poolStats === undefined
        ? undefined
        : () => database?.poolStats?.() ?? { total: 0, idle: 0, waiting: 0 },
    writes: () => repository?.stats().writes ?? idle,
    reads: () => repository?.stats().reads ?? idle,
    deletes: () => repository?.stats().deletes ?? idle,
    ...(config.database.replicaUrls.length > 0 && {
      replicaLags: () => database?.replicas?.lags() ?? [],
    }),
  });
  const latestMillis = latestMigrationMillis();
  const stopIdleCollection = collectWhenIdle();
  const app = await buildApp({
    config,
    logger,
    plants: () => {
      if (repository === undefined) throw starting();
      return repository;
    },
    endpoints: () => {
      if (endpoints === undefined) throw starting();
      return endpoints;
    },
    replays: () => {
      if (replays === undefined) throw starting();
      return replays;
    },
    // Every process that serves the API runs the engine: a test is sent by the one it asks.
    dispatcher: () => {
      if (dispatcher === undefined) throw starting();
      return dispatcher;
    },
    // A change to an endpoint through the API, committed: what waits here for it is claimed again.
    onEndpointsChanged: (key) => dispatcher?.endpointChanged(key),
    onDeliveriesDue: (key) => dispatcher?.deliveriesDue(key),
    // Until open() has made it, each failure is counted in memory: a guess must not go uncounted
    // while the service starts, and the count cannot be shared before the database answers.
    authFailures: () => authFailures,
    checkReadiness: async () =>
      database && repository ? schemaStatus(database.db, latestMillis) : 'starting',
    isStopping: deps.isStopping ? () => stopping || deps.isStopping?.() === true : () => stopping,
    metrics,
    traced: tracing !== undefined,
  });

  /** Retries `attempt` while the database is unreachable (it may still be starting). */
  async function whenDatabaseAnswers<T>(what: string, attempt: () => Promise<T>): Promise<T> {
    for (let delay = 250; ; delay = Math.min(delay * 2, 5000)) {
      try {
        return await attempt();
      } catch (error) {
        if (!isDatabaseUnavailable(error) || stopping) throw error;
        const cause = failureForLog(error).reason;
        logger.warn(
          { cause, retryInMs: delay },
          `${what}: the database is not reachable yet (${cause}); retrying in ${delay} ms`,
        );
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  async function openDatabaseOnce(): Promise<AppDatabase> {
    if (database) return database;
    const { engine, description, creating } = describeDatabase(config.database);
    logger.info(
      { engine },
      engine === 'pglite'
        ? `${creating ? 'creating' : 'opening'} ${description}${creating ? ' (a new database takes a few seconds)' : ''}: for trying things out, local runs and tests; set DATABASE_URL to use a PostgreSQL server`
        : `using ${description}`,
    );
    const { replicaUrls, replicaMaxLagMs, ...server } = config.database;
    database = await openDatabase({
      ...server,
      onIdleError: (error) =>
        logger.warn(failureForLog(error), 'an idle database connection failed'),
      ...(replicaUrls.length > 0 && {
        replicas: { urls: replicaUrls, maxLagMs: replicaMaxLagMs, log: logger },
      }),
    });
    if (replicaUrls.length > 0) {
      logger.info(
        { replicas: database.replicas?.replicas.map((replica) => replica.name) },
        `reading from ${replicaUrls.length} replica${replicaUrls.length === 1 ? '' : 's'} as well, each at most ${replicaMaxLagMs} ms behind for a read without a Consistency-Token`,
      );
    }
    return database;
  }

  async function openOnce(): Promise<void> {
    const db = await openDatabaseOnce();
    if (stopping) return;
    if (config.database.migrateOnStart) {
      const applied = await whenDatabaseAnswers('migrating', () =>
        db.migrate({ ...config.database.migration, log: logger }),
      );
      logger.info({ migrations: applied }, describeMigrations(applied, 'the database'));
    }
    if (stopping) return;
    authFailures = createAuthFailureCounts(db.db, {
      limit: config.auth.failuresPerAddress,
      windowMs: config.auth.windowMs,
    });
    const webhooks = await openWebhooks(db.db, config.webhooks, {
      logger,
      registry: metrics.registry,
      managed: config.auth.adminTokens.length > 0,
      timing: deps.webhookTiming,
      whenDatabaseAnswers,
    });
    if (stopping) return;
    repository = deps.repository
      ? deps.repository(db)
      : createPlantRepository(db.db, {
          textAsBytes: db.engine === 'pglite',
          databaseUrl: config.database.url,
          recordEvents: true,
          onRecorded: () => dispatcher?.wake(),
          ...(db.replicas && {
            replicas: {
              set: db.replicas,
              onRead: (where, count) => metrics.observeReads(where, count),
            },
          }),
          writes: { ...config.writes, onBatch: (size) => metrics.observeBatch(size) },
          reads: { ...config.reads, onBatch: (size) => metrics.observeReadBatch(size) },
        });
    endpoints = webhooks.endpoints;
    replays = webhooks.replays;
    dispatcher = webhooks.dispatcher;
    webhooks.start();
  }

  async function listen(): Promise<void> {
    if (stopping) return;
    await app.listen({ port: config.port, host: config.host, backlog: LISTEN_BACKLOG });
    if (config.metricsPort !== undefined && !stopping) {
      metricsServer = await startMetricsServer(metrics, {
        port: config.metricsPort,
        host: config.host,
        logger,
      });
    }
  }

  async function shutDown(notReadyMs: number): Promise<void> {
    stopping = true;
    // Orchestrators stop with SIGTERM: serve on, not ready, until the load balancer has noticed.
    if (notReadyMs > 0 && app.server.listening) {
      logger.info({ delayMs: notReadyMs }, 'shutting down: not ready, serving');
      await new Promise((resolve) => setTimeout(resolve, notReadyMs));
    }
    logger.info('shutting down: finishing in-flight requests');
    try {
      stopIdleCollection();
      // Each step waits for the one before it: requests first, then the work they started.
      await app.close();
      await metricsServer?.close();
      // A database still opening is closed once it is open (PGlite takes seconds to create).
      await opening?.catch(() => {});
      await repository?.drain();
      // Attempts in flight get half the grace period; the rest are given back to other replicas.
      await dispatcher?.stop(config.shutdown.timeoutMs / 2);
      await database?.close();
    } finally {
      // The spans of the last requests and deliveries, still buffered.
      await tracing?.shutdown();
    }
  }

  return {
    app,
    logger,
    metrics,
    listen,
    open: () => {
      opening ??= openOnce();
      return opening;
    },
    close: (options = {}) => {
      closing ??= shutDown(options.notReadyMs ?? 0);
      return closing;
    },
    get database() {
      return database;
    },
    get dispatcher() {
      return dispatcher;
    },
  };
}
