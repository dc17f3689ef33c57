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
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_REQUEST_RESEND_COUNT,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_URL_FULL,
} from '@opentelemetry/semantic-conventions';
import type { AttemptResult } from './attempt.js';

// Asked at each span, not once: the SDK registers its provider through its own copy of the API
// (it is not bundled), which a tracer this bundle made before the start would never reach.
const tracer = () => trace.getTracer('plant-store');

/** One attempt as a trace shows it. */
export interface TracedAttempt {
  /** What receiverSpanAttributes() says of its receiver. */
  receiver: Attributes;
  webhookId: string;
  /** The attempt's number, from 1. */
  attempt: number;
  /** The W3C trace context recorded with its event, for the attempt that follows its fan-out. */
  traceparent: string | undefined;
}

/** The attributes of every attempt to `url`; `receiver` is its origin and path, without the query. */
export function receiverSpanAttributes(url: URL, receiver: string): Attributes {
  return {
    [ATTR_HTTP_REQUEST_METHOD]: 'POST',
    [ATTR_SERVER_ADDRESS]: url.hostname,
    [ATTR_SERVER_PORT]: Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
    // A query string may carry a credential.
    [ATTR_URL_FULL]: receiver,
  };
}

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

/** Runs an attempt in a span of its own, the child of the statement that recorded its event. */
export async function attemptSpan(
  attempt: TracedAttempt,
  run: () => Promise<AttemptResult>,
): Promise<AttemptResult> {
  const recorded = spanContextOf(attempt.traceparent);
  const span = tracer().startSpan(
    'POST',
    {
      kind: SpanKind.CLIENT,
      attributes: {
        ...attempt.receiver,
        ...(attempt.attempt > 1 && { [ATTR_HTTP_REQUEST_RESEND_COUNT]: attempt.attempt - 1 }),
        'webhook.id': attempt.webhookId,
      },
    },
    recorded ? trace.setSpanContext(ROOT_CONTEXT, recorded) : ROOT_CONTEXT,
  );
  // An attempt never rejects: its result says how it ended.
  const result = await run();
  if (result.kind === 'answered') span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, result.status);
  const failure = failureOf(result);
  if (failure !== undefined) {
    span.setAttribute(ATTR_ERROR_TYPE, failure);
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
  return result;
}
