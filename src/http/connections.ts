import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type {
  FastifyBaseLogger,
  FastifyInstance,
  FastifyServerFactoryHandler,
  FastifyServerOptions,
} from 'fastify';
import fastifyPlugin from 'fastify-plugin';
import { errorHandler } from './errors.js';
import {
  clientErrorProblem,
  hostProblem,
  problems,
  type Refusal,
  refuseOnSocket,
  writeRefusal,
} from './refusals.js';
import { requestIdFor } from './request-id.js';
import { urlForLog } from './request-log.js';

/**
 * HTTP/1.1 below and around the router. Pipelined requests still run side by side, but a
 * request's handler runs only once every request before it on its connection has passed the
 * checks that could close the connection (authentication, parsing, validation), so nothing runs
 * after an answer that closed it (RFC 9112 §9.6). And this module alone gives the answers
 * (refusals.ts) to what never reaches a route, each in its turn, and closes the connection.
 */

export interface HttpServerOptions {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  logger: FastifyBaseLogger;
}

/** What the client asked with an Expect header (Node tells them apart). */
type Expectation = 'none' | '100-continue' | 'other';

/** One client connection. */
interface Connection {
  readonly socket: Duplex;
  /** The request served last, until its answer is written. */
  latest: Exchange | undefined;
  /** An answer given or coming closes the connection: nothing read from now on is served. */
  closing: boolean;
  /** It has its one answer to what Node's parser rejected. */
  refused: boolean;
}

/** A request served on a connection, and its answer. */
interface Exchange {
  readonly connection: Connection;
  readonly request: IncomingMessage;
  readonly response: ServerResponse;
  /** The request read before it, while this one may still have to wait for it. */
  previous: Exchange | undefined;
  /** The request read after it, once that one waits for its turn. */
  next: Exchange | undefined;
  /** Takes it on to its handler; set while it waits for its turn. */
  resume: (() => void) | undefined;
  /** It went on to its handler: every check that could close the connection is behind it. */
  committed: boolean;
  /** Its answer closes the connection. */
  closes: boolean;
}

const connectionOf = Symbol('connection');
const exchangeOf = Symbol('exchange');
type HttpSocket = Duplex & { [connectionOf]?: Connection };
type HttpRequest = IncomingMessage & { [exchangeOf]?: Exchange };

/** Answers through the request's own response: Node keeps it in order and closes after it. */
function refuseResponse(exchange: Exchange, refusal: Refusal): void {
  exchange.closes = true;
  exchange.connection.closing = true;
  writeRefusal(exchange.response, refusal);
}

/** Runs `then` once the answers to every request read so far are written (or lost). */
function afterLastAnswer(connection: Connection, then: () => void): void {
  const response = connection.latest?.response;
  // Node writes the answers in order and marks each destroyed once it is written.
  if (response === undefined || response.destroyed) then();
  else response.once('close', then);
}

/** Answers once the requests that came before have their answers, and closes. */
function refuseInTurn(socket: HttpSocket, refusal: Refusal): void {
  const connection = socket[connectionOf];
  if (connection === undefined) {
    refuseOnSocket(socket, refusal);
    return;
  }
  connection.refused = true;
  connection.closing = true;
  // An answer before it closed the connection: nothing more is said (RFC 9112 §9.6).
  afterLastAnswer(connection, () => {
    if (socket.writable) refuseOnSocket(socket, refusal);
  });
}

/**
 * Resumes `first`, and the requests after it that wait, as far as their turn has come: the
 * request before each went on to its handler, or was answered without closing the connection.
 */
