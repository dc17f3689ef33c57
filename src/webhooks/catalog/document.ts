import { plantExamples } from '../../plants/examples.js';
import { ANY_EVENT_ID_PATTERN } from '../tables/ids.js';
import { EVENT_TYPES, type EventType, type EventTypeName } from './event-types.js';

const header = (name: string, description: string, schema: object) => ({
  name,
  in: 'header',
  required: true,
  description,
  schema,
});

/** The Standard Webhooks headers that every request carries, whatever its type. */
const signedHeaders = [
  header('webhook-id', 'The event: the same on every attempt of it', {
    type: 'string',
    // A test of an endpoint (POST .../test) sends msg_test_ ids.
    pattern: ANY_EVENT_ID_PATTERN,
  }),
  header('webhook-timestamp', 'Unix seconds when this attempt was sent', {
    type: 'integer',
    format: 'int64',
  }),
  header(
    'webhook-signature',
    '`v1,` and the base64 of HMAC-SHA256(key, `{webhook-id}.{webhook-timestamp}.{body}`), ' +
      'the key being the base64-decoded part of the `whsec_` secret after its prefix',
    { type: 'string', pattern: '^v1,[A-Za-z0-9+/]+={0,2}$' },
  ),
];

const delivery =
  'Signed as the Standard Webhooks specification says. Any 2xx answered within ' +
  '`WEBHOOK_TIMEOUT_MS` is a delivery; anything else (redirects are not followed) is retried ' +
  'on a schedule, a 410 ends the delivery. Delivery is at least once: drop duplicates by ' +
  '`webhook-id`.';

const received = {
  '200': {
    description:
      'Return a 200 status to indicate that the data was received successfully (any 2xx will do)',
  },
};

/** The webhook of an event type with an envelope, under its name: sent to the endpoints that list it. */
function typedWebhook({ name, summary, description, schema, example }: EventType) {
  return {
    post: {
      operationId: `${name}Webhook`,
      summary,
      description: `${description} Sent to every endpoint whose \`events\` lists \`${name}\`. ${delivery}`,
      tags: ['webhook endpoints'],
      security: [],
      parameters: signedHeaders,
      requestBody: {
        description: `A ${name} event: \`{"type", "timestamp", "data"}\``,
        required: true,
        content: {
          'application/json': {
            schema,
            examples: { example: { summary: `A ${name} event`, value: example } },
          },
        },
      },
      responses: received,
    },
  };
}

const typed = (name: EventTypeName) => typedWebhook(EVENT_TYPES.get(name) as EventType);

/** The newPlant request, as the source document declares it, with `operationId`. */
const newPlantWebhook = (operationId: string, also: string) => ({
  post: {
    operationId,
    summary: 'A new plant was stored',
    description:
      'Information about a new plant added to the store: the newPlant event. Sent to every ' +
      'endpoint whose `events` lists `newPlant` (every URL of `WEBHOOK_URLS` by default) once ' +
      `a POST /plants has stored a new plant (never for a replay or a 409). ${also}${delivery}`,
    tags: ['plants'],
    security: [],
    parameters: signedHeaders,
    requestBody: {
      description: 'Plant added to the store: the NewPlant as stored, its id with every digit',
      required: true,
      content: {
        'application/json': {
          schema: { $ref: '#/components/schemas/NewPlant' },
          examples: plantExamples.newPlant,
        },
      },
    },
    responses: received,
  },
});

/**
 * The requests the service sends, as the OpenAPI document declares them under `webhooks`: one
 * per event type, under its name. newPlant is also under the source document's key, with its
 * body.
 */
export const webhooksDocument = {
  '/plant/webhook': newPlantWebhook('newPlantWebhook', ''),
  newPlant: newPlantWebhook(
    'newPlantEventWebhook',
    'The same request as `/plant/webhook`, under the name of its event type. ',
  ),
  plantDeleted: typed('plantDeleted'),
  endpointDisabled: typed('endpointDisabled'),
  deliveryExhausted: typed('deliveryExhausted'),
};
