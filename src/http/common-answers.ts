import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import {
  TOKEN_NOT_VALID_MESSAGE,
  TOKEN_REQUIRED_MESSAGE,
  TOO_MANY_FAILURES_MESSAGE,
} from './auth.js';
import {
  bodyTooLargeMessage,
  DATABASE_UNAVAILABLE_MESSAGE,
  errorResponse,
  HttpError,
  NOT_JSON_MESSAGE,
  SERVICE_BUSY_MESSAGE,
  SERVICE_STARTING_MESSAGE,
  UNEXPECTED_ERROR_MESSAGE,
} from './errors.js';
import type { Example, OperationExamples } from './openapi.js';
import { problems } from './refusals.js';
import { DEFAULT_BODY_LIMIT } from './settings.js';

// The answers that many routes give, each declared once with its examples; a scope's routes get
// theirs in one pass (answerInCommon), and a route's own answer to a status replaces the common one.

/** An Error body of status `error` saying `message`, as an example named by `summary`. */
export const errorExample = (error: number, message: string, summary: string): Example => ({
  summary,
  value: { error, message },
});

/** The example of the error `thrown` throws: the message the code sends, word for word. */
export function exampleOfThrown(thrown: () => unknown, summary: string): Example {
  try {
    thrown();
  } catch (error) {
    if (error instanceof HttpError) return errorExample(error.statusCode, error.message, summary);
    throw error;
  }
  throw new Error(`nothing was thrown for the example "${summary}"`);
}

/** A response with the Error body, and its examples. */
export interface ErrorAnswer {
  response: ReturnType<typeof errorResponse>;
  examples: Record<string, Example>;
}

const retryAfter = {
  'retry-after': Type.Integer({ description: 'Seconds to wait before retrying' }),
};
const challenge = {
  'www-authenticate': Type.String({ description: 'The Bearer challenge (RFC 6750)' }),
};

/** The 413 of a body over BODY_LIMIT; `ignored` for a route that reads no body but still counts it. */
export const bodyTooLarge = ({ ignored = false } = {}): ErrorAnswer => ({
  response: errorResponse(
    ignored
      ? 'The body (which is ignored) is larger than the limit'
      : 'The body is larger than the limit',
  ),
  examples: {
    tooLarge: errorExample(
      413,
      bodyTooLargeMessage(DEFAULT_BODY_LIMIT),
      `A body over BODY_LIMIT (${DEFAULT_BODY_LIMIT} bytes by default)`,
    ),
  },
});

/** The 415 of a body that is not JSON. */
export const notJson = (
  description = 'The content type is not application/json',
  example = errorExample(415, NOT_JSON_MESSAGE, 'Content-Type: text/plain'),
): ErrorAnswer => ({ response: errorResponse(description), examples: { notJson: example } });

/** The 500 of a fault, beside `examples` of the faults a route names. */
export const fault = (examples: Record<string, Example> = {}): ErrorAnswer => ({
  response: errorResponse('An unexpected fault'),
  examples: {
    unexpected: errorExample(
      500,
      UNEXPECTED_ERROR_MESSAGE,
      'A fault in the service (its details are in the log)',
    ),
    ...examples,
  },
});

/** What the answers of one scope's routes differ in. */
export interface CommonAnswerOptions {
  /** The 403 of a valid token of the other scope, where it is documented. */
  otherScope?: { description: string; message: string; summary: string };
  /** The 429 names the limit of requests per token too. */
  perTokenLimit: boolean;
  /** The 503 of a store too busy (its batches full), rather than the one of a service starting. */
  busy: boolean;
}

/** The answers of every route of a scope, by status. */
export function commonAnswers(options: CommonAnswerOptions): Record<number, ErrorAnswer> {
  const answers: Record<number, ErrorAnswer> = {
    401: {
      response: errorResponse('The bearer token is missing or not valid', challenge),
      examples: {
        missing: errorExample(401, TOKEN_REQUIRED_MESSAGE, 'No Authorization header'),
        unknown: errorExample(401, TOKEN_NOT_VALID_MESSAGE, 'A token the service does not accept'),
      },
    },
    408: {
      response: errorResponse('The request did not arrive within the time limit'),
      examples: {
        slow: errorExample(408, problems.timeout.message, 'The request arrived too slowly'),
      },
    },
    429: {
      response: errorResponse(
        options.perTokenLimit
          ? 'Too many failed authentications from this address, or requests for this token'
          : 'Too many failed authentications from this address',
        retryAfter,
      ),
      examples: {
        failedAuthentication: errorExample(
          429,
          TOO_MANY_FAILURES_MESSAGE,
          'Over AUTH_FAILURE_LIMIT failed authentications',
        ),
      },
    },
    431: {
      response: errorResponse('The request headers are too large'),
      examples: {
        headers: errorExample(431, problems.headersTooLarge.message, 'Headers over the limit'),
      },
    },
    500: fault(),
    503: {
      response: errorResponse(
        options.busy
          ? 'The database is unavailable or timed out, or too busy'
          : 'The database is unavailable or timed out, or the service is starting',
        retryAfter,
      ),
      examples: {
        database: errorExample(
          503,
          DATABASE_UNAVAILABLE_MESSAGE,
          'The database does not answer (Retry-After: 2)',
        ),
        ...(options.busy && {
          busy: errorExample(
            503,
            SERVICE_BUSY_MESSAGE,
            'Too many requests wait for the database (Retry-After: 1)',
          ),
        }),
        starting: errorExample(
          503,
          SERVICE_STARTING_MESSAGE,
          'The database is not open yet (Retry-After: 1)',
        ),
      },
    },
  };
  const { otherScope } = options;
  if (otherScope) {
    answers[403] = {
      response: errorResponse(otherScope.description, challenge),
      examples: { otherScope: errorExample(403, otherScope.message, otherScope.summary) },
    };
  }
  return answers;
}

/** The answers a route has for its body: none without one, unless its method carries one it ignores. */
function bodyAnswers(method: string | string[], readsBody: boolean): Record<number, ErrorAnswer> {
  if (readsBody) return { 413: bodyTooLarge(), 415: notJson() };
  const carriesBody = [method]
    .flat()
    .some((one) => ['POST', 'PUT', 'PATCH', 'DELETE'].includes(one));
  return carriesBody ? { 413: bodyTooLarge({ ignored: true }) } : {};
}

/**
 * Gives every documented route of `scope` registered from now on the common answers and those
 * of its body, each with its examples, beside its own (which win for the same status).
 */
export function answerInCommon(scope: FastifyInstance, options: CommonAnswerOptions): void {
  const common = commonAnswers(options);
  scope.addHook('onRoute', (route) => {
    const { schema } = route;
    if (!schema || schema.hide) return;
    const own = (schema.response ?? {}) as Record<string, unknown>;
    const answers = { ...common, ...bodyAnswers(route.method, schema.body !== undefined) };
    const response: Record<string, unknown> = {};
    const responses: OperationExamples['responses'] = {};
    for (const [status, answer] of Object.entries(answers)) {
      if (status in own) continue;
      response[status] = answer.response;
      responses[Number(status)] = answer.examples;
    }
    const examples = schema['x-examples'];
    route.schema = {
      ...schema,
      response: { ...response, ...own },
      'x-examples': { ...examples, responses: { ...responses, ...examples?.responses } },
    };
  });
}
