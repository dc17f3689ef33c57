import { type TSchema, Type } from '@sinclair/typebox';
import { NAME_MAX_LENGTH, TAG_MAX_LENGTH } from '../../plants/schemas.js';
import { ENDPOINT_ID_PATTERN, EVENT_ID_PATTERN } from '../tables/ids.js';

/** The names of the event types an endpoint may receive, in the catalog's order. */
export const EVENT_TYPE_NAMES = [
  'newPlant',
  'plantDeleted',
  'endpointDisabled',
  'deliveryExhausted',
] as const;

export type EventTypeName = (typeof EVENT_TYPE_NAMES)[number];

/** What an endpoint receives when nothing else is said. */
export const DEFAULT_EVENT_TYPES: readonly EventTypeName[] = ['newPlant'];

export const isEventTypeName = (name: unknown): name is EventTypeName =>
  typeof name === 'string' && (EVENT_TYPE_NAMES as readonly string[]).includes(name);

/** One type of the catalog: what a receiver of it is sent, and when. */
export interface EventType {
  name: EventTypeName;
  /** What happened, in a few words. */
  summary: string;
  description: string;
  /** The JSON Schema of the body, self-contained (no `$ref`), as GET /webhooks/event-types lists it. */
  schema: TSchema;
  /** A body of this type, as it is sent. */
  example: unknown;
}

// The schemas are written out in plain JSON Schema, without the validating kinds of the API's
// own schemas: they describe what the service sends, for receivers and their tools.

const plant = Type.Object(
  {
    id: Type.Integer({
      format: 'int64',
      description: 'The plant’s id, a JSON integer written with all its digits',
    }),
    name: Type.String({ minLength: 1, maxLength: NAME_MAX_LENGTH }),
    tag: Type.Optional(
      Type.String({ maxLength: TAG_MAX_LENGTH, description: 'Absent when the plant has none' }),
    ),
  },
  { description: 'The plant as it was stored' },
);

const rfc3339 = (description: string) =>
  Type.String({ format: 'date-time', description: `${description} (RFC 3339, UTC)` });

const endpointId = Type.String({
  pattern: ENDPOINT_ID_PATTERN,
  description: 'The endpoint, as the management API names it',
});

/** The Standard Webhooks envelope of every type but newPlant: the type is inside the signed body. */
const envelope = (name: EventTypeName, data: TSchema, description: string) =>
  Type.Object(
    {
      type: Type.Literal(name, { description: 'The event type' }),
      timestamp: rfc3339('When it happened'),
      data,
    },
    { description },
  );

/** The instant every example shows. */
const EXAMPLE_TIME = '2026-11-25T18:30:00.000Z';
const examplePlant = { id: 9007199254740991, name: 'Monstera', tag: 'aroid' };

const catalog: readonly EventType[] = [
  {
    name: 'newPlant',
    summary: 'A plant was created',
    description:
      'A plant was created: sent once a POST /plants has stored a new plant (never for a replay or a 409). The body is the plant as stored, `{"id", "name", "tag"?}`, without an envelope.',
    schema: { ...plant, description: 'The plant as it was stored: a NewPlant' },
    example: examplePlant,
  },
  {
    name: 'plantDeleted',
    summary: 'A plant was deleted',
    description:
      'A plant was deleted by DELETE /plants/{id}: `data` is the plant as it was stored. Recorded only while some endpoint receives this type.',
    schema: envelope('plantDeleted', plant, 'A plant was deleted'),
    example: { type: 'plantDeleted', timestamp: EXAMPLE_TIME, data: examplePlant },
  },
  {
    name: 'endpointDisabled',
    summary: 'An endpoint was disabled',
    description:
      'An endpoint was disabled: by the service (its receiver answered 410 Gone, or every attempt failed for WEBHOOK_DISABLE_AFTER_S) or through PATCH. The disabled endpoint itself is sent nothing more; its attempt log records what it missed.',
    schema: envelope(
      'endpointDisabled',
      Type.Object({
        endpointId,
        url: Type.String({ format: 'uri', description: 'Where its events were POSTed' }),
        reason: Type.String({
          description:
            '`the receiver answered 410 Gone`, `every attempt failed for ... seconds (WEBHOOK_DISABLE_AFTER_S)` or `disabled through the API`',
        }),
        disabledAt: rfc3339('When it was disabled'),
      }),
      'An endpoint was disabled',
    ),
    example: {
      type: 'endpointDisabled',
      timestamp: EXAMPLE_TIME,
      data: {
        endpointId: 'ep_0000000000000002',
        url: 'https://old.example.org/hooks/plants',
        reason: 'the receiver answered 410 Gone',
        disabledAt: EXAMPLE_TIME,
      },
    },
  },
  {
    name: 'deliveryExhausted',
    summary: 'A delivery was given up after its last retry',
    description:
      'The last retry of an event’s delivery to an endpoint failed: the delivery is given up, until `recover` or a resend sends it again. Not sent after a 410 (which ends a delivery at once), for a test, nor for a deliveryExhausted event.',
    schema: envelope(
      'deliveryExhausted',
      Type.Object({
        endpointId,
        eventId: Type.String({
          pattern: EVENT_ID_PATTERN,
          description: 'The `webhook-id` of the event that was given up',
        }),
        eventType: Type.String({
          enum: [...EVENT_TYPE_NAMES],
          description: 'The type of the event that was given up',
        }),
        attempts: Type.Integer({ format: 'int32', minimum: 1, description: 'Attempts made' }),
        lastError: Type.String({
          description:
            'Why the last attempt failed: `the receiver answered <status>`, or the error',
        }),
      }),
      'A delivery was given up after its last retry',
    ),
    example: {
      type: 'deliveryExhausted',
      timestamp: EXAMPLE_TIME,
      data: {
        endpointId: 'ep_0000000000000001',
        eventId: 'msg_2b9f0c6e4a8d4f1b9c3e5a7d0f2b4c6e',
        eventType: 'newPlant',
        attempts: 8,
        lastError: 'the receiver answered 503',
      },
    },
  },
];

/** The catalog of event types, in the order of EVENT_TYPE_NAMES. */
export const EVENT_TYPES: ReadonlyMap<EventTypeName, EventType> = new Map(
  catalog.map((type) => [type.name, type]),
);

/** The catalog as GET /webhooks/event-types answers it: JSON text, made once. */
export const EVENT_TYPES_JSON = JSON.stringify(
  catalog.map(({ name, description, schema }) => ({ name, description, schema })),
);

/**
 * The example of `name` as the bytes a receiver is sent (what a test of an endpoint sends), its
 * times (for the types that have them) set to `at`.
 */
export function exampleBody(name: EventTypeName, at: Date): string {
  const example = (EVENT_TYPES.get(name) as EventType).example;
  if (name === 'newPlant') return JSON.stringify(example);
  const timestamp = at.toISOString();
  const { data, ...envelope } = example as { data: Record<string, unknown> };
  const stamped = 'disabledAt' in data ? { ...data, disabledAt: timestamp } : data;
  return JSON.stringify({ ...envelope, timestamp, data: stamped });
}
