// Through @opentelemetry/api alone: every call is a no-op until the SDK is started.
import {
  type Attributes,
  context,
  createContextKey,
  isSpanContextValid,
  type Link,
  ROOT_CONTEXT,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  trace,
} from '@opentelemetry/api';
import {
  ATTR_DB_COLLECTION_NAME,
  ATTR_DB_NAMESPACE,
  ATTR_DB_OPERATION_BATCH_SIZE,
  ATTR_DB_OPERATION_NAME,
  ATTR_DB_QUERY_SUMMARY,
  ATTR_DB_RESPONSE_STATUS_CODE,
  ATTR_DB_SYSTEM_NAME,
  ATTR_ERROR_TYPE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  DB_SYSTEM_NAME_VALUE_POSTGRESQL,
} from '@opentelemetry/semantic-conventions';

// Asked at each span, not once: the SDK registers its provider through its own copy of the API
// (it is not bundled), which a tracer this bundle made before the start would never reach.
const tracer = () => trace.getTracer('plant-store');

/** The contexts of the callers a coalesced batch serves, while it runs. */
const CALLERS = createContextKey('plant-store: callers of a batch');

/** One statement sent to PostgreSQL, as a trace shows it. */
export interface Statement {
  operation: 'SELECT' | 'INSERT' | 'DELETE';
  /** The table. */
  collection: string;
  /** Rows one statement writes or ids it reads for many callers (a coalesced batch). */
  batchSize?: number;
}

/**
 * The trace context of the code running now, for a caller that queues: the statement that
 * serves it later, in a turn of the event loop of its own, is linked to every caller it served.
 */
export function callerContext(): SpanContext | undefined {
  return trace.getSpanContext(context.active());
}

/** Runs `work` on behalf of the callers whose contexts were captured by callerContext(). */
export function forCallers<T>(
  callers: readonly (SpanContext | undefined)[],
  work: () => Promise<T>,
): Promise<T> {
  const valid = callers.filter(
    (caller): caller is SpanContext => caller !== undefined && isSpanContextValid(caller),
  );
  // No caller in a trace (always so while tracing is off): the statement needs no context.
  if (valid.length === 0) return work();
  return context.with(ROOT_CONTEXT.setValue(CALLERS, valid), work);
}

/** The active span's context as a W3C traceparent (version 00), for a row that outlives it. */
export function activeTraceparent(): string | undefined {
  const active = trace.getSpanContext(context.active());
  if (!active || !isSpanContextValid(active)) return undefined;
  return `00-${active.traceId}-${active.spanId}-0${active.traceFlags & TraceFlags.SAMPLED}`;
}

/** server.address, server.port and db.namespace of the statements' spans. */
export function databaseSpanAttributes(databaseUrl: string | undefined): Attributes {
  const attributes: Attributes = { [ATTR_DB_SYSTEM_NAME]: DB_SYSTEM_NAME_VALUE_POSTGRESQL };
  if (databaseUrl === undefined) return attributes;
  const { hostname, port, pathname } = new URL(databaseUrl);
  const database = decodeURIComponent(pathname.slice(1));
  return {
    ...attributes,
    [ATTR_SERVER_ADDRESS]: hostname || 'localhost',
    [ATTR_SERVER_PORT]: Number(port || 5432),
    ...(database && { [ATTR_DB_NAMESPACE]: database }),
  };
}

const sampled = (spanContext: SpanContext) =>
  (spanContext.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED;

/**
 * Runs one statement in a span of its own, made active while it runs. `database` is what
 * databaseSpanAttributes() says of the server it goes to.
 */
export async function statementSpan<T>(
  { operation, collection, batchSize }: Statement,
  database: Attributes,
  run: () => Promise<T>,
): Promise<T> {
  const active = context.active();
  const callers = active.getValue(CALLERS) as SpanContext[] | undefined;
  // Outside every trace (always so while tracing is off), a statement makes no span.
  if (callers === undefined && trace.getSpan(active) === undefined) return run();
  let parent = active;
  let links: Link[] | undefined;
  if (callers !== undefined) {
    // A batch is the child of the first caller whose trace is sampled, and linked to all.
    const first = callers.find(sampled) ?? callers[0];
    parent = first === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, first);
    links = callers.map((caller) => ({ context: caller }));
  }
  const summary = `${operation} ${collection}`;
  const span = tracer().startSpan(
    summary,
    {
      kind: SpanKind.CLIENT,
      attributes: {
        ...database,
        [ATTR_DB_OPERATION_NAME]: operation,
        [ATTR_DB_COLLECTION_NAME]: collection,
        [ATTR_DB_QUERY_SUMMARY]: summary,
        ...(batchSize !== undefined &&
          batchSize > 1 && { [ATTR_DB_OPERATION_BATCH_SIZE]: batchSize }),
      },
      ...(links && { links }),
    },
    parent,
  );
  try {
    return await context.with(trace.setSpan(parent, span), run);
  } catch (error) {
    const code = (error as { code?: unknown })?.code;
    if (typeof code === 'string') span.setAttribute(ATTR_DB_RESPONSE_STATUS_CODE, code);
    span.setAttribute(
      ATTR_ERROR_TYPE,
      typeof code === 'string' ? code : ((error as Error)?.name ?? 'Error'),
    );
    // No message: a database's may quote the values of a row.
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw error;
  } finally {
    span.end();
  }
}
