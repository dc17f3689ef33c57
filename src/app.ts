import type { TSchema } from '@sinclair/typebox';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Config } from './config.js';
import { createTokenVerifier } from './http/auth.js';
import {
  awaitTurn,
  bodyStillArriving,
  closeConnectionAfter,
  forgetRequest,
  httpServerOptions,
} from './http/connections.js';
import { ErrorSchema, errorHandler, notFoundHandler, redirectBody } from './http/errors.js';
import { healthRoutes, type ReadinessCheck } from './http/health.js';
import { registerJsonBodyParser } from './http/json.js';
import { type Metrics, metricsRoute } from './http/metrics.js';
import { registerOpenApi } from './http/openapi.js';
import { requestIdFor } from './http/request-id.js';
import { RequestLog } from './http/request-log.js';
import { setSecurityHeaders } from './http/security-headers.js';
import { createValidatorCompiler } from './http/validation.js';
import type { PlantRepository } from './plants/repository.js';
import { plantRoutes } from './plants/routes.js';
import { NewPlantSchema, PlantSchema, StoredPlantSchema } from './plants/schemas.js';

/** The settings of the configuration that shape the HTTP app. */
export type AppConfig = Pick<
  Config,
  | 'apiTokens'
  | 'bodyLimit'
  | 'jsonMaxDepth'
  | 'authFailureLimit'
  | 'tokenRateLimit'
  | 'rateLimitWindowMs'
  | 'trustProxy'
  | 'httpHeadersTimeoutMs'
  | 'httpRequestTimeoutMs'
  | 'httpKeepAliveTimeoutMs'
  | 'metricsPort'
>;

export interface AppOptions {
  config: AppConfig;
  logger: FastifyBaseLogger;
  repository: PlantRepository;
  checkReadiness: ReadinessCheck;
  /** True once the process is shutting down: /readyz answers 503, answers close their connection. */
  isStopping?: () => boolean;
  /** Request metrics are counted when given, and served at /metrics unless METRICS_PORT is set. */
  metrics?: Metrics;
  /** When tracing is on: a server span per request (see src/tracing/). */
  tracing?: { traceRequests(app: FastifyInstance): void } | undefined;
}

const DOCS_PREFIX = '/docs';

const sharedSchemas: TSchema[] = [PlantSchema, NewPlantSchema, StoredPlantSchema, ErrorSchema];

export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const { config, metrics } = options;
  const app = Fastify({
    loggerInstance: options.logger,
    logController: new RequestLog(metrics),
    requestIdHeader: false,
    genReqId: requestIdFor,
    bodyLimit: config.bodyLimit,
    // An over-long path id is the route's to refuse (400, out of the int64 range), not a 414.
    routerOptions: { maxParamLength: 16 * 1024 },
    trustProxy: config.trustProxy,
    // Slow clients cannot hold a connection: headers, then the whole request, must arrive in time.
    ...httpServerOptions({
      headersTimeoutMs: config.httpHeadersTimeoutMs,
      requestTimeoutMs: config.httpRequestTimeoutMs,
      keepAliveTimeoutMs: config.httpKeepAliveTimeoutMs,
      logger: options.logger,
    }),
    // Requests that arrive while draining are still served (with Connection: close).
    return503OnClosing: false,
    // A malformed URL is answered before any hook runs; give it the Error shape too.
    frameworkErrors: (error, request, reply) => {
      reply.header('x-request-id', request.id);
      errorHandler(error, request, reply);
    },
  });

  // First, so that every answer given from a hook is in the span, and every route is wrapped.
  options.tracing?.traceRequests(app);
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    setSecurityHeaders(request, reply, DOCS_PREFIX);
    // An unknown route is answered at once: its body is neither read nor parsed.
    if (request.is404) notFoundHandler(request, reply);
    else done();
  });
  // While shutting down, answers close their connection, so keep-alive clients cannot hold it
  // open and move to the replicas that stay.
  const isStopping = options.isStopping ?? (() => false);
  let draining = false;
  app.addHook('preClose', (done) => {
    draining = true;
    done();
  });
  app.addHook('onSend', (request, reply, payload, done) => {
    // While shutting down, the last request read on a connection closes it, so keep-alive
    // clients move to the replicas that stay. An answer sent before its request's body has
    // arrived closes it too: that body is neither read nor taken for the next request.
    const closing = (draining || isStopping()) && closeConnectionAfter(request.raw);
    if (closing || bodyStillArriving(request.raw)) reply.header('connection', 'close');
    const redirect = payload === undefined ? redirectBody(reply.statusCode) : undefined;
    if (redirect !== undefined) reply.type('application/json; charset=utf-8');
    done(null, redirect ?? payload);
  });
  // A pipelined request runs only once the ones before it can no longer close the connection.
  app.addHook('preHandler', awaitTurn);
  app.addHook('onResponse', forgetRequest);
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler(notFoundHandler);

  for (const schema of sharedSchemas) app.addSchema(schema);
  app.setValidatorCompiler(createValidatorCompiler(sharedSchemas));
  registerJsonBodyParser(app, config.jsonMaxDepth);

  await registerOpenApi(app, DOCS_PREFIX);
  await app.register(healthRoutes, { checkReadiness: options.checkReadiness, isStopping });
  if (metrics && config.metricsPort === undefined) await app.register(metricsRoute, { metrics });
  await app.register(plantRoutes, {
    repository: options.repository,
    verifyToken: createTokenVerifier(config.apiTokens),
    limits: {
      failuresPerAddress: config.authFailureLimit,
      requestsPerToken: config.tokenRateLimit,
      windowMs: config.rateLimitWindowMs,
    },
  });

  return app;
}
