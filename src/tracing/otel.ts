// Loaded only when the environment asks for traces (see start.ts): the SDK, its exporters and
// every hook below cost nothing otherwise.
import {
  type Attributes,
  type Context,
  context,
  createContextKey,
  isSpanContextValid,
  type Link,
  propagation,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  trace,
} from '@opentelemetry/api';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { NodeSDK } from '@opentelemetry/sdk-node';
import {
  ATTR_CLIENT_ADDRESS,
  ATTR_DB_COLLECTION_NAME,
  ATTR_DB_NAMESPACE,
  ATTR_DB_OPERATION_BATCH_SIZE,
  ATTR_DB_OPERATION_NAME,
  ATTR_DB_QUERY_SUMMARY,
  ATTR_DB_RESPONSE_STATUS_CODE,
  ATTR_DB_SYSTEM_NAME,
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_REQUEST_METHOD_ORIGINAL,
  ATTR_HTTP_REQUEST_RESEND_COUNT,
  ATTR_HTTP_RESPONSE_HEADER,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_NETWORK_PROTOCOL_VERSION,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_SERVICE_NAME,
  ATTR_URL_FULL,
  ATTR_URL_PATH,
  ATTR_URL_QUERY,
  ATTR_URL_SCHEME,
  ATTR_USER_AGENT_ORIGINAL,
  DB_SYSTEM_NAME_VALUE_POSTGRESQL,
} from '@opentelemetry/semantic-conventions';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Statement } from '../db/tracing.js';
import type { AttemptResult, TracedAttempt } from '../webhooks/attempt.js';
import type { Tracing } from './tracing.js';

export interface OpenTelemetryOptions {
  /** The PostgreSQL server the statements go to; absent for the embedded engine. */
  databaseUrl: string | undefined;
}

const SERVICE_NAME = 'plant-store';

/** The methods HTTP semantic conventions name; any other is `_OTHER`. */
const KNOWN_METHODS = new Set([
  'CONNECT',
  'DELETE',
  'GET',
  'HEAD',
  'OPTIONS',
  'PATCH',
  'POST',
  'PUT',
  'QUERY',
  'TRACE',
]);

/** The contexts of the callers a coalesced batch serves, while it runs. */
const CALLERS = createContextKey('plant-store: callers of a batch');

const serverSpan = Symbol('server span');
const serverContext = Symbol('server span context');
type TracedRequest = FastifyRequest & { [serverSpan]?: Span; [serverContext]?: Context };

const isSpanContext = (value: unknown): value is SpanContext =>
  typeof value === 'object' && value !== null && isSpanContextValid(value as SpanContext);

