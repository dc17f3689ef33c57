import { type Static, Type } from '@sinclair/typebox';
import { Checked, Text, type TextOptions, textProblem } from '../../kinds.js';
import { EVENT_TYPE_NAMES, type EventTypeName, isEventTypeName } from '../catalog/event-types.js';
import {
  CUSTOM_HEADERS_MAX,
  CUSTOM_HEADERS_MAX_LENGTH,
  type CustomHeaders,
  customHeadersProblem,
  HEADER_NAME_MAX_LENGTH,
  HEADER_VALUE_MAX_LENGTH,
  RESERVED_HEADERS,
} from '../security/custom-headers.js';
import { isEndpointSecret, SECRET_MAX_BYTES, SECRET_MIN_BYTES } from '../security/secrets.js';
import {
  ANY_EVENT_ID_PATTERN,
  ATTEMPT_ID_PATTERN,
  ENDPOINT_ID_PATTERN,
  EVENT_ID_PATTERN,
  TEST_EVENT_ID_PATTERN,
} from '../tables/ids.js';
import { ATTEMPT_TRIGGERS } from '../tables/triggers.js';

export const URL_MAX_LENGTH = 2048;
export const DESCRIPTION_MAX_LENGTH = 1024;
/** The size of a page of endpoints or of attempts. */
export const PAGE_LIMIT_MAX = 100;
export const PAGE_LIMIT_DEFAULT = 50;

const URL_PROBLEM = `must be an absolute http or https URL of at most ${URL_MAX_LENGTH} characters, without user information`;

/** What is wrong with `value` as an endpoint's URL; undefined when nothing is. */
export function urlProblem(value: unknown): string | undefined {
  if (typeof value !== 'string') return 'must be a string';
  // Spaces and control characters (anything outside ! to ~ below U+0080) would be dropped or
  // encoded by a parser: refused, not guessed.
  if (
    // Characters are code points, as the schema's maxLength counts them.
    (value.length > URL_MAX_LENGTH && [...value].length > URL_MAX_LENGTH) ||
    /[^!-~\u0080-\uffff]/.test(value) ||
    // A lone surrogate would be stored as U+FFFD: another URL than the one given.
    !value.isWellFormed()
  ) {
    return URL_PROBLEM;
  }
  const url = URL.canParse(value) ? new URL(value) : undefined;
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
    return URL_PROBLEM;
  }
  if (url.username !== '' || url.password !== '') return URL_PROBLEM;
  return undefined;
}

const secretProblem = (value: unknown) => {
  if (typeof value !== 'string') return 'must be a string';
  return isEndpointSecret(value)
    ? undefined
    : `must be whsec_ followed by the base64 of a key of ${SECRET_MIN_BYTES} to ${SECRET_MAX_BYTES} bytes`;
};

const description: TextOptions = { minLength: 0, maxLength: DESCRIPTION_MAX_LENGTH };

const HttpUrl = (text: string) =>
  Checked<string>('HttpUrl', urlProblem, {
    type: 'string',
    format: 'uri',
    maxLength: URL_MAX_LENGTH,
    description: text,
  });

const SigningKey = (text: string) =>
  Checked<string>('SigningKey', secretProblem, {
    type: 'string',
    pattern: '^whsec_[A-Za-z0-9+/]+={0,2}$',
    description: text,
  });

/** A key that may be given, or is made at random. */
const newKey = (what: string) =>
  Type.Optional(
    SigningKey(
      `${what}, \`whsec_\` and the base64 of ${SECRET_MIN_BYTES} to ${SECRET_MAX_BYTES} bytes; a new random one when absent`,
    ),
  );

/** The highest `rateLimit`, in deliveries per second. */
export const RATE_LIMIT_MAX = 10_000;

/**
 * Why `value` is no event type's name. A string is quoted; any other value is named by its kind
 * only (a JSON number is read as a bigint, which JSON.stringify cannot write).
 */
function unknownEventType(value: unknown): string {
  const named =
    typeof value === 'string'
      ? `an unknown event type ${JSON.stringify(value)}`
      : `an event type that is not a string (${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value === 'bigint' ? 'a number' : `a ${typeof value}`})`;
  return `names ${named}: one of ${EVENT_TYPE_NAMES.join(', ')}`;
}

/** What is wrong with `value` as an endpoint's list of event types; undefined when nothing is. */
function eventsProblem(value: unknown): string | undefined {
  if (!Array.isArray(value)) return 'must be an array of event type names';
  if (value.length === 0) return 'must name at least one event type';
  const unknown = value.findIndex((name) => !isEventTypeName(name));
  if (unknown >= 0) return unknownEventType(value[unknown]);
  if (new Set(value).size !== value.length) return 'must not name an event type twice';
  return undefined;
}

