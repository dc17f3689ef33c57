import {
  type Context,
  context,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import {
  ATTR_CLIENT_ADDRESS,
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_REQUEST_METHOD_ORIGINAL,
  ATTR_HTTP_RESPONSE_HEADER,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_NETWORK_PROTOCOL_VERSION,
  ATTR_URL_PATH,
  ATTR_URL_QUERY,
  ATTR_URL_SCHEME,
  ATTR_USER_AGENT_ORIGINAL,
} from '@opentelemetry/semantic-conventions';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';

// Asked at each span, not once: the SDK registers its provider through its own copy of the API
// (it is not bundled), which a tracer this bundle made before the start would never reach.
const tracer = () => trace.getTracer('plant-store');

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

const serverSpan = Symbol('server span');
const serverContext = Symbol('server span context');
type TracedRequest = FastifyRequest & { [serverSpan]?: Span; [serverContext]?: Context };

function startServerSpan(request: TracedRequest, reply: FastifyReply): void {
  const parent = propagation.extract(ROOT_CONTEXT, request.headers);
  const route = request.routeOptions.url;
  const method = KNOWN_METHODS.has(request.method) ? request.method : '_OTHER';
  const queryAt = request.url.indexOf('?');
  const userAgent = request.headers['user-agent'];
  const span = tracer().startSpan(
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
}

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

/**
 * A server span for every request the app answers, made the active context of its handler, and
 * the span's trace and span ids on the request's log lines. Registered only when the SDK is
 * started, so that without it no request runs these hooks; register it before any other hook
 * and route, so that answers given from hooks are in the span and every handler is wrapped.
 */
export const serverSpans = fp(
  async (app: FastifyInstance) => {
    app.addHook('onRequest', (request: TracedRequest, reply, done) => {
      startServerSpan(request, reply);
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
  { name: 'server-spans' },
);
