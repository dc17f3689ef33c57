import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { errorResponse, HttpError, UNAVAILABLE_RETRY_AFTER_SECONDS } from './errors.js';

/** Resolves 'ready' or 'unmigrated'; rejects when the database cannot be reached. */
export type ReadinessCheck = () => Promise<'ready' | 'unmigrated'>;

// Readiness probes give up after a second or two; answer before they do.
const READINESS_TIMEOUT_MS = 2000;

const retryAfter = { 'retry-after': String(UNAVAILABLE_RETRY_AFTER_SECONDS) };

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export async function healthRoutes(
  app: FastifyInstance,
  { checkReadiness }: { checkReadiness: ReadinessCheck },
): Promise<void> {
  app.get(
    '/healthz',
    {
      schema: {
        summary: 'Liveness: the process serves HTTP',
        tags: ['operations'],
        security: [],
        response: {
          200: Type.Object({ status: Type.Literal('ok') }, { description: 'The process is alive' }),
        },
      },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        summary: 'Readiness: the database answers and its schema is migrated',
        tags: ['operations'],
        security: [],
        response: {
          200: Type.Object(
            { status: Type.Literal('ready') },
            { description: 'Ready to serve requests' },
          ),
          503: errorResponse('The database is unreachable or not migrated', {
            'retry-after': Type.Integer({ description: 'Seconds to wait before retrying' }),
          }),
        },
      },
    },
    async (request) => {
      let state: 'ready' | 'unmigrated';
      try {
        state = await withTimeout(checkReadiness(), READINESS_TIMEOUT_MS);
      } catch (error) {
        request.log.warn({ err: error }, 'readiness check failed');
        throw new HttpError(503, 'the database is unavailable', retryAfter);
      }
      if (state === 'unmigrated') {
        throw new HttpError(503, 'the database schema is not migrated', retryAfter);
      }
      return { status: 'ready' as const };
    },
  );
}
