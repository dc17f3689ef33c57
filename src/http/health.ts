import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { failureForLog } from '../db/errors.js';
import { errorResponse, HttpError, UNAVAILABLE_RETRY_AFTER_SECONDS } from './errors.js';

/**
 * Resolves 'ready', 'unmigrated', or 'starting' while the service has not yet opened (and
 * migrated) its database; rejects when the database cannot be reached.
 */
export type ReadinessCheck = () => Promise<'ready' | 'unmigrated' | 'read-only' | 'starting'>;

// Readiness probes give up after a second or two; answer before they do.
const READINESS_TIMEOUT_MS = 2000;

const retryAfter = { 'retry-after': String(UNAVAILABLE_RETRY_AFTER_SECONDS) };

const notReady = (message: string, summary: string) => ({
  summary,
  value: { error: 503, message },
});

/** Examples of the probes' answers, for the OpenAPI document. */
const probeExamples = {
  alive: { ok: { summary: 'The process serves HTTP', value: { status: 'ok' } } },
  ready: { ready: { summary: 'Ready to serve requests', value: { status: 'ready' } } },
  notReady: {
    starting: notReady(
      'the service is starting: its database is not open yet',
      'The service listens, and is still opening (or waiting for) its database',
    ),
    unavailable: notReady('the database is unavailable', 'The database does not answer within 2 s'),
    unmigrated: notReady(
      'the database schema is not migrated',
      'The database lacks migrations of this build',
    ),
    readOnly: notReady(
      'the database is read-only; writes are refused until it accepts them again',
      'DATABASE_URL leads to a standby or a demoted primary (a failover in progress)',
    ),
    stopping: notReady('the service is shutting down', 'SIGTERM: draining, before it exits'),
  },
};

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export async function healthRoutes(
  app: FastifyInstance,
  { checkReadiness, isStopping }: { checkReadiness: ReadinessCheck; isStopping: () => boolean },
): Promise<void> {
  app.get(
    '/healthz',
    {
      schema: {
        operationId: 'getHealthz',
        summary: 'Liveness: the process serves HTTP',
        description:
          'Answers 200 while the process serves HTTP, whatever the state of the database: an orchestrator restarts the process when it does not. Needs no token.',
        tags: ['operations'],
        security: [],
        response: {
          200: Type.Object({ status: Type.Literal('ok') }, { description: 'The process is alive' }),
        },
        'x-examples': { responses: { 200: probeExamples.alive } },
      },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        operationId: 'getReadyz',
        summary: 'Readiness: the database answers and its schema is migrated',
        description:
          'Answers 200 when the database answers and its schema is migrated, 503 while the service starts, stops or cannot use its database: a load balancer sends requests only to a ready replica. Needs no token.',
        tags: ['operations'],
        security: [],
        response: {
          200: Type.Object(
            { status: Type.Literal('ready') },
            { description: 'Ready to serve requests' },
          ),
          503: errorResponse(
            'The service is starting or shutting down, or the database is unreachable or not migrated',
            {
              'retry-after': Type.Integer({ description: 'Seconds to wait before retrying' }),
            },
          ),
        },
        'x-examples': { responses: { 200: probeExamples.ready, 503: probeExamples.notReady } },
      },
    },
    async (request) => {
      // A load balancer stops sending new requests here while the ones it sent are served.
      if (isStopping()) throw new HttpError(503, 'the service is shutting down', retryAfter);
      let state: Awaited<ReturnType<ReadinessCheck>>;
      try {
        state = await withTimeout(checkReadiness(), READINESS_TIMEOUT_MS);
      } catch (error) {
        request.log.warn(failureForLog(error), 'readiness check failed');
        throw new HttpError(503, 'the database is unavailable', retryAfter);
      }
      if (state === 'starting') {
        throw new HttpError(
          503,
          'the service is starting: its database is not open yet',
          retryAfter,
        );
      }
      if (state === 'read-only') {
        throw new HttpError(
          503,
          'the database is read-only; writes are refused until it accepts them again',
          retryAfter,
        );
      }
      if (state === 'unmigrated') {
        throw new HttpError(503, 'the database schema is not migrated', retryAfter);
      }
      return { status: 'ready' as const };
    },
  );
}
