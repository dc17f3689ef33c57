import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { type AuthLimits, plantTokenOnAdminMessage, requireBearerToken } from '../../http/auth.js';
import { answerInCommon } from '../../http/common-answers.js';
import { answerWithin } from '../../http/deadline.js';
import { HttpError } from '../../http/errors.js';
import { registerJsonBodyParser } from '../../http/json.js';
import { collectServedMethods } from '../../http/methods.js';
import { INT64_MAX } from '../../kinds.js';
import { DEFAULT_EVENT_TYPES, EVENT_TYPES_JSON } from '../catalog/event-types.js';
import type { Dispatcher } from '../delivery/engine.js';
import type { Replays } from '../delivery/replays.js';
import { forbiddenHost } from '../security/destination.js';
import { SecretUnavailableError } from '../security/secrets.js';
import { attemptIdOf, attemptKeyOf, endpointIdOf, eventUuidOf } from '../tables/ids.js';
import type { EndpointStore } from './endpoints.js';
import {
  CONFIGURED_MESSAGE,
  DISABLED_MESSAGE,
  DISABLED_SEND_MESSAGE,
  HEADERS_UNAVAILABLE_MESSAGE,
  NOT_MERGE_PATCH_MESSAGE,
  secretUnavailableMessage,
} from './messages.js';
import { operations } from './operations.js';
import {
  bodyOrEmpty,
  endpointKey,
  headersOnCreate,
  keyOfRequest,
  notFound,
  readAttemptPage,
  readEndpointId,
  readEndpointPage,
  readEventId,
  unknownEvent,
  unpatchableField,
} from './parameters.js';
import { DEFAULT_TEST_EVENT_TYPE, type Endpoint, PAGE_LIMIT_DEFAULT } from './schemas.js';
import { attemptsJson, endpointOf } from './serialize.js';

const JSON_TYPE = 'application/json; charset=utf-8';
const BASE = '/webhooks/endpoints';
const EVENT_TYPES = '/webhooks/event-types';

export interface EndpointRoutesOptions {
  /** The statements; throws (503) while the service is still opening its database. */
  endpoints: () => EndpointStore;
  /** A request the database has not answered this long after it asked gets a 503. */
  answerWithinMs: number;
  /** Admin tokens: the only ones these routes accept. */
  verifyToken: (token: string) => boolean;
  limits: AuthLimits;
  /** The nesting depth a JSON body may have. */
  jsonMaxDepth: number;
  /** Told the row key (decimal) of an endpoint once a change to it has committed, before the answer. */
  onEndpointsChanged?: ((key: string) => void) | undefined;
  /** Told the row key of an endpoint whose deliveries a recover or a resend made due, once committed. */
  onDeliveriesDue?: ((key: string) => void) | undefined;
  /** The statements of resends; throws (503) while the service is still opening its database. */
  replays: () => Replays;
  /** The delivery engine, which sends tests; throws (503) until it runs. */
  dispatcher: () => Pick<Dispatcher, 'test'>;
  /** WEBHOOK_ALLOW_PRIVATE_NETWORKS: when off, an endpoint on a private host is warned of. */
  allowPrivateNetworks?: boolean | undefined;
}

