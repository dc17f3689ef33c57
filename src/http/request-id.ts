import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

// At most 128 visible ASCII characters: safe to echo in a header and to write to a log.
const saneRequestId = /^[\x21-\x7e]{1,128}$/;

/** The client's x-request-id when it is sane, otherwise a new UUID. */
export function requestIdFor(request: IncomingMessage): string {
  const incoming = request.headers['x-request-id'];
  return typeof incoming === 'string' && saneRequestId.test(incoming) ? incoming : randomUUID();
}
