/** One statement sent to PostgreSQL, as a trace shows it. */
export interface Statement {
  operation: 'SELECT' | 'INSERT' | 'DELETE';
  /** The table. */
  collection: string;
  /** Rows one statement writes or ids it reads for many callers (a coalesced batch). */
  batchSize?: number;
}

/**
 * What the database code asks of tracing, when it is on. A queued caller's trace context is
 * captured when it queues, so that the statement that serves it later, in a turn of the event
 * loop of its own, is linked to every caller it served.
 */
export interface DatabaseTracing {
  /** The trace context of the code running now (opaque to the caller). */
  capture(): unknown;
  /** The same as a W3C traceparent, for a record that outlives this process; undefined if none. */
  traceparent(): string | undefined;
  /** Runs `work` on behalf of the callers whose contexts were captured. */
  forCallers<T>(callers: readonly unknown[], work: () => Promise<T>): Promise<T>;
  /** Runs one statement in a span of its own. */
  statement<T>(statement: Statement, run: () => Promise<T>): Promise<T>;
}
