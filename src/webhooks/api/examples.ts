import { Type } from '@sinclair/typebox';
import { errorResponse } from '../../http/errors.js';
import type { Example, OperationExamples } from '../../http/openapi.js';
import { EVENT_TYPES_JSON } from '../catalog/event-types.js';

// Examples of the management API's bodies, for the OpenAPI document: valid against their schemas
// (test/integration/openapi.test.ts checks), in the words the service answers with.

const error = (status: number, message: string, summary: string): Example => ({
  summary,
  value: { error: status, message },
});

const subscriber = {
  id: 'ep_0000000000000001',
  url: 'https://receiver.example.com/plants',
  description: 'Inventory of the greenhouse',
  disabled: false,
  events: ['newPlant'],
  rateLimit: null,
  createdAt: '2026-11-25T18:30:00.000Z',
  updatedAt: '2026-11-25T18:30:00.000Z',
};

const gone = {
  id: 'ep_0000000000000002',
  url: 'https://old.example.org/hooks/plants',
  description: '',
  disabled: true,
  disabledReason: 'the receiver answered 410 Gone',
  events: ['newPlant', 'plantDeleted'],
  rateLimit: 50,
  createdAt: '2026-11-20T09:00:00.000Z',
  updatedAt: '2026-11-24T12:00:05.123Z',
};

