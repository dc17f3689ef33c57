import type { KeyObject } from 'node:crypto';
import type { Dispatcher } from 'undici';
import type { ClaimedDelivery } from './outbox.js';
import { signatures, webhookId } from './signature.js';

/** How one attempt ended. Only a 2xx answered within the time limit is a delivery. */
export type AttemptResult =
  | { kind: 'answered'; status: number; retryAfter: string | undefined }
  | { kind: 'timeout' }
  /** No answer: the connection was refused, reset, or the name did not resolve. */
  | { kind: 'unreachable'; code: string };

export interface AttemptOptions {
  /** A keep-alive connection pool to the delivery's origin. */
  client: Dispatcher;
  /** Path and query of the delivery's URL. */
  path: string;
  /** The keys that sign it: one, or after a rotation the new and the old. */
  keys: readonly KeyObject[];
  timeoutMs: number;
  /** Abandons the attempt (at shutdown). */
  signal?: AbortSignal;
}

/** At most this much of an answer is read; the rest is not waited for. */
const RESPONSE_READ_LIMIT = 4096;

const USER_AGENT = 'plant-store-webhooks/1.0.0';

function errorCode(error: unknown): string {
  for (let current = error, depth = 0; current && depth < 4; depth++) {
    const { code, cause } = current as { code?: unknown; cause?: unknown };
    if (typeof code === 'string') return code;
    current = cause;
  }
  return (error as Error)?.name ?? 'Error';
}

const timeoutCodes = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT']);

/**
 * Makes one attempt of a delivery: a POST of its body, signed for this attempt's timestamp,
 * whose status must arrive within the time limit. Redirects are not followed (a 3xx is an
 * answer like any other), and at most a few KiB of the answer are read. Never rejects.
 * Written against undici's dispatch interface rather than request(), which would make a
 * stream of every answer: deliveries are as many as creates.
 */
export function attemptDelivery(
  delivery: Pick<ClaimedDelivery, 'eventId' | 'body'>,
  { client, path, keys, timeoutMs, signal }: AttemptOptions,
): Promise<AttemptResult> {
  const id = webhookId(delivery.eventId);
  const timestamp = Math.floor(Date.now() / 1000);
  return new Promise<AttemptResult>((resolve) => {
    let controller: Dispatcher.DispatchController | undefined;
    let answered: AttemptResult | undefined;
    let read = 0;
    let settled = false;
    const settle = (result: AttemptResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', abandon);
      resolve(result);
    };
    const stop = (result: AttemptResult) => {
      settle(result);
      if (controller && !controller.aborted) controller.abort(new Error('attempt over'));
    };
    // A status that arrived in time counts, even if the rest of the answer does not.
    const expire = () => stop(answered ?? { kind: 'timeout' });
    const abandon = () => stop({ kind: 'timeout' });
    const timer = setTimeout(expire, timeoutMs);
    signal?.addEventListener('abort', abandon, { once: true });
    client.dispatch(
      {
        method: 'POST',
        path,
        headers: [
          'content-type',
          'application/json',
          'user-agent',
          USER_AGENT,
          'webhook-id',
          id,
          'webhook-timestamp',
          String(timestamp),
          'webhook-signature',
          signatures(keys, id, timestamp, delivery.body),
        ],
        body: delivery.body,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      },
      {
        onRequestStart(started) {
          controller = started;
          if (settled) started.abort(new Error('attempt over'));
        },
        onResponseStart(_controller, status, headers) {
          const retryAfter = headers['retry-after'];
          answered = {
            kind: 'answered',
            status,
            retryAfter: typeof retryAfter === 'string' ? retryAfter : undefined,
          };
        },
        onResponseData(_controller, chunk) {
          read += chunk.length;
          if (read > RESPONSE_READ_LIMIT && answered) stop(answered);
        },
        onResponseEnd() {
          settle(answered ?? { kind: 'unreachable', code: 'NO_ANSWER' });
        },
        onResponseError(_controller, error) {
          if (answered) return settle(answered);
          const code = errorCode(error);
          settle(timeoutCodes.has(code) ? { kind: 'timeout' } : { kind: 'unreachable', code });
        },
      },
    );
  });
}
