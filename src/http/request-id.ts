import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

// At most 128 visible ASCII characters: safe to echo in a header and to write to a log.
const saneRequestId = /^[\x21-\x7e]{1,128}$/;

const generatedId = Symbol('generated request id');

/**
 * The client's x-request-id when it is sane, otherwise a new UUID: the same one however often it
 * is asked for, so that an answer given below the router and the log line agree.
 */
export function requestIdFor(request: IncomingMessage & { [generatedId]?: string }): string {
  const incoming = request.headers['x-request-id'];
  if (typeof incoming === 'string' && saneRequestId.test(incoming)) return incoming;
  request[generatedId] ??= randomUUID();
  return request[generatedId];
}
