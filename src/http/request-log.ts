import Fastify, { type FastifyBaseLogger, type FastifyReply, type FastifyRequest } from 'fastify';
import { type InfoLine, infoLineOf, RequestLogger } from '../logger.js';
import type { Metrics } from './metrics.js';

/**
 * One log line per request, written when the response is finished, and the request counted in
 * the metrics when given (routes without a match count as one label, not one per URL).
 */
export class RequestLog extends Fastify.LogController {
  private readonly infoLine: InfoLine | undefined;

  /** `logger`: the app's logger; one made by createLogger gets its request lines written fast. */
  constructor(
    logger?: FastifyBaseLogger,
    private readonly metrics?: Metrics,
  ) {
    super();
    this.infoLine = logger && infoLineOf(logger);
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
    // The line below as pino writes it, but written directly: a request's logger that is still
    // a RequestLogger binds only the request id (tracing gives it a child with more bindings).
    if (!error && this.infoLine && reply.log instanceof RequestLogger) {
      // The request's level, which it may have changed, not the app's.
      if (!reply.log.isLevelEnabled('info')) return;
      const routeMember = route === undefined ? '' : `,"route":${JSON.stringify(route)}`;
      this.infoLine(
        `,"reqId":${JSON.stringify(request.id)},"method":${JSON.stringify(request.method)}` +
          `,"url":${JSON.stringify(request.url)}${routeMember}` +
          `,"statusCode":${reply.statusCode},"durationMs":${durationMs}`,
        'request completed',
      );
      return;
    }
    const line = {
      method: request.method,
      url: request.url,
      route,
      statusCode: reply.statusCode,
      durationMs,
    };
    if (error) reply.log.error({ ...line, err: error }, 'request failed while responding');
    else reply.log.info(line, 'request completed');
  }
}
