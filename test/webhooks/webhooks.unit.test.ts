import fc from 'fast-check';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { exampleBody } from '../../src/webhooks/catalog/event-types.js';
import { plantIdOf } from '../../src/webhooks/catalog/plant-id.js';
import {
  nextStep,
  RETRY_AFTER_MAX_MS,
  retryAfterMs,
} from '../../src/webhooks/delivery/schedule.js';
import { signature, signingKey } from '../../src/webhooks/security/signature.js';
import { eventUuidOf, webhookId } from '../../src/webhooks/tables/ids.js';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const base = { API_TOKENS: 'token', WEBHOOK_SECRET: SECRET };

describe('the webhook configuration', () => {
  it('reads the URLs, the secret and the documented defaults', () => {
    expect(
      loadConfig({ ...base, WEBHOOK_URLS: 'https://a.example/hook, http://b.example:8080/x?k=1,' })
        .webhooks,
    ).toStrictEqual({
      urls: ['https://a.example/hook', 'http://b.example:8080/x?k=1'],
      secret: SECRET,
      events: ['newPlant'],
      timeoutMs: 15000,
      retrySchedule: [5, 300, 1800, 7200, 18000, 36000, 36000],
      concurrency: 64,
      encryptionKeys: [],
      allowPrivateNetworks: false,
      rotationGraceS: 86400,
      disableAfterS: 432000,
      logRetentionS: 604800,
    });
  });

  it('has no static subscriber without WEBHOOK_URLS', () => {
    expect(loadConfig({ API_TOKENS: 'token' }).webhooks).toMatchObject({
      urls: [],
      secret: undefined,
    });
  });

  it.each([
    [
      { WEBHOOK_URLS: 'ftp://a.example/' },
      'WEBHOOK_URLS must be a comma-separated list of http:// or https:// URLs',
    ],
    [
      { WEBHOOK_URLS: 'not a url' },
      'WEBHOOK_URLS must be a comma-separated list of http:// or https:// URLs',
    ],
    [
      { WEBHOOK_URLS: ',' },
      'WEBHOOK_URLS must be a comma-separated list of http:// or https:// URLs',
    ],
    [
      { WEBHOOK_URLS: 'https://u:p@a.example/' },
      'WEBHOOK_URLS must not carry credentials (user:password@) in a URL',
    ],
    [{ WEBHOOK_URLS: 'https://a.example/,https://a.example/' }, 'WEBHOOK_URLS lists a URL twice'],
    [
      { WEBHOOK_URLS: 'https://a.example/', WEBHOOK_SECRET: undefined },
      'WEBHOOK_SECRET must be set when WEBHOOK_URLS is (whsec_ followed by a base64-encoded key)',
    ],
    [
      { WEBHOOK_SECRET: 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' },
      'WEBHOOK_SECRET must be whsec_ followed by a base64-encoded key',
    ],
    [
      { WEBHOOK_SECRET: 'whsec_not base64!' },
      'WEBHOOK_SECRET must be whsec_ followed by a base64-encoded key',
    ],
    [
      { WEBHOOK_SECRET: 'whsec_' },
      'WEBHOOK_SECRET must be whsec_ followed by a base64-encoded key',
    ],
    [
      { WEBHOOK_RETRY_SCHEDULE: '5,,300' },
      'WEBHOOK_RETRY_SCHEDULE must be a comma-separated list of at most 100 delays in seconds (0 to 604800)',
    ],
    [
      { WEBHOOK_RETRY_SCHEDULE: '-1' },
      'WEBHOOK_RETRY_SCHEDULE must be a comma-separated list of at most 100 delays in seconds (0 to 604800)',
    ],
    [{ WEBHOOK_TIMEOUT_MS: '10' }, 'WEBHOOK_TIMEOUT_MS must be an integer from 100 to 300000'],
  ])('refuses %j with a message that names the variable', (env, message) => {
    expect(() => loadConfig({ ...base, ...env })).toThrow(new ConfigError(message));
  });
});

describe('a signature', () => {
  it('verifies with the standardwebhooks package, over the exact body', () => {
    const id = webhookId('0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0');
    const timestamp = Math.floor(Date.now() / 1000);
    const body = '{"id":9223372036854775807,"name":"Ficus 🌿"}';
    const headers = {
      'webhook-id': id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signature(signingKey(SECRET), id, timestamp, body),
    };
    expect(id).toBe('msg_0f1e2d3c4b5a69788796a5b4c3d2e1f0');
    expect(() => new Webhook(SECRET).verify(body, headers)).not.toThrow();
    expect(() => new Webhook(SECRET).verify(body.replace('807', '806'), headers)).toThrow();
  });
});

describe('a test event', () => {
  const at = new Date('2026-11-25T18:30:00.123Z');

  it('has a webhook-id of its own kind, msg_test_', () => {
    const uuid = '0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0';
    expect(webhookId(uuid, 'test')).toBe('msg_test_0f1e2d3c4b5a69788796a5b4c3d2e1f0');
    expect(webhookId(uuid, 'resend')).toBe('msg_0f1e2d3c4b5a69788796a5b4c3d2e1f0');
  });

  it('sends a Plant for newPlant and the envelope for every other type, as compact JSON', () => {
    expect(exampleBody('newPlant', at)).toBe(
      '{"id":9007199254740991,"name":"Monstera","tag":"aroid"}',
    );
    expect(exampleBody('plantDeleted', at)).toBe(
      '{"type":"plantDeleted","timestamp":"2026-11-25T18:30:00.123Z","data":{"id":9007199254740991,"name":"Monstera","tag":"aroid"}}',
    );
    expect(JSON.parse(exampleBody('endpointDisabled', at))).toStrictEqual({
      type: 'endpointDisabled',
      timestamp: '2026-11-25T18:30:00.123Z',
      data: {
        endpointId: 'ep_0000000000000002',
        url: 'https://old.example.org/hooks/plants',
        reason: 'the receiver answered 410 Gone',
        disabledAt: '2026-11-25T18:30:00.123Z',
      },
    });
    expect(Object.keys(JSON.parse(exampleBody('deliveryExhausted', at)).data)).toStrictEqual([
      'endpointId',
      'eventId',
      'eventType',
      'attempts',
      'lastError',
    ]);
  });

  it('names its plant in the attempt log when it is about one', () => {
    expect(plantIdOf(exampleBody('newPlant', at))).toBe('9007199254740991');
    expect(plantIdOf(exampleBody('plantDeleted', at))).toBe('9007199254740991');
    expect(plantIdOf(exampleBody('deliveryExhausted', at))).toBeUndefined();
    expect(plantIdOf('{"id":-9223372036854775808}')).toBe('-9223372036854775808');
  });
});

describe('the next step after an attempt', () => {
  const schedule = [5, 300];
  const answered = (status: number, retryAfter?: string) =>
    ({ kind: 'answered', status, retryAfter }) as const;

  it('is done on any 2xx, and ends the delivery on a 410', () => {
    expect(nextStep(answered(204), 1, schedule)).toStrictEqual({ kind: 'delivered' });
    expect(nextStep(answered(410), 1, schedule)).toStrictEqual({ kind: 'gone' });
  });

  it('waits the schedule with up to 20 % jitter, then gives up after the last delay', () => {
    expect(nextStep(answered(500), 1, schedule, () => 0)).toStrictEqual({
      kind: 'retry',
      delayMs: 5000,
    });
    expect(nextStep({ kind: 'timeout' }, 2, schedule, () => 1)).toStrictEqual({
      kind: 'retry',
      delayMs: 360_000,
    });
    expect(nextStep(answered(302), 3, schedule)).toStrictEqual({ kind: 'failed' });
  });

  it('honours Retry-After on a 429 or 503, in seconds or as an HTTP-date', () => {
    expect(nextStep(answered(429, '120'), 1, schedule)).toStrictEqual({
      kind: 'retry',
      delayMs: 120_000,
    });
    expect(nextStep(answered(500, '120'), 1, schedule, () => 0)).toStrictEqual({
      kind: 'retry',
      delayMs: 5000,
    });
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs('Thu, 01 Jan 2026 00:01:00 GMT', now)).toBe(60_000);
    expect(retryAfterMs('Wed, 31 Dec 2025 00:00:00 GMT', now)).toBe(0);
    expect(retryAfterMs('9999999', now)).toBe(RETRY_AFTER_MAX_MS);
    expect(retryAfterMs('soon', now)).toBeUndefined();
  });
});

describe('an event id', () => {
  it('reads back the UUID of every webhook-id, and none of a test event or another form', () => {
    fc.assert(
      fc.property(fc.uuid(), (uuid) => {
        expect(eventUuidOf(webhookId(uuid))).toBe(uuid);
        expect(eventUuidOf(webhookId(uuid, 'test'))).toBeUndefined();
        expect(eventUuidOf(uuid)).toBeUndefined();
        expect(eventUuidOf(webhookId(uuid).toUpperCase())).toBeUndefined();
      }),
    );
  });
});
