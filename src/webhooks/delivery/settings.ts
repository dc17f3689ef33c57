import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../../config-error.js';
import { integer } from '../../environment.js';
import { EVENT_TYPE_NAMES, type EventTypeName, isEventTypeName } from '../catalog/event-types.js';

/** The delivery engine's variables, with their defaults. */
export const DeliveryEnvironment = Type.Object({
  WEBHOOK_URLS: Type.Optional(Type.String()),
  WEBHOOK_SECRET: Type.Optional(Type.String()),
  WEBHOOK_TIMEOUT_MS: integer(100, 300_000, 15_000),
  WEBHOOK_RETRY_SCHEDULE: Type.String({ default: '5,300,1800,7200,18000,36000,36000' }),
  WEBHOOK_CONCURRENCY: integer(1, 10_000, 64),
  WEBHOOK_DISABLE_AFTER_S: integer(60, 31_536_000, 432_000),
  WEBHOOK_LOG_RETENTION_S: integer(60, 31_536_000, 604_800),
  WEBHOOK_EVENTS: Type.String({ default: 'newPlant' }),
});

function parseWebhookUrls(value: string): string[] {
  const urls: string[] = [];
  for (const entry of value.split(',').map((item) => item.trim())) {
    if (entry === '') continue;
    const url = URL.canParse(entry) ? new URL(entry) : undefined;
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
      throw new ConfigError(
        'WEBHOOK_URLS must be a comma-separated list of http:// or https:// URLs',
      );
    }
    if (url.username !== '' || url.password !== '') {
      throw new ConfigError('WEBHOOK_URLS must not carry credentials (user:password@) in a URL');
    }
    url.hash = '';
    if (urls.includes(url.href)) throw new ConfigError('WEBHOOK_URLS lists a URL twice');
    urls.push(url.href);
  }
  if (urls.length === 0) {
    throw new ConfigError(
      'WEBHOOK_URLS must be a comma-separated list of http:// or https:// URLs',
    );
  }
  return urls;
}

const webhookSecretPattern =
  /^whsec_(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function parseWebhookSecret(value: string): string {
  if (!webhookSecretPattern.test(value) || value.length === 'whsec_'.length) {
    throw new ConfigError('WEBHOOK_SECRET must be whsec_ followed by a base64-encoded key');
  }
  return value;
}

const retrySeconds = /^\d{1,6}(\.\d{1,3})?$/;

function parseRetrySchedule(value: string): number[] {
  const steps = value.split(',').map((item) => item.trim());
  if (
    steps.length > 100 ||
    !steps.every((step) => retrySeconds.test(step) && Number(step) <= 604_800)
  ) {
    throw new ConfigError(
      'WEBHOOK_RETRY_SCHEDULE must be a comma-separated list of at most 100 delays in seconds (0 to 604800)',
    );
  }
  return steps.map(Number);
}

const eventsProblem = 'WEBHOOK_EVENTS must be a comma-separated list of event types';

/** The event types the WEBHOOK_URLS endpoints receive. */
function parseWebhookEvents(value: string): EventTypeName[] {
  const events: EventTypeName[] = [];
  for (const entry of value.split(',').map((item) => item.trim())) {
    if (entry === '') continue;
    if (!isEventTypeName(entry)) {
      throw new ConfigError(
        `WEBHOOK_EVENTS names an unknown event type ${JSON.stringify(entry)}: the types are ${EVENT_TYPE_NAMES.join(', ')}`,
      );
    }
    if (events.includes(entry)) throw new ConfigError(`WEBHOOK_EVENTS names ${entry} twice`);
    events.push(entry);
  }
  if (events.length === 0) {
    throw new ConfigError(`${eventsProblem} (${EVENT_TYPE_NAMES.join(', ')})`);
  }
  return events;
}

/** What the engine sends, to whom, how long it waits and how often it tries again. */
export function readDeliverySettings(environment: Static<typeof DeliveryEnvironment>) {
  const secret =
    environment.WEBHOOK_SECRET === undefined
      ? undefined
      : parseWebhookSecret(environment.WEBHOOK_SECRET);
  const urls =
    environment.WEBHOOK_URLS === undefined ? [] : parseWebhookUrls(environment.WEBHOOK_URLS);
  if (urls.length > 0 && secret === undefined) {
    throw new ConfigError(
      'WEBHOOK_SECRET must be set when WEBHOOK_URLS is (whsec_ followed by a base64-encoded key)',
    );
  }
  return {
    /** The operator's static subscribers, all signed with `secret`; may be empty. */
    urls,
    secret,
    /** The event types the `urls` endpoints receive. */
    events: parseWebhookEvents(environment.WEBHOOK_EVENTS),
    timeoutMs: environment.WEBHOOK_TIMEOUT_MS,
    retrySchedule: parseRetrySchedule(environment.WEBHOOK_RETRY_SCHEDULE),
    concurrency: environment.WEBHOOK_CONCURRENCY,
    /** An endpoint whose attempts all failed for this long is disabled, in seconds. */
    disableAfterS: environment.WEBHOOK_DISABLE_AFTER_S,
    /** How long attempts and failed deliveries are kept, in seconds. */
    logRetentionS: environment.WEBHOOK_LOG_RETENTION_S,
  };
}

export type DeliverySettings = ReturnType<typeof readDeliverySettings>;
