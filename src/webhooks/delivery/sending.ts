import type { KeyObject } from 'node:crypto';
// Through @opentelemetry/api alone: every call is a no-op until the SDK is started.
import {
  type Attributes,
  isSpanContextValid,
  ROOT_CONTEXT,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_RESEND_COUNT,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
} from '@opentelemetry/semantic-conventions';
import type { Dispatcher } from 'undici';
import {
  DESTINATION_NOT_ALLOWED,
  DESTINATION_NOT_ALLOWED_MESSAGE,
} from '../security/destination.js';
import { signatures } from '../security/signature.js';
import { webhookId } from '../tables/ids.js';
import type { ClaimedDelivery } from './outbox.js';

/** How one attempt ended. Only a 2xx answered within the time limit is a delivery. */
export type AttemptResult =
  | { kind: 'answered'; status: number; retryAfter: string | undefined }
  | { kind: 'timeout' }
  /** No answer: the connection was refused, reset, or the name did not resolve. */
  | { kind: 'unreachable'; code: string };

/** Why an attempt was not made: the endpoint's key or custom headers cannot be opened. */
const SECRET_UNAVAILABLE = 'ESECRETUNAVAILABLE';
const HEADERS_UNAVAILABLE = 'EHEADERSUNAVAILABLE';

/** The refusals made before connecting, as the attempt log says them. */
const errorMessages: Record<string, string> = {
  [DESTINATION_NOT_ALLOWED]: `${DESTINATION_NOT_ALLOWED_MESSAGE}: its address is loopback, private or otherwise special-purpose; set WEBHOOK_ALLOW_PRIVATE_NETWORKS=true to allow it (for local development and tests)`,
  [SECRET_UNAVAILABLE]: "the endpoint's signing secret cannot be read",
  [HEADERS_UNAVAILABLE]: "the endpoint's custom headers cannot be read",
};

/** What the log and the table say of a failed attempt: the status, or why there was none. */
export function describeFailure(result: AttemptResult): { status?: number; error: string } {
  if (result.kind === 'answered') return { status: result.status, error: `HTTP ${result.status}` };
  if (result.kind === 'timeout') return { error: 'timeout' };
  return { error: errorMessages[result.code] ?? result.code };
}

/** At most this much of an answer is read; the rest is not waited for. */
const RESPONSE_READ_LIMIT = 4096;

const USER_AGENT = 'plant-store-webhooks/1.0.0';

function errorCode(error: unknown): string {
  for (let current = error, depth = 0; current && depth < 4; depth++) {
    const { code, cause } = current as { code?: unknown; cause?: unknown };
    if (typeof code === 'string') return code;
    current = cause;
  }
  return (error as Error)?.name ?? 'Error';
}

const timeoutCodes = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT']);

/**
 * Makes one attempt of a delivery: a POST of its body, signed for this attempt's timestamp,
 * whose status must arrive within the time limit. Redirects are not followed (a 3xx is an
 * answer like any other), and at most a few KiB of the answer are read. Never rejects.
 * Written against undici's dispatch interface rather than request(), which would make a
 * stream of every answer: deliveries are as many as creates.
 */