const sampled = (spanContext: SpanContext) =>
  (spanContext.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED;

/** A span context as a W3C traceparent (version 00), as it travels in a header or a row. */
const traceparentOf = ({ traceId, spanId, traceFlags }: SpanContext) =>
  `00-${traceId}-${spanId}-0${traceFlags & TraceFlags.SAMPLED}`;

const traceparentFormat = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

function spanContextOf(traceparent: string | undefined): SpanContext | undefined {
  const match = traceparentFormat.exec(traceparent ?? '');
  if (!match) return undefined;
  const [, traceId = '', spanId = '', flags = ''] = match;
  const spanContext = { traceId, spanId, traceFlags: Number.parseInt(flags, 16), isRemote: true };
  return isSpanContextValid(spanContext) ? spanContext : undefined;
}

/** server.address, server.port and db.namespace of the statements' spans. */
function databaseAttributes(databaseUrl: string | undefined): Attributes {
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

/** The exporter's endpoint for the log: origin and path, never a password or a query. */
function describeEndpoint(endpoint: string | undefined): string {
  try {
    const url = new URL(endpoint ?? '');
    return `${url.origin}${url.pathname === '/' ? '' : url.pathname}`;
  } catch {
    return 'an endpoint that is not a URL';
  }
}

/** Ends a span with the outcome of `work`, which runs with the span as the active one. */
async function inSpan<T>(
  span: Span,
  parent: Context,
  work: () => Promise<T>,
  onError: (error: unknown) => void,
): Promise<T> {
  try {
    return await context.with(trace.setSpan(parent, span), work);
  } catch (error) {
    onError(error);
    // No message: a database's may quote the values of a row.
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw error;
  } finally {
    span.end();
  }
}

/**
 * Starts the OpenTelemetry SDK (@opentelemetry/sdk-node) from the standard OTEL_* variables:
 * the exporter and its protocol, endpoint, headers and timeout, the sampler, the batch span
 * processor, the resource. It exports traces only: the service's metrics are Prometheus's, and
 * its logs are JSON lines on stdout.
 */
export function startOpenTelemetry(options: OpenTelemetryOptions): Tracing {
  const sdk = new NodeSDK({
    // The variables (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) override this name.
    resource: defaultResource().merge(
      resourceFromAttributes({ [ATTR_SERVICE_NAME]: SERVICE_NAME }),
    ),
    instrumentations: [],
    metricReaders: [],
    logRecordProcessors: [],
  });
  sdk.start();
  const tracer = trace.getTracer(SERVICE_NAME);
  const database = databaseAttributes(options.databaseUrl);

  /** Ends the request's span with its answer's status, or as aborted without a reply. */
  function endServerSpan(request: TracedRequest, reply: FastifyReply | undefined): void {
    const span = request[serverSpan];
    if (!span) return;
    request[serverSpan] = undefined;
    if (reply) span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, reply.statusCode);
    if (!reply || reply.statusCode >= 500) {
      span.setAttribute(ATTR_ERROR_TYPE, reply ? String(reply.statusCode) : 'aborted');
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
    span.end();
  }

  return {
    endpoint: describeEndpoint(
      process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || process.env.OTEL_EXPORTER_OTLP_ENDPOINT,
    ),

    traceRequests(app: FastifyInstance) {
      app.addHook('onRequest', (request: TracedRequest, reply, done) => {
        const parent = propagation.extract(ROOT_CONTEXT, request.headers);
        const route = request.routeOptions.url;
        const method = KNOWN_METHODS.has(request.method) ? request.method : '_OTHER';
        const queryAt = request.url.indexOf('?');
        const userAgent = request.headers['user-agent'];
        const span = tracer.startSpan(
          route === undefined ? method : `${method} ${route}`,
          {
            kind: SpanKind.SERVER,
            attributes: {
              [ATTR_HTTP_REQUEST_METHOD]: method,
              ...(method === '_OTHER' && { [ATTR_HTTP_REQUEST_METHOD_ORIGINAL]: request.method }),
              ...(route !== undefined && { [ATTR_HTTP_ROUTE]: route }),
              [ATTR_URL_SCHEME]: request.protocol,
              [ATTR_URL_PATH]: queryAt === -1 ? request.url : request.url.slice(0, queryAt),
              ...(queryAt !== -1 && { [ATTR_URL_QUERY]: request.url.slice(queryAt + 1) }),
              [ATTR_NETWORK_PROTOCOL_VERSION]: request.raw.httpVersion,
              [ATTR_CLIENT_ADDRESS]: request.ip,
              ...(userAgent !== undefined && { [ATTR_USER_AGENT_ORIGINAL]: userAgent }),
              // The id the answer carries, the client's own or one made for it.
              [ATTR_HTTP_RESPONSE_HEADER('x-request-id')]: [request.id],
            },
          },
          parent,
        );
        request[serverSpan] = span;
        request[serverContext] = trace.setSpan(parent, span);
        const { traceId, spanId } = span.spanContext();
        const log = request.log.child({ trace_id: traceId, span_id: spanId });
        request.log = log;
        reply.log = log;
        done();
      });
      app.addHook('onResponse', (request, reply, done) => {
        endServerSpan(request, reply);
        done();
      });
      app.addHook('onRequestAbort', (request, done) => {
        // The client went away before its answer was sent: no onResponse follows.
        endServerSpan(request, undefined);
        done();
      });
      // A handler runs with its request's span active, so the statements it sends are children.
      app.addHook('onRoute', (route) => {
        const handler = route.handler;
        route.handler = function tracedHandler(request: TracedRequest, reply) {
          const active = request[serverContext];
          return active === undefined
            ? handler.call(this, request, reply)
            : context.with(active, handler, this, request, reply);
        };
      });
    },

    capture: () => trace.getSpanContext(context.active()),

    traceparent() {
      const active = trace.getSpanContext(context.active());
      return active && isSpanContextValid(active) ? traceparentOf(active) : undefined;
    },

    forCallers(callers, work) {
      return context.with(ROOT_CONTEXT.setValue(CALLERS, callers.filter(isSpanContext)), work);
    },

    statement<T>({ operation, collection, batchSize }: Statement, run: () => Promise<T>) {
      const active = context.active();
      const callers = active.getValue(CALLERS) as SpanContext[] | undefined;
      let parent = active;
      let links: Link[] | undefined;
      if (callers !== undefined) {
        // A batch is the child of the first caller whose trace is sampled, and linked to all.
        const first = callers.find(sampled) ?? callers[0];
        parent = first === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, first);
        links = callers.map((caller) => ({ context: caller }));
      }
      const summary = `${operation} ${collection}`;
      const span = tracer.startSpan(
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
      return inSpan(span, parent, run, (error) => {
        const code = (error as { code?: unknown })?.code;
        if (typeof code === 'string') span.setAttribute(ATTR_DB_RESPONSE_STATUS_CODE, code);
        span.setAttribute(
          ATTR_ERROR_TYPE,
          typeof code === 'string' ? code : ((error as Error)?.name ?? 'Error'),
        );
      });
    },

    async webhookAttempt(attempt: TracedAttempt, run: () => Promise<AttemptResult>) {
      const recorded = spanContextOf(attempt.traceparent);
      const parent = recorded ? trace.setSpanContext(ROOT_CONTEXT, recorded) : ROOT_CONTEXT;
      const url = new URL(attempt.receiver);
      const span = tracer.startSpan(
        'POST',
        {
          kind: SpanKind.CLIENT,
          attributes: {
            [ATTR_HTTP_REQUEST_METHOD]: 'POST',
            [ATTR_SERVER_ADDRESS]: url.hostname,
            [ATTR_SERVER_PORT]: Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
            [ATTR_URL_FULL]: attempt.receiver,
            ...(attempt.attempt > 1 && { [ATTR_HTTP_REQUEST_RESEND_COUNT]: attempt.attempt - 1 }),
            'webhook.id': attempt.webhookId,
          },
        },
        parent,
      );
      // An attempt never rejects: its result says how it ended.
      return inSpan(
        span,
        parent,
        async () => {
          const result = await run();
          if (result.kind === 'answered') {
            span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, result.status);
          }
          const failure =
            result.kind === 'timeout'
              ? 'timeout'
              : result.kind === 'unreachable'
                ? result.code
                : result.status >= 400
                  ? String(result.status)
                  : undefined;
          if (failure !== undefined) {
            span.setAttribute(ATTR_ERROR_TYPE, failure);
            span.setStatus({ code: SpanStatusCode.ERROR });
          }
          return result;
        },
        () => {},
      );
    },

    shutdown: () => sdk.shutdown(),
  };
}
