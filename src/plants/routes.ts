import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { type AuthLimits, requireBearerToken } from '../http/auth.js';
import { answerInCommon } from '../http/common-answers.js';
import { answerWithin } from '../http/deadline.js';
import { errorResponse, HttpError } from '../http/errors.js';
import { collectServedMethods } from '../http/methods.js';
import { queryStringOf } from '../http/query.js';
import { refTo } from '../http/validation.js';
import { INT64_MAX } from '../kinds.js';
import {
  answerToken,
  readConsistencyToken,
  tokenHeaders,
  tokenRequestHeader,
  tokenResponseHeader,
} from './consistency-token.js';
import { plantErrorExamples as errors, notPlantJson, plantExamples } from './examples.js';
import { noPlantMessage, plantConflictMessage } from './messages.js';
import { parseInt64, parsePageQuery } from './parameters.js';
import type { Consistency, PlantRepository } from './repository.js';
import {
  NewPlantSchema,
  PAGE_LIMIT_DEFAULT,
  PageQuerySchema,
  PlantIdParamsSchema,
  PlantSchema,
  StoredPlantSchema,
} from './schemas.js';
import { storedPlantJson } from './serialize.js';

const JSON_TYPE = 'application/json; charset=utf-8';

export interface PlantRoutesOptions {
  /** The store; throws while the service is still opening its database. */
  plants: () => PlantRepository;
  /** A request the store has not answered this long after it asked gets a 503. */
  answerWithinMs: number;
  verifyToken: (token: string) => boolean;
  limits: AuthLimits;
  /** Reads go to replicas: answers carry a Consistency-Token, and reads may send one back. */
  consistencyTokens: boolean;
}

/** Path ids become bigints here: Fastify hands them over as text, and never rejects one. */
async function readPlantId(request: FastifyRequest): Promise<void> {
  const { id } = request.params as { id: string };
  if (id === '') {
    throw new HttpError(
      400,
      'params/id is empty: name a plant, as in /plants/42; the list of plants is GET /plants',
    );
  }
  request.params = { id: parseInt64(id, 'params/id') };
}

/** The page parameters, from the raw query string (see parsePageQuery). */
async function readPageQuery(request: FastifyRequest): Promise<void> {
  request.query = parsePageQuery(queryStringOf(request.url));
}

/**
 * The next page's URL, as a reference relative to the service's root: it resolves against
 * whatever scheme and host the client reached the service by, so it stays right behind a
 * proxy or load balancer, and it never echoes a Host header the client could forge.
 */
function nextPageLink(limit: number, lastId: bigint, tag: string | undefined): string {
  const tagParameter = tag === undefined ? '' : `&tag=${encodeURIComponent(tag)}`;
  return `</plants?limit=${limit}&after=${lastId}${tagParameter}>; rel="next"`;
}

