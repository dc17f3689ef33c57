import { STATUS_CODES } from 'node:http';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import {
  failureForLog,
  isDatabaseUnavailable,
  QueueFullError,
  RowRejectedError,
} from '../db/errors.js';

export const ErrorSchema = Type.Object(
  {
    error: Type.Integer({ format: 'int32', description: 'The HTTP status code of the response' }),
    message: Type.String({ description: 'What went wrong, in one sentence for the client' }),
  },
  { $id: 'Error', description: 'The body of every response whose status is not 2xx' },
);
export type ErrorBody = Static<typeof ErrorSchema>;

/** A failure the client should see, with the status, message and headers to answer with. */
export class HttpError extends Error {
  override name = 'HttpError';
  constructor(
    readonly statusCode: number,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** Seconds a client should wait before retrying after a 503. */
export const UNAVAILABLE_RETRY_AFTER_SECONDS = 2;

export const UNEXPECTED_ERROR_MESSAGE = 'an unexpected error occurred; it has been logged';
export const DATABASE_UNAVAILABLE_MESSAGE = 'the database is unavailable; retry later';
export const SERVICE_BUSY_MESSAGE = 'the service is busy; retry later';
export const SERVICE_STARTING_MESSAGE = 'the service is starting; retry shortly';
export const NOT_JSON_MESSAGE = 'Content-Type must be application/json';
export const bodyTooLargeMessage = (bodyLimit: number) =>
  `the request body is larger than the limit of ${bodyLimit} bytes`;

// Fastify's own client errors, in words that suit this API.
const fastifyMessages: Record<string, string> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: NOT_JSON_MESSAGE,
  FST_ERR_CTP_BODY_TOO_LARGE: 'the request body is larger than the limit',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'the request body does not match its Content-Length',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'body must be a JSON object, but the request body is empty',
  FST_ERR_BAD_URL: 'the request URL is malformed',
  FST_ERR_INVALID_URL: 'the request URL is malformed',
  FST_ERR_MAX_PARAM_LENGTH: 'the request URL is too long',
};

/**
 * Turns any thrown value into the status, message and headers the client receives; `bodyLimit`
 * is the request's body limit in bytes, named by a 413.
 */
export function toHttpError(error: unknown, bodyLimit?: number): HttpError {
  if (error instanceof HttpError) return error;
  if (error instanceof QueueFullError) {
    return new HttpError(503, SERVICE_BUSY_MESSAGE, { 'retry-after': '1' }, { cause: error });
  }
  if (error instanceof RowRejectedError) {
    return new HttpError(400, 'the database refused this plant', {}, { cause: error });
  }
  if (isDatabaseUnavailable(error)) {
    const headers = { 'retry-after': String(UNAVAILABLE_RETRY_AFTER_SECONDS) };
    return new HttpError(503, DATABASE_UNAVAILABLE_MESSAGE, headers, {
      cause: error,
    });
  }
  const { statusCode, code, message } = error as Partial<FastifyError>;
  if (code === 'FST_ERR_VALIDATION' && message) {
    return new HttpError(400, message);
  }
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE' && bodyLimit !== undefined) {
    return new HttpError(413, bodyTooLargeMessage(bodyLimit));
  }
  if (typeof statusCode === 'number' && statusCode >= 400 && statusCode < 500) {
    const known = code === undefined ? undefined : fastifyMessages[code];
    const generic = `${STATUS_CODES[statusCode] ?? 'client error'}`.toLowerCase();
    return new HttpError(statusCode, known ?? generic);
  }
  return new HttpError(500, UNEXPECTED_ERROR_MESSAGE);
}

/**
 * The failures already logged: the requests of one batch share its failure, and the log gets
 * one line for it, not one per request.
 */
const logged = new WeakSet<object>();

function firstTime(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return true;
  if (logged.has(error)) return false;
  logged.add(error);
  return true;
}

export function errorHandler(error: unknown, request: FastifyRequest, reply: FastifyReply): void {
  const httpError = toHttpError(error, request.routeOptions.bodyLimit);
  if (httpError.statusCode === 500) {
    if (firstTime(error)) request.log.error({ err: error }, 'request failed');
  } else if (httpError.cause !== undefined && firstTime(httpError.cause)) {
    // A known failure underneath (database down, a refused row): its SQLSTATE and statement,
    // never the statement's values.
    request.log.warn(failureForLog(httpError.cause), httpError.message);
  }
  sendError(reply, httpError);
}

export function sendError(reply: FastifyReply, { statusCode, message, headers }: HttpError): void {
  const body: ErrorBody = { error: statusCode, message };
  reply.code(statusCode).headers(headers).send(body);
}

/** Answers 404, naming the route `nearest` finds a few characters from the path, if it finds one. */
export function notFoundHandler(
  request: FastifyRequest,
  reply: FastifyReply,
  nearest?: (path: string) => string | undefined,
): void {
  const path = request.url.split('?')[0] ?? '';
  const route = nearest?.(path);
  const hint = route === undefined ? '' : `; the nearest route is ${route}`;
  sendError(reply, new HttpError(404, `no route matches ${request.method} ${path}${hint}`));
}

// A redirect is not 2xx, so it carries the Error body too (304 has no body at all).
const redirects = new Set([301, 302, 303, 307, 308]);

/** The body of a redirect with status `statusCode`; undefined for any other status. */
export function redirectBody(statusCode: number): string | undefined {
  if (!redirects.has(statusCode)) return undefined;
  const message = 'the resource is at the URL in the Location header';
  return JSON.stringify({ error: statusCode, message } satisfies ErrorBody);
}

/** An OpenAPI response whose body is the Error schema. */
export function errorResponse(description: string, headers: Record<string, unknown> = {}) {
  return {
    description,
    headers,
    content: { 'application/json': { schema: Type.Ref('Error') } },
  };
}
