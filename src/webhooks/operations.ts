import { Type } from '@sinclair/typebox';
import type { FastifySchema } from 'fastify';
import { errorResponse } from '../http/errors.js';
import { refTo } from '../http/validation.js';
import {
  commonErrorExamples,
  commonErrors,
  endpointErrorExamples as errors,
  endpointExamples as examples,
} from './examples.js';
import {
  AttemptPageQuerySchema,
  AttemptSchema,
  EndpointIdParamsSchema,
  EndpointPageQuerySchema,
  EndpointPatchSchema,
  EndpointSchema,
  NewEndpointSchema,
  RecoveringSchema,
  RecoverSchema,
  RotationSchema,
  SigningKeySchema,
} from './schemas.js';

export const TAG = 'webhook endpoints';

/** The schema of an operation of this API. */
const operation = <Schema extends FastifySchema>(schema: Schema) => ({
  tags: [TAG],
  security: [{ adminBearer: [] }],
  ...schema,
});

const idParams = { params: EndpointIdParamsSchema };
const missing = { 404: errorResponse('No endpoint has this id (or it was deleted)') };
const missingExample = { 404: errors.notFound };
/** The changes that a configured endpoint (WEBHOOK_URLS) refuses. */
const readOnly = { 409: errorResponse('The endpoint is declared by WEBHOOK_URLS: read-only') };
const readOnlyExample = { 409: errors.configured };

