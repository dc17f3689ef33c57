import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';

type OpenApiDocument = {
  paths?: Record<string, Record<string, { responses?: Record<string, { headers?: object }> }>>;
};

const requestIdHeader = {
  description: 'The request id: the one the client sent when sane, otherwise a new UUID',
  schema: { type: 'string', maxLength: 128 },
};

/** Every response carries x-request-id; say so once for all of them. */
function documentRequestIdHeader<T extends OpenApiDocument>(document: T): T {
  for (const operations of Object.values(document.paths ?? {})) {
    for (const operation of Object.values(operations)) {
      for (const response of Object.values(operation.responses ?? {})) {
        response.headers = { 'x-request-id': requestIdHeader, ...response.headers };
      }
    }
  }
  return document;
}

/**
 * Generates the OpenAPI 3.1 document from the route schemas (the same TypeBox schemas that
 * validate requests), serves it at /openapi.json and an interactive reference at /docs.
 * Must be registered before the routes it documents.
 */
export async function registerOpenApi(app: FastifyInstance, docsPrefix: string): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Plant Store',
        version: '1.0.0',
        description: 'Creates plants in the store. Every non-2xx response has the Error body.',
        license: { name: 'MIT', identifier: 'MIT' },
      },
      components: {
        securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer' } },
      },
      security: [{ bearerAuth: [] }],
      tags: [
        { name: 'plants', description: 'The plant store' },
        { name: 'operations', description: 'Probes for orchestrators' },
      ],
    },
    // Name shared schemas after their $id, so components.schemas holds Plant, NewPlant, Error.
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) =>
        typeof json.$id === 'string' ? json.$id : `def-${i}`,
    },
    transformObject: (document) =>
      'openapiObject' in document
        ? documentRequestIdHeader(document.openapiObject as OpenApiDocument)
        : document.swaggerObject,
  });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  // staticCSP: the reference page gets a Content-Security-Policy that fits its own assets.
  await app.register(swaggerUi, { routePrefix: docsPrefix, staticCSP: true });
}