const Events = (text: string) =>
  Checked<EventTypeName[]>('EventTypes', eventsProblem, {
    type: 'array',
    items: { type: 'string', enum: [...EVENT_TYPE_NAMES] },
    minItems: 1,
    uniqueItems: true,
    description: text,
  });

// The body's parser reads every integer as a bigint (see http/json.ts); the store takes a number.
const rateLimitProblem = (value: unknown) =>
  value === null ||
  ((typeof value === 'number' || typeof value === 'bigint') &&
    Number.isInteger(Number(value)) &&
    Number(value) >= 1 &&
    Number(value) <= RATE_LIMIT_MAX)
    ? undefined
    : `must be an integer from 1 to ${RATE_LIMIT_MAX}, or null for no limit`;

const RateLimit = (text: string) =>
  Checked<number | null>('RateLimit', rateLimitProblem, {
    type: ['integer', 'null'],
    format: 'int32',
    minimum: 1,
    maximum: RATE_LIMIT_MAX,
    description: text,
  });

const dateTime = (text: string) => Type.String({ format: 'date-time', description: text });

export const EndpointSchema = Type.Object(
  {
    id: Type.String({
      pattern: ENDPOINT_ID_PATTERN,
      description: 'Chosen by the service; opaque',
    }),
    url: Type.String({ format: 'uri', description: 'Where events are POSTed' }),
    description: Type.String({ description: 'Free text for the people who manage it' }),
    disabled: Type.Boolean({ description: 'A disabled endpoint is sent nothing' }),
    disabledReason: Type.Optional(
      Type.String({
        description:
          'Why the service disabled it (a 410 from the receiver, or failing too long); absent when it is enabled or was disabled through the API',
      }),
    ),
    events: Type.Array(Type.String({ enum: [...EVENT_TYPE_NAMES] }), {
      description: 'The event types it receives (see GET /webhooks/event-types)',
    }),
    rateLimit: Type.Union([Type.Integer({ format: 'int32' }), Type.Null()], {
      description:
        'Deliveries per second at most, by every replica together (the rest wait); null for no limit',
    }),
    configured: Type.Optional(
      Type.Literal(true, {
        description:
          'Declared by WEBHOOK_URLS and signed with WEBHOOK_SECRET: PATCH, DELETE, rotate, secret and PUT headers answer 409; absent for endpoints made through the API',
      }),
    ),
    createdAt: dateTime('When it was created (RFC 3339, UTC)'),
    updatedAt: dateTime('When it was last changed (RFC 3339, UTC)'),
  },
  {
    $id: 'Endpoint',
    description: 'A subscriber of the newPlant webhook; never its secret',
  },
);
export type Endpoint = Static<typeof EndpointSchema>;

export const NewEndpointSchema = Type.Object(
  {
    url: HttpUrl(
      `Where events are POSTed: absolute http or https, at most ${URL_MAX_LENGTH} characters, no user information`,
    ),
    description: Type.Optional(
      Text({ ...description, description: `At most ${DESCRIPTION_MAX_LENGTH} characters; ""` }),
    ),
    disabled: Type.Optional(Type.Boolean({ description: 'Create it disabled; false' })),
    events: Type.Optional(Events('The event types it receives; ["newPlant"]')),
    rateLimit: Type.Optional(
      RateLimit(`Deliveries per second at most, 1 to ${RATE_LIMIT_MAX}; null (no limit)`),
    ),
    secret: newKey('Its signing key'),
  },
  { $id: 'NewEndpoint', description: 'An endpoint to create. Unknown properties are ignored' },
);

export const EndpointPatchSchema = Type.Object(
  {
    url: Type.Optional(HttpUrl('The new URL')),
    description: Type.Optional(
      Checked<string | null>(
        'DescriptionOrNull',
        (value) => (value === null ? undefined : textProblem(description, value)),
        {
          type: ['string', 'null'],
          maxLength: DESCRIPTION_MAX_LENGTH,
          description: 'The new description; null makes it ""',
        },
      ),
    ),
    disabled: Type.Optional(
      Type.Boolean({
        description: 'true: it is sent nothing (its pending deliveries fail); false: enabled again',
      }),
    ),
    events: Type.Optional(Events('The event types it receives from now on, all of them')),
    rateLimit: Type.Optional(RateLimit('The new limit; null removes it')),
  },
  {
    $id: 'EndpointPatch',
    description:
      'A JSON merge patch (RFC 7396): the fields given replace the stored ones, the others stay. Unknown properties are ignored',
  },
);

