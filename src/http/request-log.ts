import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';

/** One log line per request, written when the response is finished. */
export class RequestLog extends Fastify.LogController {
  override incomingRequest(): void {}

  override routeNotFound(): void {}

  override requestCompleted(
    error: Error | null | undefined,
    request: FastifyRequest,
    reply: FastifyReply,
  ): void {
    const line = {
      method: request.method,
      url: request.url,
      route: request.routeOptions.url,
      statusCode: reply.statusCode,
      durationMs: Math.round(reply.elapsedTime * 100) / 100,
    };
    if (error) reply.log.error({ ...line, err: error }, 'request failed while responding');
    else reply.log.info(line, 'request completed');
  }
}
