import swagger, { type OpenAPIV3_2 } from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import { redirectBody } from './errors.js';

/** An OpenAPI Example Object: a body as the service accepts or sends it. */
export interface Example {
  summary: string;
  value: unknown;
}

/** Named examples of an operation's request body, and of its response bodies by status. */
export interface OperationExamples {
  request?: Record<string, Example>;
  responses?: Record<number, Record<string, Example>>;
}

declare module 'fastify' {
  interface FastifySchema {
    /**
     * Examples of the operation's bodies, beside the schemas they illustrate. @fastify/swagger
     * copies `x-` keys into the operation; they are moved to its media types from there.
     */
    'x-examples'?: OperationExamples;
    /** The request body may be left out (@fastify/swagger marks every body required). */
    'x-body-optional'?: boolean;
    /**
     * Request headers the operation reads, for the document only: a `headers` schema would
     * also have Fastify validate them on every request, even where the header means nothing.
     */
    'x-request-headers'?: Record<string, { description: string; schema: object }>;
  }
}

type MediaTypes = Record<string, { examples?: Record<string, Example> }>;
interface Operation {
  requestBody?: { required?: boolean; content?: MediaTypes };
  parameters?: object[];
  'x-body-optional'?: boolean;
  'x-request-headers'?: Record<string, { description: string; schema: object }>;
  responses?: Record<string, { headers?: object; content?: MediaTypes }>;
  'x-examples'?: OperationExamples;
}
type OpenApiDocument = { paths?: Record<string, Record<string, Operation>> };

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
 * Puts each example into the JSON media types of the body it illustrates, marks the request
 * bodies that may be left out, and lists the request headers an operation reads.
 */
function placeExamples<T extends OpenApiDocument>(document: T): T {
  for (const [path, operations] of Object.entries(document.paths ?? {})) {
    for (const [method, operation] of Object.entries(operations)) {
      if (operation['x-body-optional'] && operation.requestBody) {
        operation.requestBody.required = false;
      }
      delete operation['x-body-optional'];
      for (const [name, header] of Object.entries(operation['x-request-headers'] ?? {})) {
        operation.parameters = [...(operation.parameters ?? []), { in: 'header', name, ...header }];
      }
      delete operation['x-request-headers'];
      const examples = operation['x-examples'];
      if (!examples) continue;
      delete operation['x-examples'];
      const place = (
        content: MediaTypes | undefined,
        named: Record<string, Example>,
        of: string,
      ) => {
        const media = content?.['application/json'];
        if (!media) throw new Error(`examples for ${method} ${path} ${of}, which has no JSON body`);
        for (const [type, other] of Object.entries(content)) {
          if (type.endsWith('+json') || type === 'application/json') other.examples = named;
        }
      };
      if (examples.request) place(operation.requestBody?.content, examples.request, 'request');
      for (const [status, named] of Object.entries(examples.responses ?? {})) {
        place(operation.responses?.[status]?.content, named, `response ${status}`);
      }
    }
  }
  return document;
}

/**
 * The reference page runs Swagger UI's own scripts and styles from /docs/static, and talks to
 * this service only: nothing inline, nothing from elsewhere. Every address is 'self', so the
 * page works by any host name, over plain HTTP or behind a proxy that terminates TLS; it does
 * not upgrade requests to https, which an address without TLS cannot answer. `data:` images are
 * the icons in Swagger UI's stylesheet.
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/**
 * Generates the OpenAPI 3.1 document from the route schemas (the same TypeBox schemas that
 * validate requests), serves it at /openapi.json and an interactive reference at /docs.
 * Must be registered before the routes it documents. `webhooks` is the document's `webhooks`
 * member: the requests the service sends, which no route describes.
 */
export async function registerOpenApi(
  app: FastifyInstance,
  { docsPrefix, webhooks }: { docsPrefix: string; webhooks: OpenAPIV3_2.Document['webhooks'] },
): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Plant Store',
        version: '1.0.0',
        description:
          'Creates, reads, lists and deletes the plants of a store. Ids are int64, chosen by the client and stored exactly, so a create can be retried safely. Every non-2xx response has the Error body. This document is served at [/openapi.json](/openapi.json).',
        license: { name: 'MIT', identifier: 'MIT' },
        // A self-hosted API: whoever runs the deployment answers for it.
        contact: { name: 'The operators of this deployment' },
      },
      // Relative: the paths are served by whatever origin serves this document.
      servers: [{ url: '/', description: 'The service that serves this document' }],
      components: {
        securitySchemes: {
          bearerAuth: {
            type: 'http',
            scheme: 'bearer',
            description: 'A plant token (API_TOKENS): the plant API',
          },
          adminBearer: {
            type: 'http',
            scheme: 'bearer',
            description:
              'An admin token (ADMIN_TOKENS): the webhook management API only; a plant token there is 403 insufficient_scope',
          },
        },
      },
      security: [{ bearerAuth: [] }],
      webhooks,
      tags: [
        { name: 'plants', description: 'The plant store' },
        { name: 'operations', description: 'Probes for orchestrators' },
        {
          name: 'webhook endpoints',
          description:
            'Subscribers of the newPlant webhook made at run time, each with its own signing key (admin tokens only)',
        },
      ],
    },
    // Name shared schemas after their $id, so components.schemas holds Plant, NewPlant, Error.
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) =>
        typeof json.$id === 'string' ? json.$id : `def-${i}`,
    },
    transformObject: (document) =>
      'openapiObject' in document
        ? placeExamples(documentRequestIdHeader(document.openapiObject as OpenApiDocument))
        : document.swaggerObject,
  });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  // The reference page's routes are the service's only redirects: only they pay for the hook.
  await app.register(async (docs) => {
    docs.addHook('onSend', (_request, reply, payload, done) => {
      const redirect = payload === undefined ? redirectBody(reply.statusCode) : undefined;
      if (redirect !== undefined) reply.type('application/json; charset=utf-8');
      done(null, redirect ?? payload);
    });
    await docs.register(swaggerUi, swaggerUiOptions(docsPrefix));
  });
}

function swaggerUiOptions(docsPrefix: string) {
  return {
    routePrefix: docsPrefix,
    // Without the top bar: its logo is an SVG with an inline <style>, which DOCS_CSP refuses,
    // and its box loads any other document into the page.
    uiConfig: { layout: 'BaseLayout' },
    theme: {
      title: 'Plant Store API reference',
      // The page's own link to its copy of the document; the description links /openapi.json.
      css: [
        {
          filename: 'plant-store.css',
          content: '.swagger-ui .info hgroup.main > a { display: none; }',
        },
      ],
    },
    staticCSP: DOCS_CSP,
  };
}