export const SigningKeySchema = Type.Object(
  { key: SigningKey('The signing key: `whsec_` and the base64 of its bytes') },
  { $id: 'SigningKey', description: 'An endpoint signing key' },
);

export const RotationSchema = Type.Object(
  {
    key: newKey('The new key'),
  },
  { description: 'The key that signs from now on' },
);

const rfc3339 =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-](\d{2}):(\d{2}))$/i;

/** True for an RFC 3339 date-time (§5.6) that names a real instant. */
export function isRfc3339(text: string): boolean {
  const match = rfc3339.exec(text);
  if (!match) return false;
  const [year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0] = match
    .slice(1, 7)
    .map(Number);
  const [offsetHour = 0, offsetMinute = 0] = match.slice(9, 11).map((part) => Number(part ?? 0));
  // setUTCFullYear, not Date.UTC, which reads years below 100 as 19xx.
  const lastDay = new Date(0);
  lastDay.setUTCFullYear(year, month, 0);
  const highest = [12, lastDay.getUTCDate(), 23, 59, 60, 23, 59];
  return (
    year >= 1 &&
    month >= 1 &&
    day >= 1 &&
    [month, day, hour, minute, second, offsetHour, offsetMinute].every(
      (v, i) => v <= (highest[i] ?? 0),
    )
  );
}

export const RecoverSchema = Type.Object(
  {
    since: Checked<string>(
      'DateTime',
      (value) =>
        typeof value === 'string' && isRfc3339(value)
          ? undefined
          : 'must be an RFC 3339 date-time, such as 2026-01-01T00:00:00Z',
      {
        type: 'string',
        format: 'date-time',
        description: 'RFC 3339: deliveries that ended failed at or after this time are sent again',
      },
    ),
  },
  { description: 'Which failed deliveries to send again' },
);

export const RecoveringSchema = Type.Object(
  {
    recovering: Type.Integer({
      format: 'int32',
      description: 'How many failed deliveries are due again',
    }),
  },
  { description: 'The deliveries sent again, in the background' },
);

const ATTEMPT_STATUSES = ['succeeded', 'failed'];

/** `succeeded` or `failed`: an enum of strings, which every client generator reads. */
const AttemptStatus = (text: string) =>
  Checked<'succeeded' | 'failed'>(
    'AttemptStatus',
    (value) =>
      typeof value === 'string' && ATTEMPT_STATUSES.includes(value)
        ? undefined
        : 'must be succeeded or failed',
    { type: 'string', enum: ATTEMPT_STATUSES, description: text },
  );

/** How an attempt ended: in the attempt log, and in the answer to a test. */
const attemptOutcome = {
  status: AttemptStatus('Whether the receiver answered 2xx in time'),
  responseStatus: Type.Optional(
    Type.Integer({
      format: 'int32',
      description: "The receiver's status; absent when there was no answer",
    }),
  ),
  error: Type.Optional(
    Type.String({ description: 'Why it failed, when the status does not say it all' }),
  ),
  durationMs: Type.Integer({ format: 'int32', description: 'How long it took' }),
};

export const AttemptSchema = Type.Object(
  {
    id: Type.String({ pattern: ATTEMPT_ID_PATTERN, description: 'Chosen by the service' }),
    eventId: Type.String({
      pattern: ANY_EVENT_ID_PATTERN,
      description:
        'The event: its `webhook-id`, the same on every attempt (`msg_test_...` for a test)',
    }),
    plantId: Type.Optional(
      Type.Integer({
        format: 'int64',
        description:
          'The plant the event is about (newPlant, plantDeleted), written with all its digits; absent for the other types',
      }),
    ),
    trigger: Type.String({
      enum: [...ATTEMPT_TRIGGERS],
      description:
        'Why it was made: `delivery` (the first attempt of a new event), `retry` (a later attempt), `recover` (a recover or the operator’s redeliver), `resend` or `test`',
    }),
    ...attemptOutcome,
    attemptedAt: dateTime('When it started (RFC 3339, UTC)'),
  },
  { $id: 'Attempt', description: 'One delivery attempt to an endpoint' },
);

export const EndpointIdParamsSchema = Type.Object({
  id: Type.String({ pattern: ENDPOINT_ID_PATTERN, description: 'The endpoint' }),
});

/** An event's `webhook-id`, as the attempt log shows it (a test's cannot be resent). */

