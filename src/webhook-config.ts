import { createSecretKey, type KeyObject } from 'node:crypto';
import type { Environment } from './config.js';
import { ConfigError } from './config-error.js';
import { EVENT_TYPE_NAMES, type EventTypeName, isEventTypeName } from './webhooks/event-types.js';
import type { EncryptionKey, KeyRing } from './webhooks/secrets.js';

// The webhook settings (WEBHOOK_*), read from the environment that config.ts checked.

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

/** A 32-byte key from its base64, or undefined when it is not one. */
function keyOf(encoded: string): KeyObject | undefined {
  const bytes = Buffer.from(encoded, 'base64');
  const valid = /^[A-Za-z0-9+/]+={0,2}$/.test(encoded) && bytes.length === 32;
  return valid ? createSecretKey(bytes) : undefined;
}

/** The key ring: `kid:base64` entries, or WEBHOOK_ENCRYPTION_KEY alone as the key `default`. */
function parseEncryptionKeys(list: string | undefined, single: string | undefined): KeyRing {
  if (list !== undefined && single !== undefined) {
    throw new ConfigError(
      'WEBHOOK_ENCRYPTION_KEYS and WEBHOOK_ENCRYPTION_KEY are both set: list every key in WEBHOOK_ENCRYPTION_KEYS (the one WEBHOOK_ENCRYPTION_KEY held as default:...)',
    );
  }
  if (single !== undefined) {
    const key = keyOf(single);
    if (key) return [{ id: 'default', key }];
    throw new ConfigError('WEBHOOK_ENCRYPTION_KEY must be the base64 encoding of 32 bytes');
  }
  const ring: EncryptionKey[] = [];
  const fail = (problem: string) => new ConfigError(`WEBHOOK_ENCRYPTION_KEYS ${problem}`);
  for (const [index, entry] of (list ?? '').split(',').entries()) {
    if (entry.trim() === '') continue;
    const [, id = '', encoded = ''] = /^\s*([A-Za-z0-9._-]{1,64}):(.*?)\s*$/.exec(entry) ?? [];
    const key = keyOf(encoded);
    if (id === '') {
      throw fail(
        `entry ${index + 1} must be kid:base64-of-32-bytes, the kid 1 to 64 of A-Z a-z 0-9 . _ -`,
      );
    }
    if (!key) throw fail(`has a key "${id}" that is not the base64 encoding of 32 bytes`);
    if (ring.some((known) => known.id === id)) throw fail(`names the key id "${id}" twice`);
    ring.push({ id, key });
  }
  if (list !== undefined && ring.length === 0) {
    throw new ConfigError('WEBHOOK_ENCRYPTION_KEYS must list at least one kid:base64-of-32-bytes');
  }
  return ring;
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

/** The settings of the webhooks: the delivery engine's, and the management API's. */
export function readWebhooks(environment: Environment) {
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
    /** Endpoint secrets are sealed under the first of these AES-256-GCM keys; every one opens. */
    encryptionKeys: parseEncryptionKeys(
      environment.WEBHOOK_ENCRYPTION_KEYS,
      environment.WEBHOOK_ENCRYPTION_KEY,
    ),
    /** Let endpoints reach loopback, private and link-local addresses (development, tests). */
    allowPrivateNetworks: environment.WEBHOOK_ALLOW_PRIVATE_NETWORKS,
    /** How long the key before a rotation still signs, in seconds. */
    rotationGraceS: environment.WEBHOOK_ROTATION_GRACE_S,
    /** An endpoint whose attempts all failed for this long is disabled, in seconds. */
    disableAfterS: environment.WEBHOOK_DISABLE_AFTER_S,
    /** How long attempts and failed deliveries are kept, in seconds. */
    logRetentionS: environment.WEBHOOK_LOG_RETENTION_S,
  };
}
