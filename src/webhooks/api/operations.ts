import { type TSchema, Type } from '@sinclair/typebox';
import type { FastifySchema } from 'fastify';
import type { ErrorAnswer } from '../../http/common-answers.js';
import { errorResponse } from '../../http/errors.js';
import type { Example } from '../../http/openapi.js';
import { refTo } from '../../http/validation.js';
import {
  endpointErrorExamples as errors,
  endpointExamples as examples,
  headersUnavailable,
  notMergePatch,
  secretUnavailable,
} from './examples.js';
import {
  AttemptPageQuerySchema,
  AttemptSchema,
  CustomHeadersSchema,
  DEFAULT_TEST_EVENT_TYPE,
  EndpointIdParamsSchema,
  EndpointPageQuerySchema,
  EndpointPatchSchema,
  EndpointSchema,
  EndpointTestSchema,
  EventTypeSchema,
  NewEndpointSchema,
  RecoveringSchema,
  RecoverSchema,
  ResendParamsSchema,
  RotationSchema,
  SigningKeySchema,
  TestOutcomeSchema,
} from './schemas.js';

export const TAG = 'webhook endpoints';

/** A response: its schema (an error's description for an error) and its examples. */
type Answer = [schema: object | string, examples?: Record<string, Example>];
const answerOf = ({ response, examples }: ErrorAnswer): Answer => [response, examples];

/**
 * The schema of an operation of this API: its own responses, each with its examples (those that
 * many routes give are added by answerInCommon, see routes.ts).
 */
const operation = <Schema extends FastifySchema>({
  request,
  answers,
  ...schema
}: Schema & { request?: Record<string, Example>; answers: Record<number, Answer> }) => {
  const response: Record<string, unknown> = {};
  const responses: Record<string, Record<string, Example>> = {};
  for (const [status, [answer, named]] of Object.entries(answers)) {
    response[status] = typeof answer === 'string' ? errorResponse(answer) : answer;
    if (named) responses[status] = named;
  }
  return {
    tags: [TAG],
    security: [{ adminBearer: [] }],
    ...schema,
    response: response as Record<number, unknown>,
    'x-examples': { ...(request && { request }), responses },
  };
};

/** A page of `items`, and the `Link` to the one after it. */
const page = (items: TSchema, description: string, next: string) =>
  Type.Array(refTo(items), {
    description,
    headers: {
      link: Type.String({
        description: `When the page is full: the next page, \`<${next}>; rel="next"\` (RFC 8288)`,
      }),
    },
  });

const idParams = { params: EndpointIdParamsSchema };
const missing: Answer = ['No endpoint has this id (or it was deleted)', errors.notFound];
/** The changes that a configured endpoint (WEBHOOK_URLS) refuses. */
const readOnly: Answer = ['The endpoint is declared by WEBHOOK_URLS: read-only', errors.configured];
const badPage: Answer = [
  'A query parameter is malformed, out of range or given twice',
  errors.invalidPage,
];

