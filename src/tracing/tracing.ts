import type { FastifyInstance } from 'fastify';
import type { DatabaseTracing } from '../db/tracing.js';
import type { AttemptTracing } from '../webhooks/attempt.js';

/** OpenTelemetry tracing, as the service uses it when the environment asks for it. */
export interface Tracing extends DatabaseTracing, AttemptTracing {
  /**
   * A server span for every request the app answers, made the active context of its handler,
   * and the span's trace and span ids on the request's log lines. Call before routes exist.
   */
  traceRequests(app: FastifyInstance): void;
  /** Where spans are sent, for the start-up log. */
  readonly endpoint: string;
  /** Exports the spans still buffered, then stops. */
  shutdown(): Promise<void>;
}