/** Each operation of the management API: what validates it, and what documents it. */
export const operations = {
  createWebhookEndpoint: operation({
    operationId: 'createWebhookEndpoint',
    summary: 'Subscribe an endpoint to the newPlant webhook',
    description:
      'Every plant committed after the answer is POSTed to `url`, signed with the endpoint’s own key (read it at `/secret`). The key is made by the service unless `secret` gives one.',
    body: refTo(NewEndpointSchema),
    response: {
      201: {
        ...refTo(EndpointSchema),
        description: 'The endpoint, without its secret',
        headers: { location: Type.String({ description: 'The endpoint’s path' }) },
      },
      400: errorResponse('The body is not a valid NewEndpoint or not valid JSON'),
      413: errorResponse('The body is larger than the limit'),
      415: errorResponse('The content type is not application/json'),
      ...commonErrors,
    },
    'x-examples': {
      request: examples.newEndpoint,
      responses: {
        201: examples.endpoint,
        400: errors.invalidBody,
        413: { tooLarge: errors.tooLarge },
        415: { notJson: errors.notJson },
        ...commonErrorExamples,
      },
    },
  }),
  listWebhookEndpoints: operation({
    operationId: 'listWebhookEndpoints',
    summary: 'List endpoints, a page at a time',
    description:
      'Endpoints in ascending id order, at most `limit`. When the page is full, `Link` gives the next one (`after` = the last id of this one).',
    querystring: EndpointPageQuerySchema,
    response: {
      200: Type.Array(refTo(EndpointSchema), {
        description: 'Endpoints in ascending id order',
        headers: {
          link: Type.String({
            description:
              'When the page is full: the next page, `</webhooks/endpoints?limit=..&after=..>; rel="next"` (RFC 8288)',
          }),
        },
      }),
      400: errorResponse('A query parameter is malformed, out of range or given twice'),
      ...commonErrors,
    },
    'x-examples': {
      responses: { 200: examples.page, 400: errors.invalidPage, ...commonErrorExamples },
    },
  }),
  getWebhookEndpoint: operation({
    operationId: 'getWebhookEndpoint',
    summary: 'Read one endpoint',
    description: 'The endpoint with this id, as made or last changed, without its signing secret.',
    ...idParams,
    response: {
      200: { ...refTo(EndpointSchema), description: 'The endpoint, without its secret' },
      ...missing,
      ...commonErrors,
    },
    'x-examples': {
      responses: { 200: examples.endpoint, ...missingExample, ...commonErrorExamples },
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
    response: {
      200: { ...refTo(EndpointSchema), description: 'The endpoint, as changed' },
      400: errorResponse('The body is not a valid merge patch or not valid JSON'),
      ...missing,
      ...readOnly,
      413: errorResponse('The body is larger than the limit'),
      415: errorResponse('The content type is not a JSON one'),
      ...commonErrors,
    },
    'x-examples': {
      request: examples.patch,
      responses: {
        200: examples.patched,
        400: errors.invalidPatch,
        ...missingExample,
        ...readOnlyExample,
        413: { tooLarge: errors.tooLarge },
        415: { notJson: errors.notMergePatch },
        ...commonErrorExamples,
      },
    },
  }),
  deleteWebhookEndpoint: operation({
    operationId: 'deleteWebhookEndpoint',
    summary: 'Delete an endpoint',
    description:
      'It receives nothing more: no new attempt starts after the answer, its pending deliveries and its attempt log go.',
    ...idParams,
    response: {
      204: Type.Null({ description: 'Deleted' }),
      ...missing,
      ...readOnly,
      413: errorResponse('The body (which is ignored) is larger than the limit'),
      ...commonErrors,
    },
    'x-examples': {
      responses: {
        ...missingExample,
        ...readOnlyExample,
        413: { tooLarge: errors.tooLarge },
        ...commonErrorExamples,
      },
    },
  }),
  getWebhookEndpointSecret: operation({
    operationId: 'getWebhookEndpointSecret',
    summary: 'Read the signing key of an endpoint',
    description:
      'The key that signs its deliveries now (`webhook-signature`), for the receiver’s verification.',
    ...idParams,
    response: {
      200: { ...refTo(SigningKeySchema), description: 'The current key' },
      ...missing,
      ...readOnly,
      ...commonErrors,
    },
    'x-examples': {
      responses: {
        200: examples.secret,
        ...missingExample,
        ...readOnlyExample,
        ...commonErrorExamples,
        500: { ...commonErrorExamples?.[500], ...errors.secretUnavailable },
      },
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
    response: {
      204: Type.Null({ description: 'Rotated: read the new key at `/secret`' }),
      400: errorResponse('`key` is not a whsec_ key of 24 to 64 bytes, or not valid JSON'),
      ...missing,
      ...readOnly,
      413: errorResponse('The body is larger than the limit'),
      415: errorResponse('The content type is not application/json'),
      ...commonErrors,
    },
    'x-examples': {
      request: examples.rotation,
      responses: {
        400: errors.invalidKey,
        ...missingExample,
        ...readOnlyExample,
        413: { tooLarge: errors.tooLarge },
        415: { notJson: errors.notJson },
        ...commonErrorExamples,
      },
    },
  }),
  listWebhookEndpointAttempts: operation({
    operationId: 'listWebhookEndpointAttempts',
    summary: 'List the delivery attempts of an endpoint, newest first',
    description:
      'At most `limit` attempts, newest first, kept for `WEBHOOK_LOG_RETENTION_S`. When the page is full, `Link` gives the next (older) one.',
    ...idParams,
    querystring: AttemptPageQuerySchema,
    response: {
      200: Type.Array(refTo(AttemptSchema), {
        description: 'Attempts, newest first',
        headers: {
          link: Type.String({
            description:
              'When the page is full: the next page, `<.../attempts?limit=..&after=..[&status=..]>; rel="next"` (RFC 8288)',
          }),
        },
      }),
      400: errorResponse('A query parameter is malformed, out of range or given twice'),
      ...missing,
      ...commonErrors,
    },
    'x-examples': {
      responses: {
        200: examples.attempts,
        400: errors.invalidPage,
        ...missingExample,
        ...commonErrorExamples,
      },
    },
  }),
  recoverWebhookEndpoint: operation({
    operationId: 'recoverWebhookEndpoint',
    summary: 'Send failed deliveries again',
    description:
      'Every event of this endpoint whose delivery ended failed at or after `since` is delivered again, with the same `webhook-id`, in the background.',
    ...idParams,
    body: RecoverSchema,
    response: {
      202: { ...RecoveringSchema, description: 'The deliveries are due again' },
      400: errorResponse('`since` is not an RFC 3339 date-time, or the body is not JSON'),
      ...missing,
      409: errorResponse('The endpoint is disabled: enable it first'),
      413: errorResponse('The body is larger than the limit'),
      415: errorResponse('The content type is not application/json'),
      ...commonErrors,
    },
    'x-examples': {
      request: examples.recover,
      responses: {
        202: examples.recovering,
        400: errors.invalidSince,
        ...missingExample,
        409: errors.disabled,
        413: { tooLarge: errors.tooLarge },
        415: { notJson: errors.notJson },
        ...commonErrorExamples,
      },
    },
  }),
};