// A path that names no event is 404 (see readEventId), as one that names no endpoint.
export const ResendParamsSchema = Type.Object({
  id: Type.String({ pattern: ENDPOINT_ID_PATTERN, description: 'The endpoint' }),
  eventId: Type.String({
    pattern: EVENT_ID_PATTERN,
    description: 'The event: its `webhook-id`, as the attempt log shows it',
  }),
});

const eventTypeProblem = (value: unknown) =>
  isEventTypeName(value) ? undefined : unknownEventType(value);

/** The type a test sends when its body names none. */
export const DEFAULT_TEST_EVENT_TYPE: EventTypeName = 'newPlant';

export const EndpointTestSchema = Type.Object(
  {
    eventType: Type.Optional(
      Checked<EventTypeName>('EventTypeName', eventTypeProblem, {
        type: 'string',
        enum: [...EVENT_TYPE_NAMES],
        description: 'The type whose example is sent; newPlant',
      }),
    ),
  },
  { description: 'What to send. Unknown properties are ignored' },
);

export const TestOutcomeSchema = Type.Object(
  {
    eventId: Type.String({
      pattern: TEST_EVENT_ID_PATTERN,
      description: 'The `webhook-id` the test was sent with: `msg_test_` and 32 hex digits',
    }),
    ...attemptOutcome,
  },
  {
    $id: 'TestOutcome',
    description:
      'How the one attempt of a test ended (it is in the attempt log too, never retried)',
  },
);

const pageLimit = (items: string) =>
  Type.Optional(
    Type.Integer({
      format: 'int32',
      minimum: 1,
      maximum: PAGE_LIMIT_MAX,
      default: PAGE_LIMIT_DEFAULT,
      description: `The maximum number of ${items} to return`,
    }),
  );

export const EndpointPageQuerySchema = Type.Object({
  limit: pageLimit('endpoints'),
  after: Type.Optional(
    Type.String({
      pattern: ENDPOINT_ID_PATTERN,
      description: 'Return only endpoints after this one (keyset paging)',
    }),
  ),
});

export const AttemptPageQuerySchema = Type.Object({
  limit: pageLimit('attempts'),
  after: Type.Optional(
    Type.String({
      pattern: ATTEMPT_ID_PATTERN,
      description: 'Return only attempts older than this one (keyset paging, newest first)',
    }),
  ),
  status: Type.Optional(
    AttemptStatus('Return only the attempts that succeeded, or only those that failed'),
  ),
});

export const CustomHeadersSchema = Type.Object(
  {
    headers: Checked<CustomHeaders>('CustomHeaders', customHeadersProblem, {
      type: 'object',
      maxProperties: CUSTOM_HEADERS_MAX,
      propertyNames: {
        pattern: `^[!#$%&'*+\\-.^_\`|~0-9A-Za-z]{1,${HEADER_NAME_MAX_LENGTH}}$`,
      },
      additionalProperties: {
        type: 'string',
        maxLength: HEADER_VALUE_MAX_LENGTH,
        pattern: '^([\\x21-\\x7e]([\\t\\x20-\\x7e]*[\\x21-\\x7e])?)?$',
      },
      description: `Header names (HTTP tokens of at most ${HEADER_NAME_MAX_LENGTH} characters, each once whatever its case; not ${RESERVED_HEADERS}) and their values (at most ${HEADER_VALUE_MAX_LENGTH} printable ASCII characters, spaces and tabs, none leading or trailing); at most ${CUSTOM_HEADERS_MAX} headers of at most ${CUSTOM_HEADERS_MAX_LENGTH} characters in all`,
    }),
  },
  {
    $id: 'CustomHeaders',
    description:
      'The headers sent with every delivery to an endpoint, after the service’s own. Unknown properties are ignored',
  },
);

export const EventTypeSchema = Type.Object(
  {
    name: Type.String({
      enum: [...EVENT_TYPE_NAMES],
      description: 'Its name, as `events` lists it',
    }),
    description: Type.String({ description: 'What happened when it is sent' }),
    schema: Type.Object(
      {},
      { additionalProperties: true, description: 'The JSON Schema of its body, self-contained' },
    ),
  },
  { $id: 'EventType', description: 'A type of event an endpoint may receive' },
);

/** The shared schemas of the management API, registered by their $id. */
export const endpointSchemas = [
  EndpointSchema,
  NewEndpointSchema,
  EndpointPatchSchema,
  SigningKeySchema,
  AttemptSchema,
  CustomHeadersSchema,
  TestOutcomeSchema,
  EventTypeSchema,
];
