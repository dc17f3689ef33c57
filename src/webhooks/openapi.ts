import { plantExamples } from '../plants/schemas.js';

const header = (name: string, description: string, schema: object) => ({
  name,
  in: 'header',
  required: true,
  description,
  schema,
});

/** The newPlant webhook as the OpenAPI document declares it, under `webhooks`. */
export const webhooksDocument = {
  '/plant/webhook': {
    post: {
      operationId: 'newPlantWebhook',
      summary: 'A new plant was stored',
      description:
        'Information about a new plant added to the store. Sent to every URL of `WEBHOOK_URLS` ' +
        'once a POST /plants has stored a new plant (never for a replay or a 409), signed as the ' +
        'Standard Webhooks specification says. Any 2xx answered within `WEBHOOK_TIMEOUT_MS` ' +
        'is a delivery; anything else (redirects are not followed) is retried on a schedule, ' +
        'a 410 ends the delivery. Delivery is at least once: drop duplicates by `webhook-id`.',
      tags: ['plants'],
      security: [],
      parameters: [
        header('webhook-id', 'The event: the same on every attempt of it', {
          type: 'string',
          pattern: '^msg_[0-9a-f]{32}$',
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
      ],
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
      responses: {
        '200': {
          description:
            'Return a 200 status to indicate that the data was received successfully (any 2xx will do)',
        },
      },
    },
  },
};
