import { type IncomingMessage, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ErrorBody } from './errors.js';
import { apiHeaders } from './security-headers.js';

/**
 * The answers given before a request reaches a route (see connections.ts): a missing, repeated
 * or malformed Host, an unmet Expect, CONNECT, bytes that are not HTTP, a request that does not
 * arrive in time. They have the Error body, the request id and the security headers of every
 * other answer, and close the connection.
 */

/** An answer given before a request reaches a route. */
export interface Refusal {
  statusCode: number;
  message: string;
  requestId: string;
  headers?: Readonly<Record<string, string>>;
}

export type Problem = Omit<Refusal, 'requestId'>;

// A client that never closes its side of a refused connection loses it after this long.
const LINGER_MS = 2000;

// uri-host [ ":" port ] (RFC 9110 §7.2, RFC 3986 §3.2.2); an empty host is allowed.
const validHost =
  /^(?:\[[0-9A-Za-z._~!$&'()*+,;=:%-]+\]|(?:[0-9A-Za-z._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*)(?::[0-9]*)?$/;

export const problems = {
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
  targetTooLong: { statusCode: 414, message: 'the request target (the URL) is too long' },
  headersTooLarge: { statusCode: 431, message: 'the request headers are too large' },
  chunkExtensionsTooLarge: { statusCode: 413, message: 'the chunk extensions are too large' },
  timeout: { statusCode: 408, message: 'the request took too long to arrive' },
  notHttp: { statusCode: 400, message: 'the request is not valid HTTP' },
} satisfies Record<string, Problem>;

// A request line still unfinished: a method, a space, and no line break yet.
const unfinishedRequestLine = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^\r\n]*$/;

/**
 * The answer to what Node's HTTP parser reported (a parse error, a timeout, an overflow), given
 * the bytes it was parsing. Node counts the request line and the headers against one limit;
 * when the overflow came before the request line ended, the target is what is too long (414,
 * RFC 9110 §15.5.15), otherwise the header section (431).
 */
export function clientErrorProblem(code: string | undefined, rawPacket?: Buffer): Problem {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return rawPacket !== undefined && unfinishedRequestLine.test(rawPacket.toString('latin1'))
        ? problems.targetTooLong
        : problems.headersTooLarge;
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return problems.chunkExtensionsTooLarge;
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return problems.timeout;
    default:
      return problems.notHttp;
  }
}

export function hostProblem(request: IncomingMessage): Problem | undefined {
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
export function writeRefusal(response: ServerResponse, refusal: Refusal): void {
  const { headers, body } = refusalParts(refusal);
  response.writeHead(refusal.statusCode, headers);
  response.end(body);
}

/** Writes the answer on the socket itself, where no response exists, and closes. */
export function refuseOnSocket(socket: Duplex, refusal: Refusal): void {
  const { headers, body } = refusalParts(refusal);
  let head = `HTTP/1.1 ${refusal.statusCode} ${STATUS_CODES[refusal.statusCode]}\r\n`;
  for (const [name, value] of Object.entries(headers)) head += `${name}: ${value}\r\n`;
  head += `date: ${new Date().toUTCString()}\r\n\r\n`;
  socket.end(head + body);
  setTimeout(() => socket.destroy(), LINGER_MS).unref();
}
