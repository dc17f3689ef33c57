import type { FastifyReply, FastifyRequest } from 'fastify';

// Answers of a JSON API are data: nothing may sniff, frame, cache or run them.
export const apiHeaders = {
  'x-content-type-options': 'nosniff',
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
};

// The interactive reference is a page with scripts: it sets its own CSP, and its assets cache.
const docsHeaders = {
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
};

/** Sets the security headers every answer carries; `docsPrefix` marks the HTML reference. */
export function setSecurityHeaders(
  request: FastifyRequest,
  reply: FastifyReply,
  docsPrefix: string,
) {
  reply.headers(request.url.startsWith(docsPrefix) ? docsHeaders : apiHeaders);
}
