import type { FastifyBaseLogger } from 'fastify';
import type { Registry } from 'prom-client';
import type { Database } from '../db/database.js';
import { createEndpointStore } from './api/endpoints.js';
import { MANAGEMENT_OFF_MESSAGE } from './api/messages.js';
import { createDeclarations } from './delivery/declare.js';
import { createDispatcher } from './delivery/engine.js';
import { createWebhookMetrics } from './delivery/metrics.js';
import { createReplays } from './delivery/replays.js';
import { ENGINE_TIMING, type EngineTiming } from './delivery/timing.js';
import { createUpkeep } from './delivery/upkeep.js';
import { sealSecret } from './security/secrets.js';
import type { WebhookSettings } from './settings.js';

const KEYS_STORED_AS_THEY_ARE =
  'WEBHOOK_ENCRYPTION_KEYS is not set: webhook signing keys and custom headers are stored in the database as they are, so anyone who reads the database or a backup can sign events that the receivers accept and read the credentials those headers carry; set it (see "Endpoint keys at rest" in docs/webhooks.md)';

/** To whom the webhooks go: static origins and paths (never query strings). */
function describeWebhooks(settings: WebhookSettings): string {
  const endpoints = 'the endpoints made through /webhooks/endpoints';
  if (settings.urls.length === 0) return `webhooks: sending each new plant to ${endpoints}`;
  const receivers = settings.urls.map((url) => {
    const { origin, pathname } = new URL(url);
    return `${origin}${pathname}`;
  });
  const count = receivers.length === 1 ? '1 URL' : `${receivers.length} URLs`;
  return `webhooks: sending each new plant to ${count} (${receivers.join(', ')}) and to ${endpoints}`;
}

export interface WebhookDeps {
  logger: FastifyBaseLogger;
  /** Where the engine's metrics are registered. */
  registry: Registry;
  /** An admin token is configured: the management API is on. */
  managed: boolean;
  /** The engine's timings, other than production's (tests). */
  timing?: Partial<EngineTiming> | undefined;
  /** Runs a statement again while the database cannot be reached (it may still be starting). */
  whenDatabaseAnswers: <T>(what: string, attempt: () => Promise<T>) => Promise<T>;
}

/**
 * The webhooks over an open, migrated database, assembled in this one place: the management
 * API's statements, resends and tests, and the delivery engine, not yet started. The WEBHOOK_URLS
 * endpoints are declared first, so that the first change's events are recorded for them.
 */
export async function openWebhooks(db: Database, settings: WebhookSettings, deps: WebhookDeps) {
  const { logger } = deps;
  const { secret, encryptionKeys } = settings;
  const timing = { ...ENGINE_TIMING, ...deps.timing };
  const declarations = createDeclarations(db);
  await deps.whenDatabaseAnswers('declaring WEBHOOK_URLS', () =>
    declarations.declare(
      settings.urls,
      secret === undefined
        ? undefined
        : (endpoint) => sealSecret(secret, encryptionKeys, { endpoint, field: 'secret' }),
      timing.declaredForMs,
      settings.events,
    ),
  );
  const upkeep = createUpkeep(db, settings);
  const replays = createReplays(db, settings);
  const dispatcher = createDispatcher({
    db,
    config: settings,
    logger,
    declarations,
    timing,
    upkeep,
    replays,
    metrics: createWebhookMetrics(deps.registry, () => upkeep.stats()),
  });
  const endpoints = createEndpointStore(db, settings);
  return {
    endpoints,
    replays,
    dispatcher,
    /** Starts the engine, and says in the log where the webhooks go and what is missing. */
    start(): void {
      dispatcher.start();
      logger.info({ webhookSubscribers: settings.urls.length }, describeWebhooks(settings));
      if (!deps.managed) logger.info(MANAGEMENT_OFF_MESSAGE);
      if (encryptionKeys.length === 0 && (deps.managed || settings.urls.length > 0)) {
        logger.warn(KEYS_STORED_AS_THEY_ARE);
      }
    },
  };
}
