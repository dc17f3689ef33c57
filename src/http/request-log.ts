import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import type { Metrics } from './metrics.js';

const accessToken = /([?&]access(?:_|%5f)token=)[^&#]*/gi;

/**
 * The URL as the log shows it: the value of any `access_token` query parameter (in any case,
 * its underscore percent-encoded or not) redacted. The service does not accept tokens there
 * (RFC 6750 §2.3 advises against it), but one a client sent must not reach the log.
 */
export function urlForLog(url: string | undefined): string | undefined {
  // Most URLs have no query string: they cost one indexOf.
  if (url === undefined || url.indexOf('?') === -1) return url;
  return url.replace(accessToken, '$1[redacted]');
}

/**
 * One log line per request, written when the response is finished, and the request counted in
 * the metrics when given (routes without a match count as one label, not one per URL).
 */
export class RequestLog extends Fastify.LogController {
  constructor(private readonly metrics?: Metrics) {
    super();
  }

  override incomingRequest(): void {}

  override routeNotFound(): void {}

  override requestCompleted(
    error: Error | null | undefined,
    request: FastifyRequest,
    reply: FastifyReply,
  ): void {
    const route = request.routeOptions.url;
    const elapsedMs = reply.elapsedTime;
    this.metrics?.observeRequest(
      request.method,
      route ?? 'unmatched',
      reply.statusCode,
      elapsedMs / 1000,
    );
    const durationMs = Math.round(elapsedMs * 100) / 100;
    const line = {
      method: request.method,
      url: urlForLog(request.url),
      route,
      statusCode: reply.statusCode,
      durationMs,
    };
    if (error) reply.log.error({ ...line, err: error }, 'request failed while responding');
    else reply.log.info(line, 'request completed');
  }
}
