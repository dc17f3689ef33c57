import { randomUUID } from 'node:crypto';
import {
  createServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
  STATUS_CODES,
} from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type {
  FastifyBaseLogger,
  FastifyReply,
  FastifyRequest,
  FastifyServerFactoryHandler,
} from 'fastify';
import type { ErrorBody } from './errors.js';
import { requestIdFor } from './request-id.js';
import { apiHeaders } from './security-headers.js';

/**
 * HTTP/1.1 below the router. Pipelined requests still run side by side, but a request's handler
 * runs only once every request before it on its connection has passed the checks that could
 * close the connection (authentication, parsing, validation), so nothing runs after an answer
 * that closed it (RFC 9112 §9.6). And this module alone writes the answers given before a
 * request reaches a route: a missing, repeated or malformed Host, an unmet Expect, CONNECT,
 * bytes that are not HTTP, a request that does not arrive in time. They have the Error body, the
 * request id and the security headers of every other answer, come in their turn, and close the
 * connection.
 */

export interface HttpServerOptions {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  logger: FastifyBaseLogger;
}

/** An answer given before a request reaches a route. */
interface Refusal {
  statusCode: number;
  message: string;
  requestId: string;
  headers?: Readonly<Record<string, string>>;
}

type Problem = Omit<Refusal, 'requestId'>;

/** What the client asked with an Expect header (Node tells them apart). */
type Expectation = 'none' | '100-continue' | 'other';

interface Exchange {
  request: IncomingMessage;
  response: ServerResponse;
  /** It passed every check that could close the connection: its answer keeps it open. */
  committed: boolean;
  /** Takes the request on to its handler, once the requests before it are committed. */
  resume: (() => void) | undefined;
}

// A client that never closes its side of a refused connection loses it after this long.
const LINGER_MS = 2000;

// uri-host [ ":" port ] (RFC 9110 §7.2, RFC 3986 §3.2.2); an empty host is allowed.
const validHost =
  /^(?:\[[0-9A-Za-z._~!$&'()*+,;=:%-]+\]|(?:[0-9A-Za-z._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*)(?::[0-9]*)?$/;

const problems = {
  noHost: { statusCode: 400, message: 'the request has no Host header' },
  manyHosts: { statusCode: 400, message: 'the request has more than one Host header' },
  badHost: { statusCode: 400, message: 'the Host header is not a valid host' },
  expectation: {
    statusCode: 417,
    message: 'Expect must be 100-continue, the only expectation this service meets',
  },
  connect: {
    statusCode: 405,
    message: 'CONNECT is not supported: this service is not a proxy',
    // No method applies to an authority-form target (RFC 9110 §10.2.1: an empty Allow).
    headers: { allow: '' },
  },
} satisfies Record<string, Problem>;

/** The answer to what Node's HTTP parser reported (a parse error, a timeout, an overflow). */
function clientErrorProblem(code: string | undefined): Problem {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return { statusCode: 431, message: 'the request headers are too large' };
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return { statusCode: 413, message: 'the chunk extensions are too large' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { statusCode: 408, message: 'the request took too long to arrive' };
    default:
      return { statusCode: 400, message: 'the request is not valid HTTP' };
  }
}

function hostProblem(request: IncomingMessage): Problem | undefined {
  const host = request.headers.host;
  if (host === undefined) {
    return request.httpVersionMajor === 1 && request.httpVersionMinor === 0
      ? undefined
      : problems.noHost;
  }
  // Node keeps the first of several Host fields; RFC 9112 §3.2 wants a 400.
  const raw = request.rawHeaders;
  let hosts = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i] as string;
    if (name.length === 4 && name.toLowerCase() === 'host') hosts++;
  }
  if (hosts > 1) return problems.manyHosts;
  return validHost.test(host) ? undefined : problems.badHost;
}

function refusalParts(refusal: Refusal): { headers: Record<string, string>; body: string } {
  const body = JSON.stringify({
    error: refusal.statusCode,
    message: refusal.message,
  } satisfies ErrorBody);
  const headers = {
    ...apiHeaders,
    'x-request-id': refusal.requestId,
    ...refusal.headers,
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(body)),
    connection: 'close',
  };
  return { headers, body };
}

/** Answers through the request's own response: Node keeps it in order and closes after it. */
function refuseResponse(response: ServerResponse, refusal: Refusal): void {
  const { headers, body } = refusalParts(refusal);
  response.writeHead(refusal.statusCode, headers);
  response.end(body);
}