export async function endpointRoutes(
  app: FastifyInstance,
  options: EndpointRoutesOptions,
): Promise<void> {
  const { endpoints, verifyToken, limits } = options;
  const changed = options.onEndpointsChanged ?? (() => {});
  const due = options.onDeliveriesDue ?? (() => {});
  await requireBearerToken(app, verifyToken, limits);
  answerInCommon(app, {
    otherScope: {
      description:
        'The token is valid, but a plant token: this API needs an admin token (insufficient_scope)',
      message: plantTokenOnAdminMessage(),
      summary: 'A plant token',
    },
    perTokenLimit: false,
    busy: false,
  });
  // After authentication: a method a path does not serve is 405 only to an admin.
  const refuseUnservedMethods = collectServedMethods(app);
  const answered = answerWithin(options.answerWithinMs);
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  /** Why a change found no endpoint to change: it is not (404), or WEBHOOK_URLS owns it (409). */
  const notChangeable = async (request: { params: { id: string } }) =>
    (await answered(endpoints().get(keyOfRequest(request))))?.configured
      ? new HttpError(409, CONFIGURED_MESSAGE)
      : notFound();
  /** Accepted, since a name's addresses are judged at connect time; a literal one is known now. */
  const warnIfPrivate = (request: FastifyRequest, endpoint: Endpoint) => {
    if (options.allowPrivateNetworks || !forbiddenHost(new URL(endpoint.url).hostname)) return;
    request.log.warn(
      { endpoint: endpoint.id },
      `the webhook endpoint ${endpoint.id} has a loopback or private host: every delivery to it fails "destination not allowed" unless WEBHOOK_ALLOW_PRIVATE_NETWORKS=true`,
    );
  };

  api.post(BASE, { schema: operations.createWebhookEndpoint }, async (request, reply) => {
    const refused = headersOnCreate(request.body);
    if (refused) throw refused;
    const { url, description = '', disabled = false, secret } = request.body;
    const { events = DEFAULT_EVENT_TYPES, rateLimit = null } = request.body;
    const created = { url, description, disabled, events, rateLimit, secret };
    const row = await answered(endpoints().create(created));
    changed(row.id);
    const endpoint = endpointOf(row);
    warnIfPrivate(request, endpoint);
    return reply.code(201).header('location', `${BASE}/${endpoint.id}`).send(endpoint);
  });

  api.get(
    BASE,
    { schema: operations.listWebhookEndpoints, preValidation: readEndpointPage },
    async (request, reply) => {
      const { limit = PAGE_LIMIT_DEFAULT, after } = request.query;
      const rows = await answered(endpoints().list(after ? (endpointKey(after) ?? 0n) : 0n, limit));
      const last = rows.at(-1);
      if (last && rows.length === limit) {
        reply.header('link', `<${BASE}?limit=${limit}&after=${endpointIdOf(last.id)}>; rel="next"`);
      }
      return rows.map(endpointOf);
    },
  );

  api.get(
    `${BASE}/:id`,
    { schema: operations.getWebhookEndpoint, preValidation: readEndpointId },
    async (request) => {
      const row = await answered(endpoints().get(keyOfRequest(request)));
      if (!row) throw notFound();
      return endpointOf(row);
    },
  );

  // A merge patch comes as application/merge-patch+json (RFC 7396) or as plain JSON.
  await app.register(async (scope) => {
    registerJsonBodyParser(scope, options.jsonMaxDepth, [
      'application/json',
      'application/merge-patch+json',
    ]);
    scope.addContentTypeParser('*', (_request, _payload, done) =>
      done(new HttpError(415, NOT_MERGE_PATCH_MESSAGE), undefined),
    );
    scope
      .withTypeProvider<TypeBoxTypeProvider>()
      .patch(
        `${BASE}/:id`,
        { schema: operations.updateWebhookEndpoint, preValidation: readEndpointId },
        async (request) => {
          const refused = unpatchableField(request.body, request.params.id);
          if (refused) throw refused;
          const { url, description, disabled, events, rateLimit } = request.body;
          const patch = {
            url,
            description: description === null ? '' : description,
            disabled,
            events,
            rateLimit,
          };
          const row = await answered(endpoints().patch(keyOfRequest(request), patch));
          if (!row) throw await notChangeable(request);
          changed(String(keyOfRequest(request)));
          const endpoint = endpointOf(row);
          if (url !== undefined) warnIfPrivate(request, endpoint);
          return endpoint;
        },
      );
  });

  // A DELETE body means nothing (RFC 9110): whatever is sent, up to the body limit, is ignored.
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, _body, done) => done(null));
    scope
      .withTypeProvider<TypeBoxTypeProvider>()
      .delete(
        `${BASE}/:id`,
        { schema: operations.deleteWebhookEndpoint, preValidation: readEndpointId },
        async (request, reply) => {
          if (!(await answered(endpoints().delete(keyOfRequest(request))))) {
            throw await notChangeable(request);
          }
          changed(String(keyOfRequest(request)));
          return reply.code(204).send(null);
        },
      );
  });

  api.get(
    `${BASE}/:id/secret`,
    { schema: operations.getWebhookEndpointSecret, preValidation: readEndpointId },
    async (request, reply) => {
      let key: string | undefined;
      try {
        key = await answered(endpoints().secret(keyOfRequest(request)));
      } catch (error) {
        if (!(error instanceof SecretUnavailableError)) throw error;
        throw new HttpError(
          500,
          secretUnavailableMessage(error.missingKeyId),
          {},
          { cause: error },
        );
      }
      if (key === undefined) throw await notChangeable(request);
      reply.header('cache-control', 'no-store');
      return { key };
    },
  );

  api.post(
    `${BASE}/:id/secret/rotate`,
    {
      schema: operations.rotateWebhookEndpointSecret,
      preValidation: [readEndpointId, bodyOrEmpty],
    },
    async (request, reply) => {
      const rotated = await answered(endpoints().rotate(keyOfRequest(request), request.body.key));
      if (!rotated) throw await notChangeable(request);
      changed(String(keyOfRequest(request)));
      return reply.code(204).send(null);
    },
  );

  // Values may be credentials of the receiver's: read as the secret is, never cached.
  api.get(
    `${BASE}/:id/headers`,
    { schema: operations.getWebhookEndpointHeaders, preValidation: readEndpointId },
    async (request, reply) => {
      let headers: Record<string, string> | undefined;
      try {
        headers = await answered(endpoints().headers(keyOfRequest(request)));
      } catch (error) {
        if (!(error instanceof SecretUnavailableError)) throw error;
        throw new HttpError(500, HEADERS_UNAVAILABLE_MESSAGE, {}, { cause: error });
      }
      if (headers === undefined) throw notFound();
      reply.header('cache-control', 'no-store');
      return { headers };
    },
  );

  api.put(
    `${BASE}/:id/headers`,
    { schema: operations.setWebhookEndpointHeaders, preValidation: readEndpointId },
    async (request, reply) => {
      const key = keyOfRequest(request);
      if (!(await answered(endpoints().setHeaders(key, request.body.headers)))) {
        throw await notChangeable(request);
      }
      changed(String(key));
      return reply.code(204).send(null);
    },
  );

  api.get(
    `${BASE}/:id/attempts`,
    {
      schema: operations.listWebhookEndpointAttempts,
      preValidation: [readEndpointId, readAttemptPage],
    },
    async (request, reply) => {
      const { limit = PAGE_LIMIT_DEFAULT, after, status } = request.query;
      const rows = await answered(
        endpoints().attempts(keyOfRequest(request), {
          before: after === undefined ? INT64_MAX : (attemptKeyOf(after) ?? INT64_MAX),
          limit,
          succeeded: status === undefined ? undefined : status === 'succeeded',
        }),
      );
      if (rows === undefined) throw notFound();
      const last = rows.at(-1);
      if (last && rows.length === limit) {
        const filter = status === undefined ? '' : `&status=${status}`;
        const next = `${BASE}/${request.params.id}/attempts?limit=${limit}&after=${attemptIdOf(last.id)}`;
        reply.header('link', `<${next}${filter}>; rel="next"`);
      }
      return reply.type(JSON_TYPE).send(attemptsJson(rows));
    },
  );

  api.post(
    `${BASE}/:id/recover`,
    { schema: operations.recoverWebhookEndpoint, preValidation: readEndpointId },
    async (request, reply) => {
      const { since } = request.body;
      const recovered = await answered(
        endpoints().recover(keyOfRequest(request), since.toUpperCase()),
      );
      if (recovered === undefined) throw notFound();
      if (recovered === 'disabled') throw new HttpError(409, DISABLED_MESSAGE);
      due(String(keyOfRequest(request)));
      return reply.code(202).send({ recovering: recovered });
    },
  );

  // The body of a resend means nothing: whatever is sent, up to the body limit, is ignored.
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, _body, done) => done(null));
    scope
      .withTypeProvider<TypeBoxTypeProvider>()
      .post(
        `${BASE}/:id/events/:eventId/resend`,
        { schema: operations.resendWebhookEvent, preValidation: [readEndpointId, readEventId] },
        async (request, reply) => {
          const key = keyOfRequest(request);
          const event = eventUuidOf(request.params.eventId) ?? '';
          const resent = await answered(options.replays().resend(key, event));
          if (resent === undefined) throw notFound();
          if (resent === 'unknown') throw unknownEvent();
          if (resent === 'disabled') throw new HttpError(409, DISABLED_SEND_MESSAGE);
          // Claimed here at once, rather than at the next poll.
          due(String(key));
          return reply.code(202).send();
        },
      );
  });

  api.post(
    `${BASE}/:id/test`,
    { schema: operations.testWebhookEndpoint, preValidation: [readEndpointId, bodyOrEmpty] },
    async (request) => {
      const { eventType = DEFAULT_TEST_EVENT_TYPE } = request.body;
      const outcome = await options.dispatcher().test(keyOfRequest(request), eventType, answered);
      if (outcome === undefined) throw notFound();
      if (outcome === 'disabled') throw new HttpError(409, DISABLED_SEND_MESSAGE);
      return outcome;
    },
  );

  // The catalog is the same for every request: its JSON is made once.
  api.get(EVENT_TYPES, { schema: operations.listWebhookEventTypes }, async (_request, reply) =>
    reply.type(JSON_TYPE).send(EVENT_TYPES_JSON),
  );

  refuseUnservedMethods();
}
