import type { TSchema } from '@sinclair/typebox';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Config } from './config.js';
import {
  ADMIN_TOKEN_ON_PLANTS_MESSAGE,
  createAuthThrottle,
  createScopedTokens,
  plantTokenOnAdminMessage,
} from './http/auth.js';
import type { AuthFailureStore } from './http/auth-throttle.js';
import { http1, httpServerOptions } from './http/connections.js';
import { ErrorSchema, errorHandler, notFoundHandler } from './http/errors.js';
import { healthRoutes, type ReadinessCheck } from './http/health.js';
import { registerJsonBodyParser } from './http/json.js';
import { collectServedMethods } from './http/methods.js';
import { type Metrics, metricsRoute } from './http/metrics.js';
import { collectRoutePaths } from './http/nearest-route.js';
import { registerOpenApi } from './http/openapi.js';
import { requestIdFor } from './http/request-id.js';
import { RequestLog } from './http/request-log.js';
import { setSecurityHeaders } from './http/security-headers.js';
import { serverSpans } from './http/server-spans.js';
import { createValidatorCompiler } from './http/validation.js';
import type { PlantRepository } from './plants/repository.js';
import { plantRoutes } from './plants/routes.js';
import { NewPlantSchema, PlantSchema, StoredPlantSchema } from './plants/schemas.js';
import type { EndpointStore } from './webhooks/api/endpoints.js';
import { MANAGEMENT_OFF_MESSAGE } from './webhooks/api/messages.js';
import { endpointRoutes } from './webhooks/api/routes.js';
import { endpointSchemas } from './webhooks/api/schemas.js';
import { webhooksDocument } from './webhooks/catalog/document.js';
import type { Dispatcher } from './webhooks/delivery/engine.js';
import type { Replays } from './webhooks/delivery/replays.js';

/** The settings of the configuration that shape the HTTP app. */

export type AppConfig = Pick<Config, 'http' | 'auth' | 'metricsPort' | 'database' | 'webhooks'>;

export interface AppOptions {
  config: AppConfig;
  logger: FastifyBaseLogger;
  /** The plant store; throws (503) while the service has not opened its database yet. */
  plants: () => PlantRepository;
  /** The statements of the webhook management API; throws (503) until the database is open. */
  endpoints: () => EndpointStore;
  /** Called after each change made through the management API has been committed. */
  onEndpointsChanged?: (key: string) => void;
  /** Called after a recover or a resend made deliveries of an endpoint due, once committed. */
  onDeliveriesDue?: (key: string) => void;
  /** The statements of resends; throws (503) until the database is open. */
  replays: () => Replays;
  /** The delivery engine, which sends tests of endpoints; throws (503) until it runs. */
  dispatcher: () => Pick<Dispatcher, 'test'>;
  checkReadiness: ReadinessCheck;
  /** Where failed authentications are counted for every replica, once the database is open. */
  authFailures?: () => AuthFailureStore | undefined;
  /** True once the process is shutting down: /readyz answers 503, answers close their connection. */
  isStopping?: () => boolean;
  /** Request metrics are counted when given, and served at /metrics unless METRICS_PORT is set. */
  metrics?: Metrics;
  /** True once the tracing SDK is started: then every request gets a server span. */
  traced?: boolean;
}

const DOCS_PREFIX = '/docs';

const sharedSchemas: TSchema[] = [
  PlantSchema,
  NewPlantSchema,
  StoredPlantSchema,
  ErrorSchema,
  ...endpointSchemas,
];

export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const { metrics } = options;
  const { http, auth } = options.config;
  const app = Fastify({
    loggerInstance: options.logger,
    logController: new RequestLog(metrics),
    requestIdHeader: false,
    genReqId: requestIdFor,
    bodyLimit: http.bodyLimit,
    // An over-long path id is the route's to refuse (400, out of the int64 range), not a 414.
    routerOptions: { maxParamLength: 16 * 1024 },
    trustProxy: http.trustProxy,
    // Slow clients cannot hold a connection: headers, then the whole request, must arrive in time.
    ...httpServerOptions({
      headersTimeoutMs: http.headersTimeoutMs,
      requestTimeoutMs: http.requestTimeoutMs,
      keepAliveTimeoutMs: http.keepAliveTimeoutMs,
      logger: options.logger,
    }),
  });

  const nearestRoute = collectRoutePaths(app);
  if (options.traced) await app.register(serverSpans);
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    setSecurityHeaders(request, reply, DOCS_PREFIX);
    // An unknown route is answered at once: its body is neither read nor parsed.
    if (request.is404) notFoundHandler(request, reply, nearestRoute);
    else done();
  });
  const isStopping = options.isStopping ?? (() => false);
  // Nothing runs after an answer that closes its connection; while stopping, answers close it.
  await app.register(http1, { isStopping });
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request, reply) => notFoundHandler(request, reply, nearestRoute));

  for (const schema of sharedSchemas) app.addSchema(schema);
  app.setValidatorCompiler(createValidatorCompiler(sharedSchemas));
  registerJsonBodyParser(app, http.jsonMaxDepth);

  const refuseUnservedMethods = collectServedMethods(app);
  await registerOpenApi(app, { docsPrefix: DOCS_PREFIX, webhooks: webhooksDocument });
  await app.register(healthRoutes, { checkReadiness: options.checkReadiness, isStopping });
  if (metrics && options.config.metricsPort === undefined)
    await app.register(metricsRoute, { metrics });
  const { tokens, adminTokens, ...limits } = auth;
  const scoped = createScopedTokens({ plants: tokens, admin: adminTokens });
  const sharedLimits = { ...limits, failureStore: options.authFailures };
  // One count of failed authentications per address, whichever API it guesses at.
  const throttle = createAuthThrottle(sharedLimits, app.log);
  const answerWithinMs = options.config.database.statementTimeoutMs;
  await app.register(plantRoutes, {
    plants: options.plants,
    verifyToken: scoped.plants.verify,
    limits: {
      ...sharedLimits,
      throttle,
      otherScope: {
        validElsewhere: scoped.plants.validElsewhere,
        message: ADMIN_TOKEN_ON_PLANTS_MESSAGE,
      },
    },
    answerWithinMs,
    consistencyTokens: options.config.database.replicaUrls.length > 0,
  });
  // Without admin tokens the management API is off: its refusals say how to turn it on.
  const managementOff = adminTokens.length === 0 ? MANAGEMENT_OFF_MESSAGE : undefined;
  await app.register(endpointRoutes, {
    endpoints: options.endpoints,
    verifyToken: scoped.admin.verify,
    limits: {
      ...sharedLimits,
      throttle,
      otherScope: {
        validElsewhere: scoped.admin.validElsewhere,
        message: plantTokenOnAdminMessage(managementOff),
      },
      offMessage: managementOff,
    },
    answerWithinMs,
    jsonMaxDepth: http.jsonMaxDepth,
    onEndpointsChanged: options.onEndpointsChanged,
    onDeliveriesDue: options.onDeliveriesDue,
    replays: options.replays,
    dispatcher: options.dispatcher,
    allowPrivateNetworks: options.config.webhooks.allowPrivateNetworks,
  });
  refuseUnservedMethods();

  return app;
}
