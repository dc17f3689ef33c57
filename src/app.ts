import type { TSchema } from '@sinclair/typebox';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { createTokenVerifier } from './http/auth.js';
import { clientErrorHandler, ErrorSchema, errorHandler, notFoundHandler } from './http/errors.js';
import { healthRoutes, type ReadinessCheck } from './http/health.js';
import { registerJsonBodyParser } from './http/json.js';
import { registerOpenApi } from './http/openapi.js';
import { requestIdFor } from './http/request-id.js';
import { RequestLog } from './http/request-log.js';
import { createValidatorCompiler } from './http/validation.js';
import type { PlantRepository } from './plants/repository.js';
import { plantRoutes } from './plants/routes.js';
import { NewPlantSchema, PlantSchema } from './plants/schemas.js';

export interface AppOptions {
  logger: FastifyBaseLogger;
  repository: PlantRepository;
  checkReadiness: ReadinessCheck;
  /** Accepted bearer tokens and `sha256:<hex>` digests of tokens. */
  tokens: readonly string[];
  bodyLimit: number;
  jsonMaxDepth: number;
}

const sharedSchemas: TSchema[] = [PlantSchema, NewPlantSchema, ErrorSchema];

export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: options.logger,
    logController: new RequestLog(),
    requestIdHeader: false,
    genReqId: requestIdFor,
    bodyLimit: options.bodyLimit,
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
    done();
  });
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
  registerJsonBodyParser(app, options.jsonMaxDepth);

  await registerOpenApi(app);
  await app.register(healthRoutes, { checkReadiness: options.checkReadiness });
  await app.register(plantRoutes, {
    repository: options.repository,
    verifyToken: createTokenVerifier(options.tokens),
  });

  return app;
}