function resumeInTurn(first: Exchange): void {
  let exchange: Exchange | undefined = first;
  while (exchange?.resume !== undefined) {
    const { previous, resume } = exchange;
    // An answer closed the connection, or the client left: nothing more runs (RFC 9112 §9.6).
    if (previous?.closes || !exchange.connection.socket.writable) return;
    if (previous !== undefined && !previous.committed && !previous.response.destroyed) {
      // It waits for the one before it to go on to its handler, or for its answer.
      const waiting = exchange;
      previous.next = waiting;
      previous.response.once('close', () => resumeInTurn(waiting));
      return;
    }
    exchange.resume = undefined;
    exchange.previous = undefined;
    exchange.committed = true;
    resume();
    exchange = exchange.next;
  }
}

/** The request has a body that has not fully arrived yet. */
function bodyStillArriving(request: IncomingMessage): boolean {
  if (request.complete || request.readableEnded) return false;
  const { 'content-length': length, 'transfer-encoding': encoding } = request.headers;
  return encoding !== undefined || (length !== undefined && length !== '0');
}

/**
 * Makes `request` the last one served on its connection, unless a later one has been read
 * already (then that one closes it, in its turn, or the connection ends after its answer).
 * Says whether it did.
 */
function closeConnectionAfter(request: HttpRequest): boolean {
  const exchange = request[exchangeOf];
  if (exchange === undefined) return true;
  const { connection } = exchange;
  connection.closing = true;
  if (connection.latest === exchange) {
    exchange.closes = true;
    return true;
  }
  // The later ones may be answered already, with keep-alive: end it after them.
  afterLastAnswer(connection, () => connection.socket.end());
  return false;
}

/**
 * The Fastify options that put this module under the app: the HTTP server (serverFactory), the
 * handler of what Node's parser rejects (clientErrorHandler), and the Error shape for what
 * Fastify answers before any hook runs.
 */