/** Each operation of the management API: what validates it, and what documents it. */
export const operations = {
  createWebhookEndpoint: operation({
    operationId: 'createWebhookEndpoint',
    summary: 'Subscribe an endpoint to the webhooks',
    description:
      'Every event of the types in `events` (newPlant unless it says otherwise; see GET /webhooks/event-types) committed after the answer is POSTed to `url`, signed with the endpoint’s own key (read it at `/secret`). The key is made by the service unless `secret` gives one.',
    body: refTo(NewEndpointSchema),
    request: examples.newEndpoint,
    answers: {
      201: [
        {
          ...refTo(EndpointSchema),
          description: 'The endpoint, without its secret',
          headers: { location: Type.String({ description: 'The endpoint’s path' }) },
        },
        examples.endpoint,
      ],
      400: ['The body is not a valid NewEndpoint or not valid JSON', errors.invalidBody],
    },
  }),
  listWebhookEndpoints: operation({
    operationId: 'listWebhookEndpoints',
    summary: 'List endpoints, a page at a time',
    description:
      'Endpoints in ascending id order, at most `limit`. When the page is full, `Link` gives the next one (`after` = the last id of this one).',
    querystring: EndpointPageQuerySchema,
    answers: {
      200: [
        page(
          EndpointSchema,
          'Endpoints in ascending id order',
          '/webhooks/endpoints?limit=..&after=..',
        ),
        examples.page,
      ],
      400: badPage,
    },
  }),
  getWebhookEndpoint: operation({
    operationId: 'getWebhookEndpoint',
    summary: 'Read one endpoint',
    description: 'The endpoint with this id, as made or last changed, without its signing secret.',
    ...idParams,
    answers: {
      200: [
        { ...refTo(EndpointSchema), description: 'The endpoint, without its secret' },
        examples.endpoint,
      ],
      404: missing,
    },
  }),
  updateWebhookEndpoint: operation({
    operationId: 'updateWebhookEndpoint',
    summary: 'Change an endpoint (JSON merge patch)',
    description:
      'The fields given replace the stored ones. `disabled: true` stops its deliveries (the pending ones are recorded as failed, "endpoint disabled", for `recover`); `disabled: false` enables it again and clears `disabledReason`. After the answer, new attempts use the new `url` and `disabled`.',
    ...idParams,
    body: refTo(EndpointPatchSchema),
    consumes: ['application/merge-patch+json', 'application/json'],
    request: examples.patch,
    answers: {
      200: [
        { ...refTo(EndpointSchema), description: 'The endpoint, as changed' },
        examples.patched,
      ],
      400: ['The body is not a valid merge patch or not valid JSON', errors.invalidPatch],
      404: missing,
      409: readOnly,
      415: answerOf(notMergePatch),
    },
  }),
  deleteWebhookEndpoint: operation({
    operationId: 'deleteWebhookEndpoint',
    summary: 'Delete an endpoint',
    description:
      'It receives nothing more: no new attempt starts after the answer, its pending deliveries and its attempt log go.',
    ...idParams,
    answers: {
      204: [Type.Null({ description: 'Deleted' })],
      404: missing,
      409: readOnly,
    },
  }),
  getWebhookEndpointSecret: operation({
    operationId: 'getWebhookEndpointSecret',
    summary: 'Read the signing key of an endpoint',
    description:
      'The key that signs its deliveries now (`webhook-signature`), for the receiver’s verification.',
    ...idParams,
    answers: {
      200: [{ ...refTo(SigningKeySchema), description: 'The current key' }, examples.secret],
      404: missing,
      409: readOnly,
      500: answerOf(secretUnavailable),
    },
  }),
  rotateWebhookEndpointSecret: operation({
    operationId: 'rotateWebhookEndpointSecret',
    summary: 'Rotate the signing key of an endpoint',
    description:
      'The new key (`key`, or a new random one) signs from the answer on. For `WEBHOOK_ROTATION_GRACE_S` after it, every delivery carries two signatures, new then old, so the receiver can switch keys at its pace. The body may be left out.',
    ...idParams,
    body: RotationSchema,
    'x-body-optional': true,
    request: examples.rotation,
    answers: {
      204: [Type.Null({ description: 'Rotated: read the new key at `/secret`' })],
      400: ['`key` is not a whsec_ key of 24 to 64 bytes, or not valid JSON', errors.invalidKey],
      404: missing,
      409: readOnly,
    },
  }),
  listWebhookEndpointAttempts: operation({
    operationId: 'listWebhookEndpointAttempts',
    summary: 'List the delivery attempts of an endpoint, newest first',
    description:
      'At most `limit` attempts, newest first, kept for `WEBHOOK_LOG_RETENTION_S`. When the page is full, `Link` gives the next (older) one.',
    ...idParams,
    querystring: AttemptPageQuerySchema,
    answers: {
      200: [
        page(AttemptSchema, 'Attempts, newest first', '.../attempts?limit=..&after=..[&status=..]'),
        examples.attempts,
      ],
      400: badPage,
      404: missing,
    },
  }),
  getWebhookEndpointHeaders: operation({
    operationId: 'getWebhookEndpointHeaders',
    summary: 'Read the custom headers of an endpoint',
    description:
      'The headers sent with every delivery to it, as they were set, in their order; `{}` when it has none (as a `WEBHOOK_URLS` endpoint never has).',
    ...idParams,
    answers: {
      200: [
        { ...refTo(CustomHeadersSchema), description: 'Its custom headers' },
        { ...examples.headers, ...examples.noHeaders },
      ],
      404: missing,
      500: answerOf(headersUnavailable),
    },
  }),
  setWebhookEndpointHeaders: operation({
    operationId: 'setWebhookEndpointHeaders',
    summary: 'Replace the custom headers of an endpoint',
    description:
      'These headers, and no others, go with every delivery to it from the answer on, after the service’s own (`webhook-*`, `content-type`, `user-agent`, which they cannot replace); `{}` removes them all. Values are stored encrypted, like the signing key, and never logged.',
    ...idParams,
    body: refTo(CustomHeadersSchema),
    request: examples.setHeaders,
    answers: {
      204: [Type.Null({ description: 'Replaced' })],
      400: [
        'A name is not an HTTP token, is one the service sets, or comes twice; a value is not printable ASCII or too long; more than 20 headers; or not valid JSON',
        errors.invalidHeaders,
      ],
      404: missing,
      409: readOnly,
    },
  }),
  recoverWebhookEndpoint: operation({
    operationId: 'recoverWebhookEndpoint',
    summary: 'Send failed deliveries again',
    description:
      'Every event of this endpoint whose delivery ended failed at or after `since` is delivered again, with the same `webhook-id`, in the background.',
    ...idParams,
    body: RecoverSchema,
    request: examples.recover,
    answers: {
      202: [
        { ...RecoveringSchema, description: 'The deliveries are due again' },
        examples.recovering,
      ],
      400: ['`since` is not an RFC 3339 date-time, or the body is not JSON', errors.invalidSince],
      404: missing,
      409: ['The endpoint is disabled: enable it first', errors.disabled],
    },
  }),
  resendWebhookEvent: operation({
    operationId: 'resendWebhookEvent',
    summary: 'Send one event to an endpoint again',
    description:
      'The event is delivered to this endpoint again, whatever became of it (delivered, failed or still pending), with its original `webhook-id` and the bytes it was sent with, in the background; the attempts show `"trigger": "resend"` in the attempt log, and fail and retry as any delivery does. An event stays resendable for `WEBHOOK_LOG_RETENTION_S`. The body, if any, is ignored.',
    params: ResendParamsSchema,
    answers: {
      202: [Type.Null({ description: 'The event is due again for this endpoint' })],
      404: [
        'No endpoint has this id, or it has no event with this `webhook-id` within `WEBHOOK_LOG_RETENTION_S`',
        { ...errors.notFound, ...errors.unknownEvent },
      ],
      409: ['The endpoint is disabled: enable it first', errors.disabledSend],
    },
  }),
  testWebhookEndpoint: operation({
    operationId: 'testWebhookEndpoint',
    summary: 'Send an example event to an endpoint, and tell how it went',
    description:
      `An example of \`eventType\` (${DEFAULT_TEST_EVENT_TYPE} when absent) is sent at once, signed with the endpoint’s key, ` +
      'with a `webhook-id` that starts `msg_test_`; the answer says how that one attempt ended. It is in the attempt log (`"trigger": "test"`), is never retried nor recovered, and does not count toward disabling the endpoint. The body may be left out.',
    ...idParams,
    body: EndpointTestSchema,
    'x-body-optional': true,
    request: examples.test,
    answers: {
      200: [{ ...refTo(TestOutcomeSchema), description: 'How the attempt ended' }, examples.tested],
      400: ['`eventType` is not an event type, or the body is not JSON', errors.invalidEventType],
      404: missing,
      409: ['The endpoint is disabled: enable it first', errors.disabledSend],
    },
  }),
  listWebhookEventTypes: operation({
    operationId: 'listWebhookEventTypes',
    summary: 'List the event types an endpoint may receive',
    description:
      'Each type’s name (as an endpoint’s `events` lists it), what it means, and the JSON Schema of the body a receiver is sent. The document’s `webhooks` describes each too.',
    answers: {
      200: [
        Type.Array(refTo(EventTypeSchema), { description: 'The catalog, in a fixed order' }),
        examples.eventTypes,
      ],
    },
  }),
};