export const endpointExamples = {
  newEndpoint: {
    minimal: { summary: 'A URL: a new key is made', value: { url: subscriber.url } },
    full: {
      summary: 'Every field, with a key of its own',
      value: {
        url: subscriber.url,
        description: subscriber.description,
        disabled: false,
        secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      },
    },
  },
  endpoint: { subscriber: { summary: 'An endpoint', value: subscriber } },
  page: {
    two: { summary: 'GET /webhooks/endpoints: two endpoints', value: [subscriber, gone] },
  },
  patch: {
    disable: { summary: 'Disable it', value: { disabled: true } },
    move: {
      summary: 'A new URL; the description back to ""',
      value: { url: 'https://receiver.example.com/v2/plants', description: null },
    },
  },
  patched: {
    disabled: {
      summary: 'Disabled through the API: no reason',
      value: { ...subscriber, disabled: true, updatedAt: '2026-11-25T18:45:00.000Z' },
    },
  },
  secret: {
    key: { summary: 'The current key', value: { key: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' } },
  },
  rotation: {
    newKey: { summary: 'A new random key', value: {} },
    givenKey: {
      summary: 'A key of your own',
      value: { key: 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD' },
    },
  },
  attempts: {
    page: {
      summary: 'GET .../attempts: the newest attempt first',
      value: [
        {
          id: 'att_0000000000000004',
          eventId: 'msg_test_7c3e9a1d5b2f48e6a0d4c8b1f9e2a357',
          plantId: 9007199254740991,
          trigger: 'test',
          status: 'failed',
          responseStatus: 401,
          durationMs: 12,
          attemptedAt: '2026-11-25T18:40:00.000Z',
        },
        {
          id: 'att_0000000000000003',
          eventId: 'msg_2b8a1f0c6e9d4c1ab3f57e0d9c4a8b21',
          plantId: 9007199254740991,
          trigger: 'retry',
          status: 'succeeded',
          responseStatus: 200,
          durationMs: 42,
          attemptedAt: '2026-11-25T18:31:05.250Z',
        },
        {
          id: 'att_0000000000000002',
          eventId: 'msg_2b8a1f0c6e9d4c1ab3f57e0d9c4a8b21',
          plantId: 9007199254740991,
          trigger: 'delivery',
          status: 'failed',
          responseStatus: 503,
          durationMs: 120,
          attemptedAt: '2026-11-25T18:31:00.100Z',
        },
        {
          id: 'att_0000000000000001',
          eventId: 'msg_5f0e3d2c1b0a49887766554433221100',
          plantId: 1,
          trigger: 'resend',
          status: 'failed',
          error: 'connection refused',
          durationMs: 3,
          attemptedAt: '2026-11-25T18:30:59.000Z',
        },
      ],
    },
  },
  recover: {
    lastDay: { summary: 'Since a time', value: { since: '2026-11-24T18:30:00Z' } },
  },
  recovering: { some: { summary: 'Three deliveries due again', value: { recovering: 3 } } },
  headers: {
    some: {
      summary: 'Two headers for the receiver',
      value: {
        headers: {
          Authorization: 'Bearer receiver-token-4c1f8a',
          'X-Greenhouse': 'north',
        },
      },
    },
  },
  setHeaders: {
    some: {
      summary: 'Two headers, in place of those it had',
      value: {
        headers: {
          Authorization: 'Bearer receiver-token-4c1f8a',
          'X-Greenhouse': 'north',
        },
      },
    },
    none: { summary: 'No custom header any more', value: { headers: {} } },
  },
  noHeaders: { none: { summary: 'An endpoint without custom headers', value: { headers: {} } } },
  test: {
    newPlant: { summary: 'An example Plant (newPlant): no body, or {}', value: {} },
    plantDeleted: { summary: 'An example of another type', value: { eventType: 'plantDeleted' } },
  },
  tested: {
    succeeded: {
      summary: 'The receiver answered 2xx',
      value: {
        eventId: 'msg_test_7c3e9a1d5b2f48e6a0d4c8b1f9e2a357',
        status: 'succeeded',
        responseStatus: 204,
        durationMs: 35,
      },
    },
    refused: {
      summary: 'The receiver did not verify the signature',
      value: {
        eventId: 'msg_test_0d9f8e7c6b5a44332211ffeeddccbbaa',
        status: 'failed',
        responseStatus: 401,
        durationMs: 12,
      },
    },
    unreachable: {
      summary: 'No answer in time',
      value: {
        eventId: 'msg_test_5e4d3c2b1a0948f7e6d5c4b3a2918070',
        status: 'failed',
        error: 'timeout',
        durationMs: 15000,
      },
    },
  },
  eventTypes: {
    catalog: {
      summary: 'GET /webhooks/event-types: the catalog',
      value: JSON.parse(EVENT_TYPES_JSON),
    },
  },
};

export const DISABLED_MESSAGE =
  'the endpoint is disabled: enable it (PATCH disabled false) before recovering';
export const DISABLED_SEND_MESSAGE =
  'the endpoint is disabled: enable it (PATCH disabled false) before sending to it';
export const MALFORMED_ENDPOINT_ID_MESSAGE =
  'no webhook endpoint has this id: endpoint ids are ep_ and 16 hexadecimal digits, such as ep_0000000000000001';
export const UNKNOWN_EVENT_MESSAGE = 'this endpoint has no event with this id in its attempt log';
export const CONFIGURED_MESSAGE =
  'the endpoint is declared by WEBHOOK_URLS: change that setting to change or remove it';
export const HEADERS_UNAVAILABLE_MESSAGE =
  'the custom headers of this endpoint cannot be read with the encryption key this service has; set them again to replace them';
/**
 * Why an endpoint's key cannot be read, and the fix that keeps it: the key that sealed it, back
 * in the ring. A rotation would give the endpoint a key that none of its receivers knows.
 */
export const secretUnavailableMessage = (missingKeyId?: string) =>
  missingKeyId === undefined
    ? 'the secret of this endpoint cannot be read with the encryption keys this service has: add the key that sealed it back to WEBHOOK_ENCRYPTION_KEYS (rotating it instead gives the endpoint a key its receivers do not know)'
    : `the secret of this endpoint is sealed under the key id "${missingKeyId}", which WEBHOOK_ENCRYPTION_KEYS does not hold: add that key back to WEBHOOK_ENCRYPTION_KEYS (rotating it instead gives the endpoint a key its receivers do not know)`;

export const endpointErrorExamples = {
  invalidBody: {
    url: error(
      400,
      'body/url must be an absolute http or https URL of at most 2048 characters, without user information',
      'The URL is not http(s), or holds user:password@',
    ),
    secret: error(
      400,
      'body/secret must be whsec_ followed by the base64 of a key of 24 to 64 bytes',
      'The key is too short',
    ),
  },
  invalidPatch: {
    url: error(400, 'body/url must be a string', 'null for url'),
    secret: error(
      400,
      'body/secret cannot be changed by PATCH: POST /webhooks/endpoints/ep_0000000000000001/secret/rotate sets a new signing key',
      'A new key belongs to the rotation',
    ),
  },
  invalidKey: {
    key: error(
      400,
      'body/key must be whsec_ followed by the base64 of a key of 24 to 64 bytes',
      'The key is not a whsec_ key',
    ),
  },
  invalidHeaders: {
    reserved: error(
      400,
      'body/headers must not set "Content-Type": the service sets webhook-*, content-*, host, connection, transfer-encoding, user-agent, keep-alive, upgrade, expect itself',
      'A header the service sets',
    ),
    twice: error(
      400,
      'body/headers must not name "x-greenhouse" twice: header names are case-insensitive',
      'One name in two cases',
    ),
    value: error(
      400,
      'body/headers must give "X-Greenhouse" a value of at most 4096 printable ASCII characters, spaces and tabs, none of them leading or trailing',
      'A value with a line break',
    ),
    tooMany: error(400, 'body/headers must hold at most 20 headers', 'More than 20 headers'),
  },
  invalidSince: {
    since: error(
      400,
      'body/since must be an RFC 3339 date-time, such as 2026-01-01T00:00:00Z',
      'since is not RFC 3339',
    ),
  },
  invalidPage: {
    limit: error(
      400,
      'querystring/limit must be an integer from 1 to 100, such as 50',
      'limit is too large',
    ),
  },
  notFound: {
    endpoint: error(404, 'no webhook endpoint has this id', 'None has this id, or it was deleted'),
    malformed: error(
      404,
      MALFORMED_ENDPOINT_ID_MESSAGE,
      'The id is not of the form of endpoint ids',
    ),
  },
  disabled: {
    disabled: error(409, DISABLED_MESSAGE, 'The endpoint is disabled'),
  },
  disabledSend: {
    disabled: error(409, DISABLED_SEND_MESSAGE, 'The endpoint is disabled'),
  },
  unknownEvent: {
    event: error(
      404,
      UNKNOWN_EVENT_MESSAGE,
      'Not an event of this endpoint, or older than WEBHOOK_LOG_RETENTION_S',
    ),
  },
  invalidEventType: {
    eventType: error(
      400,
      'body/eventType names an unknown event type "plantWatered": one of newPlant, plantDeleted, endpointDisabled, deliveryExhausted',
      'An unknown type',
    ),
  },
  configured: {
    configured: error(409, CONFIGURED_MESSAGE, 'Declared by WEBHOOK_URLS'),
  },
  secretUnavailable: {
    key: error(
      500,
      secretUnavailableMessage('k1'),
      'Sealed under a key that WEBHOOK_ENCRYPTION_KEYS does not hold',
    ),
  },
  headersUnavailable: {
    headers: error(
      500,
      HEADERS_UNAVAILABLE_MESSAGE,
      'Sealed under a key that WEBHOOK_ENCRYPTION_KEYS does not hold',
    ),
  },
  tooLarge: error(413, 'the request body is larger than the limit of 65536 bytes', 'Too large'),
  notJson: error(415, 'Content-Type must be application/json', 'Not JSON'),
  notMergePatch: error(
    415,
    'Content-Type must be application/merge-patch+json or application/json',
    'Neither JSON type',
  ),
};

const retryAfter = {
  'retry-after': Type.Integer({ description: 'Seconds to wait before retrying' }),
};
const challenge = {
  'www-authenticate': Type.String({ description: 'The Bearer challenge (RFC 6750)' }),
};

/** The failures every operation of the management API can answer, beside its own. */
export const commonErrors = {
  401: errorResponse('The bearer token is missing or not valid', challenge),
  403: errorResponse(
    'The token is valid, but a plant token: this API needs an admin token (insufficient_scope)',
    challenge,
  ),
  408: errorResponse('The request did not arrive within the time limit'),
  429: errorResponse('Too many failed authentications from this address', retryAfter),
  431: errorResponse('The request headers are too large'),
  500: errorResponse('An unexpected fault'),
  503: errorResponse('The database is unavailable or timed out, or the service is starting', {
    ...retryAfter,
  }),
};

export const commonErrorExamples: OperationExamples['responses'] = {
  401: {
    missing: error(401, 'a bearer token is required', 'No Authorization header'),
    invalid: error(401, 'the bearer token is not valid', 'A token that is not configured'),
  },
  403: {
    plantToken: error(
      403,
      'this token is for the plant API; the webhook management API needs an admin token',
      'A plant token',
    ),
  },
  408: { timeout: error(408, 'request timeout', 'The request was too slow to arrive') },
  429: {
    tooMany: error(
      429,
      'too many failed authentication attempts from this address; retry later',
      'Too many failures from this address',
    ),
  },
  431: {
    headers: error(431, 'request header fields too large', 'Headers over the limit'),
  },
  500: { fault: error(500, 'an unexpected error occurred; it has been logged', 'A fault') },
  503: {
    unavailable: error(503, 'the database is unavailable; retry later', 'The database is down'),
    starting: error(503, 'the service is starting; retry shortly', 'Not open yet'),
  },
};