export function httpServerOptions(options: HttpServerOptions) {
  const { logger } = options;

  const logRefusal = (refusal: Refusal, request?: IncomingMessage, code?: string) => {
    logger.info(
      {
        reqId: refusal.requestId,
        method: request?.method,
        url: urlForLog(request?.url),
        statusCode: refusal.statusCode,
        code,
      },
      'request refused',
    );
  };

  const serverFactory = (handler: FastifyServerFactoryHandler): Server => {
    const admit =
      (expectation: Expectation) => (request: HttpRequest, response: ServerResponse) => {
        const socket = request.socket as HttpSocket;
        let connection = socket[connectionOf];
        if (connection === undefined) {
          connection = { socket, latest: undefined, closing: false, refused: false };
          socket[connectionOf] = connection;
        }
        // Read after an answer that closes the connection: not served.
        if (connection.closing || !socket.writable) return;
        const latest = connection.latest;
        const exchange: Exchange = {
          connection,
          request,
          response,
          previous: latest?.committed === false ? latest : undefined,
          next: undefined,
          resume: undefined,
          committed: false,
          // The client asked to close after this one (Connection: close, or HTTP/1.0).
          closes: !response.shouldKeepAlive,
        };
        request[exchangeOf] = exchange;
        connection.latest = exchange;
        connection.closing = exchange.closes;
        const problem =
          hostProblem(request) ?? (expectation === 'other' ? problems.expectation : undefined);
        if (problem !== undefined) {
          const refusal = { ...problem, requestId: requestIdFor(request) };
          logRefusal(refusal, request);
          refuseResponse(exchange, refusal);
          return;
        }
        if (expectation === '100-continue') response.writeContinue();
        handler(request, response);
      };

    const server = createServer(
      {
        // Node's own answer to a missing Host is bodiless; admit() gives it the Error shape.
        requireHostHeader: false,
        headersTimeout: options.headersTimeoutMs,
        requestTimeout: options.requestTimeoutMs,
        keepAliveTimeout: options.keepAliveTimeoutMs,
        connectionsCheckingInterval: Math.min(1000, options.headersTimeoutMs),
      },
      admit('none'),
    );
    server.on('checkContinue', admit('100-continue'));
    server.on('checkExpectation', admit('other'));
    server.on('connect', (request: IncomingMessage, socket: HttpSocket) => {
      // Node hands the socket over without its error handling.
      socket.on('error', () => socket.destroy());
      socket.resume();
      const refusal = { ...problems.connect, requestId: requestIdFor(request) };
      logRefusal(refusal, request);
      refuseInTurn(socket, refusal);
    });
    return server;
  };

  const clientErrorHandler = (
    error: Error & { code?: string; rawPacket?: unknown },
    socket: Socket,
  ): void => {
    if (!socket.writable || error.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    const connection = (socket as HttpSocket)[connectionOf];
    // One answer per connection: the parser reports every later chunk as an error too.
    if (connection?.refused) return;
    const latest = connection?.latest;
    // An error or a timeout within a request's body is that request's own.
    const exchange = latest !== undefined && !latest.request.complete ? latest : undefined;
    const refusal = {
      ...clientErrorProblem(
        error.code,
        Buffer.isBuffer(error.rawPacket) ? error.rawPacket : undefined,
      ),
      requestId: exchange === undefined ? randomUUID() : requestIdFor(exchange.request),
    };
    if (connection === undefined || exchange === undefined) {
      logRefusal(refusal, undefined, error.code);
      refuseInTurn(socket, refusal);
      return;
    }
    connection.refused = true;
    const { response } = exchange;
    // Its answer has gone, or is on its way: nothing more to say on this connection.
    if (response.destroyed) socket.destroy();
    else if (response.headersSent) response.once('close', () => socket.end());
    // The request broke off before its answer: this is its answer, in its turn (and the
    // request log's line for it).
    else refuseResponse(exchange, refusal);
  };

  return {
    serverFactory,
    clientErrorHandler,
    // Requests that arrive while draining are still served (with Connection: close).
    return503OnClosing: false,
    // A malformed URL is answered before any hook runs; give it the Error shape too.
    frameworkErrors: (error, request, reply) => {
      reply.header('x-request-id', request.id);
      errorHandler(error, request, reply);
    },
  } satisfies FastifyServerOptions;
}

export interface Http1Options {
  /** True once the process is shutting down: the last answer on each connection closes it. */
  isStopping?: () => boolean;
}

/**
 * The hooks of the connections served by `httpServerOptions`, for the whole app. A pipelined
 * request runs only once the ones before it can no longer close the connection. While shutting
 * down, the last request read on a connection closes it, so keep-alive clients move to the
 * replicas that stay. An answer sent before its request's body has arrived closes it too: that
 * body is neither read nor taken for the next request.
 */
export const http1 = fastifyPlugin(
  async (app: FastifyInstance, options: Http1Options) => {
    const isStopping = options.isStopping ?? (() => false);
    let draining = false;
    app.addHook('preClose', (done) => {
      draining = true;
      done();
    });
    app.addHook('preHandler', (request, _reply, done) => {
      const exchange = (request.raw as HttpRequest)[exchangeOf];
      if (exchange === undefined) {
        done();
        return;
      }
      // Fastify marks the answers to requests that arrive while it shuts down.
      if (exchange.response.getHeader('connection') === 'close') {
        exchange.closes = true;
        exchange.connection.closing = true;
      }
      exchange.resume = done;
      resumeInTurn(exchange);
    });
    app.addHook('onSend', (request, reply, payload, done) => {
      const closing = (draining || isStopping()) && closeConnectionAfter(request.raw);
      if (closing || bodyStillArriving(request.raw)) reply.header('connection', 'close');
      done(null, payload);
    });
    app.addHook('onResponse', (request, _reply, done) => {
      const exchange = (request.raw as HttpRequest)[exchangeOf];
      // An idle connection holds no request; one whose body is still arriving owns its errors.
      if (exchange?.request.complete && exchange.connection.latest === exchange) {
        exchange.connection.latest = undefined;
      }
      done();
    });
  },
  { name: 'http1', fastify: '5.x' },
);