/** Writes the answer on the socket itself, where no response exists, and closes. */
function refuseOnSocket(socket: Duplex, refusal: Refusal): void {
  const { headers, body } = refusalParts(refusal);
  let head = `HTTP/1.1 ${refusal.statusCode} ${STATUS_CODES[refusal.statusCode]}\r\n`;
  for (const [name, value] of Object.entries(headers)) head += `${name}: ${value}\r\n`;
  head += `date: ${new Date().toUTCString()}\r\n\r\n`;
  socket.end(head + body);
  setTimeout(() => socket.destroy(), LINGER_MS).unref();
}

const connectionOf = Symbol('connection');
type HttpSocket = Duplex & { [connectionOf]?: Connection };

/** Its answer has been written, or its connection broke: it holds nobody up any more. */
function answered({ response }: Exchange): boolean {
  return response.writableFinished || response.destroyed;
}

/**
 * One client connection and its requests that are not answered yet, in order. It listens for
 * the end of an answer only when someone waits for it, so a request that waits for nobody
 * costs no listener.
 */
class Connection {
  readonly exchanges: Exchange[] = [];
  /** The request whose answer closes the connection: none after it is served. */
  closer: Exchange | undefined;
  /** Nothing read from now on is served, and the connection ends once all have answers. */
  ending = false;
  /** The request whose head was read last: an error or a timeout within its body is its own. */
  latest: IncomingMessage | undefined;
  /** The answer to what came after the requests above; written once they have theirs. */
  refusal: Refusal | undefined;
  refused = false;
  private awaited: ServerResponse | undefined;

  constructor(readonly socket: Duplex) {}

  admit(exchange: Exchange): void {
    this.forgetAnswered();
    this.exchanges.push(exchange);
  }

  exchangeOf(request: IncomingMessage): Exchange | undefined {
    return this.exchanges.find((exchange) => exchange.request === request);
  }

  /** Lets go of an answered request, so that an idle connection holds none. */
  forget(request: IncomingMessage): void {
    this.forgetAnswered();
    if (this.latest === request && request.complete) this.latest = undefined;
  }

  /**
   * Resumes the requests whose turn has come (every request before them is committed), and
   * writes a waiting refusal once every request has its answer.
   */
  readonly advance = (): void => {
    this.forgetAnswered();
    // An answer closed the connection: what came after it is not served (RFC 9112 §9.6).
    if (!this.socket.writable) {
      for (const exchange of this.exchanges) exchange.resume = undefined;
      this.refusal = undefined;
      return;
    }
    const ready: (() => void)[] = [];
    for (const exchange of this.exchanges) {
      if (exchange.resume !== undefined) ready.push(exchange.resume);
      exchange.resume = undefined;
      if (exchange === this.closer) break;
      if (!exchange.committed) {
        this.awaitAnswer(exchange);
        break;
      }
    }
    for (const resume of ready) resume();
    if (this.refusal === undefined && !this.ending) return;
    const last = this.exchanges.at(-1);
    if (last !== undefined) this.awaitAnswer(last);
    else if (this.refusal !== undefined) refuseOnSocket(this.socket, this.refusal);
    else this.socket.end();
  };

  /** Answers now, or once the requests that came before have their answers, and closes. */
  refuse(refusal: Refusal): void {
    this.refused = true;
    this.refusal = refusal;
    this.advance();
  }

  /** Serves the requests read so far, then ends the connection. */
  end(): void {
    this.ending = true;
    this.advance();
  }

  private awaitAnswer(exchange: Exchange): void {
    if (this.awaited === exchange.response) return;
    this.awaited = exchange.response;
    exchange.response.once('close', this.advance);
  }

  private forgetAnswered(): void {
    for (let i = this.exchanges.length - 1; i >= 0; i--) {
      const exchange = this.exchanges[i] as Exchange;
      if (!answered(exchange)) continue;
      this.exchanges.splice(i, 1);
      if (this.awaited === exchange.response) this.awaited = undefined;
    }
  }
}

/** The request has a body that has not fully arrived yet. */
export function bodyStillArriving(request: IncomingMessage): boolean {
  if (request.complete || request.readableEnded) return false;
  const { 'content-length': length, 'transfer-encoding': encoding } = request.headers;
  return encoding !== undefined || (length !== undefined && length !== '0');
}

/**
 * Makes `request` the last one served on its connection, unless a later one has been read
 * already (then that one closes it, in its turn). Says whether it did.
 */
