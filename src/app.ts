import type { TSchema } from '@sinclair/typebox';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Config } from './config.js';
import { createTokenVerifier } from './http/auth.js';
import { clientErrorHandler, ErrorSchema, errorHandler, notFoundHandler } from './http/errors.js';
import { healthRoutes, type ReadinessCheck } from './http/health.js';
import { registerJsonBodyParser } from './http/json.js';
import { type Metrics, metricsRoute, registerRequestMetrics } from './http/metrics.js';
import { registerOpenApi } from './http/openapi.js';
import { requestIdFor } from './http/request-id.js';
import { RequestLog } from './http/request-log.js';
import { setSecurityHeaders } from './http/security-headers.js';
import { createValidatorCompiler } from './http/validation.js';
import type { PlantRepository } from './plants/repository.js';
import { plantRoutes } from './plants/routes.js';
import { NewPlantSchema, PlantSchema } from './plants/schemas.js';

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
  /** Request metrics are counted when given, and served at /metrics unless METRICS_PORT is set. */
  metrics?: Metrics;
}

const DOCS_PREFIX = '/docs';

const sharedSchemas: TSchema[] = [PlantSchema, NewPlantSchema, ErrorSchema];

export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const { config, metrics } = options;
  const app = Fastify({
    loggerInstance: options.logger,
    logController: new RequestLog(),
    requestIdHeader: false,
    genReqId: requestIdFor,
    bodyLimit: config.bodyLimit,
    trustProxy: config.trustProxy,
    // Slow clients cannot hold a connection: headers, then the whole request, must arrive in time.
    http: {
      headersTimeout: config.httpHeadersTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, config.httpHeadersTimeoutMs),
    },
    requestTimeout: config.httpRequestTimeoutMs,
    keepAliveTimeout: config.httpKeepAliveTimeoutMs,
    // Requests that arrive while draining are still served (with Connection: close).
    return503OnClosing: false,
    clientErrorHandler,
    // A malformed URL is answered before any hook runs; give it the Error shape too.
    frameworkErrors: (error, request, reply) => {
      reply.header('x-request-id', request.id);
      errorHandler(error, request, reply);
    },
  });

  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    setSecurityHeaders(request, reply, DOCS_PREFIX);
    done();
  });
  if (metrics) registerRequestMetrics(app, metrics);
  // While draining, answers close their connection, so keep-alive clients cannot hold it open.
  let draining = false;
  app.addHook('preClose', (done) => {
    draining = true;
    done();
  });
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (draining) reply.header('connection', 'close');
    done(null, payload);
  });
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler(notFoundHandler);

  for (const schema of sharedSchemas) app.addSchema(schema);
  app.setValidatorCompiler(createValidatorCompiler(sharedSchemas));
  registerJsonBodyParser(app, config.jsonMaxDepth);

  await registerOpenApi(app, DOCS_PREFIX);
  await app.register(healthRoutes, { checkReadiness: options.checkReadiness });
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