function attemptDelivery(
  { pool, path }: { pool: Dispatcher; path: string },
  keys: readonly KeyObject[],
  custom: readonly string[],
  delivery: ClaimedDelivery,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<AttemptResult> {
  const id = webhookId(delivery.eventId, delivery.trigger);
  const timestamp = Math.floor(Date.now() / 1000);
  return new Promise<AttemptResult>((resolve) => {
    let controller: Dispatcher.DispatchController | undefined;
    let answered: AttemptResult | undefined;
    let read = 0;
    let settled = false;
    const settle = (result: AttemptResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', abandon);
      resolve(result);
    };
    const stop = (result: AttemptResult) => {
      settle(result);
      if (controller && !controller.aborted) controller.abort(new Error('attempt over'));
    };
    // A status that arrived in time counts, even if the rest of the answer does not.
    const expire = () => stop(answered ?? { kind: 'timeout' });
    const abandon = () => stop({ kind: 'timeout' });
    const timer = setTimeout(expire, timeoutMs);
    signal.addEventListener('abort', abandon, { once: true });
    pool.dispatch(
      {
        method: 'POST',
        path,
        headers: [
          'content-type',
          'application/json',
          'user-agent',
          USER_AGENT,
          'webhook-id',
          id,
          'webhook-timestamp',
          String(timestamp),
          'webhook-signature',
          signatures(keys, id, timestamp, delivery.body),
          ...custom,
        ],
        body: delivery.body,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      },
      {
        onRequestStart(started) {
          controller = started;
          if (settled) started.abort(new Error('attempt over'));
        },
        onResponseStart(_controller, status, headers) {
          const retryAfter = headers['retry-after'];
          answered = {
            kind: 'answered',
            status,
            retryAfter: typeof retryAfter === 'string' ? retryAfter : undefined,
          };
        },
        onResponseData(_controller, chunk) {
          read += chunk.length;
          if (read > RESPONSE_READ_LIMIT && answered) stop(answered);
        },
        onResponseEnd() {
          settle(answered ?? { kind: 'unreachable', code: 'NO_ANSWER' });
        },
        onResponseError(_controller, error) {
          if (answered) return settle(answered);
          const code = errorCode(error);
          settle(timeoutCodes.has(code) ? { kind: 'timeout' } : { kind: 'unreachable', code });
        },
      },
    );
  });
}

// Asked at each span, not once: the SDK registers its provider through its own copy of the API
// (it is not bundled), which a tracer this bundle made before the start would never reach.
const tracer = () => trace.getTracer('plant-store');

const traceparentFormat = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

function spanContextOf(traceparent: string | undefined): SpanContext | undefined {
  const match = traceparentFormat.exec(traceparent ?? '');
  if (!match) return undefined;
  const [, traceId = '', spanId = '', flags = ''] = match;
  const spanContext = { traceId, spanId, traceFlags: Number.parseInt(flags, 16), isRemote: true };
  return isSpanContextValid(spanContext) ? spanContext : undefined;
}

/** Why an attempt failed, as error.type; undefined for a 2xx or 3xx answer. */
function failureOf(result: AttemptResult): string | undefined {
  if (result.kind === 'timeout') return 'timeout';
  if (result.kind === 'unreachable') return result.code;
  return result.status >= 400 ? String(result.status) : undefined;
}

/** What an attempt reads of its endpoint's lane (see lanes.ts). */
export interface Connection {
  pool: Dispatcher;
  path: string;
  forbidden: boolean;
  keys: readonly KeyObject[] | 'unreadable';
  headers: readonly string[] | 'unreadable';
  receiverAttributes: Attributes;
}

/**
 * Attempts a delivery on its lane, or refuses it before connecting (see Lane.forbidden, keys);
 * in a span of its own, the child of the statement that recorded its event.
 */
export async function sendOn(
  connection: Connection,
  delivery: ClaimedDelivery,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<AttemptResult> {
  if (connection.forbidden) return { kind: 'unreachable', code: DESTINATION_NOT_ALLOWED };
  const { keys } = connection;
  if (keys === 'unreadable') return { kind: 'unreachable', code: SECRET_UNAVAILABLE };
  const { headers } = connection;
  if (headers === 'unreadable') return { kind: 'unreachable', code: HEADERS_UNAVAILABLE };
  const recorded = spanContextOf(delivery.traceparent);
  const span = tracer().startSpan(
    'POST',
    {
      kind: SpanKind.CLIENT,
      attributes: {
        ...connection.receiverAttributes,
        ...(delivery.attempt > 1 && { [ATTR_HTTP_REQUEST_RESEND_COUNT]: delivery.attempt - 1 }),
        'webhook.id': webhookId(delivery.eventId, delivery.trigger),
      },
    },
    recorded ? trace.setSpanContext(ROOT_CONTEXT, recorded) : ROOT_CONTEXT,
  );
  // An attempt never rejects: its result says how it ended.
  const result = await attemptDelivery(connection, keys, headers, delivery, timeoutMs, signal);
  if (result.kind === 'answered') span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, result.status);
  const failure = failureOf(result);
  if (failure !== undefined) {
    span.setAttribute(ATTR_ERROR_TYPE, failure);
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
  return result;
}
