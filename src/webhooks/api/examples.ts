import type { TSchema } from '@sinclair/typebox';
import { errorExample, exampleOfThrown, fault, notJson } from '../../http/common-answers.js';
import type { Example } from '../../http/openapi.js';
import { parseLimit } from '../../http/query.js';
import { refusalMessage } from '../../http/validation.js';
import { EVENT_TYPES_JSON } from '../catalog/event-types.js';
import { CUSTOM_HEADERS_MAX } from '../security/custom-headers.js';
import {
  CONFIGURED_MESSAGE,
  DISABLED_MESSAGE,
  DISABLED_SEND_MESSAGE,
  HEADERS_UNAVAILABLE_MESSAGE,
  MALFORMED_ENDPOINT_ID_MESSAGE,
  NO_ENDPOINT_MESSAGE,
  NOT_MERGE_PATCH_MESSAGE,
  secretUnavailableMessage,
  UNKNOWN_EVENT_MESSAGE,
} from './messages.js';
import { unpatchableField } from './parameters.js';
import {
  CustomHeadersSchema,
  EndpointPatchSchema,
  EndpointTestSchema,
  endpointSchemas,
  NewEndpointSchema,
  PAGE_LIMIT_DEFAULT,
  PAGE_LIMIT_MAX,
  RecoverSchema,
  RotationSchema,
} from './schemas.js';

// Examples of the management API's bodies, for the OpenAPI document: valid against their schemas
// (test/http/openapi.test.ts checks), in the words the service answers with: each error's
// message is the one the code sends, a refused body's the one its validator gives.

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

/** The 400 of a body that holds `value`, in the words of the validator of `schema`. */
const refused = (schema: TSchema, value: unknown, summary: string): Example =>
  errorExample(400, refusalMessage(schema, 'body', value, endpointSchemas), summary);

const headersOf = (headers: Record<string, string>) => ({ headers });

export const endpointErrorExamples = {
  invalidBody: {
    url: refused(
      NewEndpointSchema,
      { url: 'https://user:password@receiver.example.com/plants' },
      'The URL is not http(s), or holds user:password@',
    ),
    secret: refused(
      NewEndpointSchema,
      { url: subscriber.url, secret: 'whsec_c2hvcnQ=' },
      'The key is too short',
    ),
  },
  invalidPatch: {
    url: refused(EndpointPatchSchema, { url: null }, 'null for url'),
    secret: exampleOfThrown(() => {
      throw unpatchableField({ secret: 'whsec_' }, subscriber.id);
    }, 'A new key belongs to the rotation'),
  },
  invalidKey: {
    key: refused(RotationSchema, { key: 'not-a-key' }, 'The key is not a whsec_ key'),
  },
  invalidHeaders: {
    reserved: refused(
      CustomHeadersSchema,
      headersOf({ 'Content-Type': 'text/plain' }),
      'A header the service sets',
    ),
    twice: refused(
      CustomHeadersSchema,
      headersOf({ 'X-Greenhouse': 'north', 'x-greenhouse': 'south' }),
      'One name in two cases',
    ),
    value: refused(
      CustomHeadersSchema,
      headersOf({ 'X-Greenhouse': 'north\nsouth' }),
      'A value with a line break',
    ),
    tooMany: refused(
      CustomHeadersSchema,
      headersOf(
        Object.fromEntries(
          Array.from({ length: CUSTOM_HEADERS_MAX + 1 }, (_, i) => [`X-Header-${i}`, 'x']),
        ),
      ),
      `More than ${CUSTOM_HEADERS_MAX} headers`,
    ),
  },
  invalidSince: {
    since: refused(RecoverSchema, { since: 'yesterday' }, 'since is not RFC 3339'),
  },
  invalidPage: {
    limit: exampleOfThrown(
      () => parseLimit('1000', PAGE_LIMIT_MAX, PAGE_LIMIT_DEFAULT, 'querystring/limit'),
      'limit is too large',
    ),
  },
  notFound: {
    endpoint: errorExample(404, NO_ENDPOINT_MESSAGE, 'None has this id, or it was deleted'),
    malformed: errorExample(
      404,
      MALFORMED_ENDPOINT_ID_MESSAGE,
      'The id is not of the form of endpoint ids',
    ),
  },
  disabled: {
    disabled: errorExample(409, DISABLED_MESSAGE, 'The endpoint is disabled'),
  },
  disabledSend: {
    disabled: errorExample(409, DISABLED_SEND_MESSAGE, 'The endpoint is disabled'),
  },
  unknownEvent: {
    event: errorExample(
      404,
      UNKNOWN_EVENT_MESSAGE,
      'Not an event of this endpoint, or older than WEBHOOK_LOG_RETENTION_S',
    ),
  },
  invalidEventType: {
    eventType: refused(EndpointTestSchema, { eventType: 'plantWatered' }, 'An unknown type'),
  },
  configured: {
    configured: errorExample(409, CONFIGURED_MESSAGE, 'Declared by WEBHOOK_URLS'),
  },
};

/** The 500 of a key sealed under a key the ring does not hold, beside any fault. */
export const secretUnavailable = fault({
  key: errorExample(
    500,
    secretUnavailableMessage('k1'),
    'Sealed under a key that WEBHOOK_ENCRYPTION_KEYS does not hold',
  ),
});

/** The 500 of custom headers sealed under a key the ring does not hold, beside any fault. */
export const headersUnavailable = fault({
  headers: errorExample(
    500,
    HEADERS_UNAVAILABLE_MESSAGE,
    'Sealed under a key that WEBHOOK_ENCRYPTION_KEYS does not hold',
  ),
});

/** The 415 of a merge patch: either JSON type. */
export const notMergePatch = notJson(
  'The content type is not a JSON one',
  errorExample(415, NOT_MERGE_PATCH_MESSAGE, 'Neither JSON type'),
);
