import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import type { Metrics } from './metrics.js';

/**
 * The URL with the value of any `access_token` query parameter redacted: the service does not
 * accept tokens there (RFC 6750 §2.3 advises against it), but one a client sent is not logged.
 */
function withoutAccessToken(url: string): string {
  return url.replace(/([?&]access_token=)[^&#]*/g, '$1[redacted]');
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
      url: request.url.includes('access_token=') ? withoutAccessToken(request.url) : request.url,
      route,
      statusCode: reply.statusCode,
      durationMs,
    };
    if (error) reply.log.error({ ...line, err: error }, 'request failed while responding');
    else reply.log.info(line, 'request completed');
  }
}