export async function plantRoutes(
  app: FastifyInstance,
  { plants, verifyToken, limits, answerWithinMs, consistencyTokens }: PlantRoutesOptions,
): Promise<void> {
  // Without replicas nothing is read or answered: a request costs what it always has.
  const forWrite = (): Consistency | undefined =>
    consistencyTokens ? { position: undefined } : undefined;
  const sentWith = (request: FastifyRequest): Consistency | undefined =>
    consistencyTokens ? readConsistencyToken(request) : undefined;
  await requireBearerToken(app, verifyToken, limits);
  answerInCommon(app, { perTokenLimit: true, busy: true });
  // After authentication: a method a path does not serve is 405 only to a known client.
  const refuseUnservedMethods = collectServedMethods(app);
  // A request waits for a batch, a pooled connection and its statement: all of it must fit in
  // the statement timeout. The work goes on after a 503; a create that still commits is found
  // by its retry (a replay).
  const answered = answerWithin(answerWithinMs);
  const api = app.withTypeProvider<TypeBoxTypeProvider>();

  api.post(
    '/plants',
    {
      schema: {
        operationId: 'addPlant',
        summary: 'Create a plant',
        description:
          'Creates a plant in the store. The id is chosen by the client, so a retry is safe: ' +
          'the same id with the same name and tag answers 200 again; another name or tag answers 409.',
        tags: ['plants'],
        body: refTo(NewPlantSchema),
        response: {
          200: {
            ...refTo(PlantSchema),
            description: 'The plant, as stored',
            headers: tokenResponseHeader,
          },
          400: errorResponse('The body is not a valid NewPlant or not valid JSON'),
          409: errorResponse(
            'A plant with this id exists with a different name or tag',
            tokenResponseHeader,
          ),
          415: notPlantJson.response,
        },
        'x-examples': {
          request: plantExamples.newPlant,
          responses: {
            200: plantExamples.createdPlant,
            400: errors.invalidBody,
            409: errors.conflict,
            415: notPlantJson.examples,
          },
        },
      },
    },
    async (request, reply) => {
      const plant = request.body;
      const consistency = forWrite();
      const result = await answered(plants().createPlant(plant, consistency));
      if (result.outcome === 'conflict') {
        throw new HttpError(409, plantConflictMessage(plant.id), tokenHeaders(consistency));
      }
      answerToken(reply, consistency);
      return result.plant;
    },
  );

  api.get(
    '/plants',
    {
      schema: {
        operationId: 'listPlants',
        summary: 'List plants, a page at a time',
        description:
          'Returns all plants from the system that the user has access to (every token sees ' +
          'every plant), in ascending id order, at most `limit` of them. When the page is full, ' +
          'the `Link` header gives the URL of the next page (`after` = the last id of this one). ' +
          'Paging while others write never repeats or skips a plant that exists throughout.',
        tags: ['plants'],
        querystring: PageQuerySchema,
        response: {
          200: Type.Array(refTo(StoredPlantSchema), {
            description: 'Plants in ascending id order',
            headers: {
              ...tokenResponseHeader,
              link: Type.String({
                description:
                  'When the page is full and does not end at the largest id: the next page, `</plants?limit=..&after=..[&tag=..]>; rel="next"` (RFC 8288)',
              }),
            },
          }),
          400: errorResponse(
            'A query parameter is malformed, out of range or given twice, or the Consistency-Token is malformed',
          ),
        },
        'x-request-headers': tokenRequestHeader,
        'x-examples': { responses: { 200: plantExamples.page, 400: errors.invalidPage } },
      },
      preValidation: readPageQuery,
    },
    async (request, reply) => {
      const { limit = PAGE_LIMIT_DEFAULT, after, tag } = request.query;
      const consistency = sentWith(request);
      const page = await answered(plants().listPlants({ limit, after, tag }, consistency));
      answerToken(reply, consistency);
      // A full page has a next one, unless it ends at the largest id: nothing can follow that.
      if (page.lastId !== undefined && page.count === limit && page.lastId < INT64_MAX) {
        reply.header('link', nextPageLink(limit, page.lastId, tag));
      }
      return reply.type(JSON_TYPE).send(page.json);
    },
  );

  api.get(
    '/plants/:id',
    {
      schema: {
        operationId: 'getPlant',
        summary: 'Read one plant',
        description: 'Returns the plant with this id.',
        tags: ['plants'],
        params: PlantIdParamsSchema,
        response: {
          200: {
            ...refTo(StoredPlantSchema),
            description: 'The plant, as stored',
            headers: tokenResponseHeader,
          },
          400: errorResponse(
            'The id is not an int64 in canonical decimal, or the Consistency-Token is malformed',
          ),
          404: errorResponse('No plant has this id', tokenResponseHeader),
        },
        'x-request-headers': tokenRequestHeader,
        'x-examples': {
          responses: {
            200: plantExamples.storedPlant,
            400: errors.invalidId,
            404: errors.notFound,
          },
        },
      },
      preValidation: readPlantId,
    },
    async (request, reply) => {
      const { id } = request.params;
      const consistency = sentWith(request);
      const plant = await answered(plants().getPlant(id, consistency));
      if (!plant) throw new HttpError(404, noPlantMessage(id), tokenHeaders(consistency));
      answerToken(reply, consistency);
      return reply.type(JSON_TYPE).send(storedPlantJson(plant));
    },
  );

  // A DELETE body means nothing (RFC 9110): whatever is sent, up to the body limit, is ignored.
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, _body, done) => done(null));
    scope.withTypeProvider<TypeBoxTypeProvider>().delete(
      '/plants/:id',
      {
        schema: {
          operationId: 'deletePlant',
          summary: 'Delete one plant',
          description:
            'Deletes a single plant based on the ID supplied. Afterwards the id is free: ' +
            'a POST with it creates a new plant.',
          tags: ['plants'],
          params: PlantIdParamsSchema,
          response: {
            204: Type.Null({ description: 'Plant deleted', headers: tokenResponseHeader }),
            400: errorResponse('The id is not an int64 in canonical decimal'),
            404: errorResponse('No plant has this id', tokenResponseHeader),
          },
          'x-examples': { responses: { 400: errors.invalidId, 404: errors.notFound } },
        },
        preValidation: readPlantId,
      },
      async (request, reply) => {
        const { id } = request.params;
        const consistency = forWrite();
        const deleted = await answered(plants().deletePlant(id, consistency));
        if (!deleted) throw new HttpError(404, noPlantMessage(id), tokenHeaders(consistency));
        answerToken(reply, consistency);
        return reply.code(204).send(null);
      },
    );
  });

  refuseUnservedMethods();
}
