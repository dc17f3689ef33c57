import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { type AuthLimits, requireBearerToken } from '../http/auth.js';
import { errorResponse, HttpError } from '../http/errors.js';
import { refTo } from '../http/validation.js';
import type { PlantRepository } from './repository.js';
import { NewPlantSchema, PlantSchema } from './schemas.js';

const retryAfter = {
  'retry-after': Type.Integer({ description: 'Seconds to wait before retrying' }),
};

export interface PlantRoutesOptions {
  repository: PlantRepository;
  verifyToken: (token: string) => boolean;
  limits: AuthLimits;
}

export async function plantRoutes(
  app: FastifyInstance,
  { repository, verifyToken, limits }: PlantRoutesOptions,
): Promise<void> {
  await requireBearerToken(app, verifyToken, limits);

  app.withTypeProvider<TypeBoxTypeProvider>().post(
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
          200: { ...refTo(PlantSchema), description: 'The plant, as stored' },
          400: errorResponse('The body is not a valid NewPlant or not valid JSON'),
          401: errorResponse('The bearer token is missing or not valid', {
            'www-authenticate': Type.String({ description: 'The Bearer challenge (RFC 6750)' }),
          }),
          408: errorResponse('The request did not arrive within the time limit'),
          409: errorResponse('A plant with this id exists with a different name or tag'),
          413: errorResponse('The body is larger than the limit'),
          415: errorResponse('The content type is not application/json'),
          429: errorResponse(
            'Too many failed authentications from this address, or requests for this token',
            retryAfter,
          ),
          431: errorResponse('The request headers are too large'),
          500: errorResponse('An unexpected fault'),
          503: errorResponse(
            'The database is unavailable or timed out, or too many creates are waiting for it',
            retryAfter,
          ),
        },
      },
    },
    async (request) => {
      const plant = request.body;
      const result = await repository.createPlant(plant);
      if (result.outcome === 'conflict') {
        throw new HttpError(
          409,
          `a plant with id ${plant.id} already exists with a different name or tag`,
        );
      }
      return result.plant;
    },
  );
}