export function closeConnectionAfter(request: IncomingMessage): boolean {
  const connection = (request.socket as HttpSocket | null)?.[connectionOf];
  if (connection === undefined) return true;
  if (connection.latest !== request) {
    // The later ones may be answered already, with keep-alive: end it after them.
    connection.end();
    return false;
  }
  connection.closer ??= connection.exchangeOf(request);
  return true;
}

/**
 * A preHandler hook: holds the request until every request before it on its connection is
 * committed, and for ever if one of those closes the connection.
 */
export function awaitTurn(request: FastifyRequest, _reply: FastifyReply, done: () => void): void {
  const connection = (request.raw.socket as HttpSocket | null)?.[connectionOf];
  const exchange = connection?.exchangeOf(request.raw);
  if (connection === undefined || exchange === undefined) {
    done();
    return;
  }
  exchange.committed = true;
  // Fastify marks the answers to requests that arrive while it shuts down.
  if (exchange.response.getHeader('connection') === 'close') connection.closer ??= exchange;
  exchange.resume = done;
  connection.advance();
}

/** An onResponse hook: the connection lets go of the request it has answered. */
export function forgetRequest(request: FastifyRequest, _reply: FastifyReply, done: () => void) {
  (request.raw.socket as HttpSocket | null)?.[connectionOf]?.forget(request.raw);
  done();
}

/**
 * The Fastify options that put this module under the app: the HTTP server (serverFactory) and
 * the handler of what Node's parser rejects (clientErrorHandler).
 */
export function httpServerOptions(options: HttpServerOptions) {
  const { logger } = options;

  const logRefusal = (refusal: Refusal, request?: IncomingMessage, code?: string) => {
    logger.info(
      {
        reqId: refusal.requestId,
        method: request?.method,
        url: request?.url,
        statusCode: refusal.statusCode,
        code,
      },
      'request refused',
    );
  };

  const serverFactory = (handler: FastifyServerFactoryHandler): Server => {
    const admit =
      (expectation: Expectation) => (request: IncomingMessage, response: ServerResponse) => {
        const socket = request.socket as HttpSocket;
        let connection = socket[connectionOf];
        if (connection === undefined) {
          connection = new Connection(socket);
          socket[connectionOf] = connection;
        }
        connection.latest = request;
        // Read after an answer that closes the connection: not served.
        if (connection.closer !== undefined || connection.ending || !socket.writable) return;
        const exchange: Exchange = { request, response, committed: false, resume: undefined };
        connection.admit(exchange);
        const problem =
          hostProblem(request) ?? (expectation === 'other' ? problems.expectation : undefined);
        if (problem !== undefined) {
          connection.closer = exchange;
          const refusal = { ...problem, requestId: requestIdFor(request) };
          logRefusal(refusal, request);
          refuseResponse(response, refusal);
          return;
        }
        // The client asked to close after this one (Connection: close, or HTTP/1.0).
        if (!response.shouldKeepAlive) connection.closer = exchange;
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
      const connection = socket[connectionOf];
      if (connection === undefined) refuseOnSocket(socket, refusal);
      else connection.refuse(refusal);
    });
    return server;
  };

  const clientErrorHandler = (error: Error & { code?: string }, socket: Socket): void => {
    if (!socket.writable || error.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    const connection = (socket as HttpSocket)[connectionOf];
    // One answer per connection: the parser reports every later chunk as an error too.
    if (connection?.refused) return;
    const latest = connection?.latest;
    const request = latest !== undefined && !latest.complete ? latest : undefined;
    const refusal = {
      ...clientErrorProblem(error.code),
      requestId: request === undefined ? randomUUID() : requestIdFor(request),
    };
    if (connection === undefined) {
      logRefusal(refusal, undefined, error.code);
      refuseOnSocket(socket, refusal);
      return;
    }
    if (request !== undefined) {
      const exchange = connection.exchangeOf(request);
      connection.refused = true;
      // Its answer has gone, or is on its way: nothing more to say on this connection.
      if (exchange === undefined) {
        socket.destroy();
        return;
      }
      if (exchange.response.headersSent) {
        exchange.response.once('close', () => socket.end());
        return;
      }
      // The request broke off before its answer: this is its answer, in its turn (and the
      // request log's line for it).
      connection.closer ??= exchange;
      refuseResponse(exchange.response, refusal);
      return;
    }
    logRefusal(refusal, request, error.code);
    connection.refuse(refusal);
  };

  return { serverFactory, clientErrorHandler };
}
