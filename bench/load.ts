import type { EventEmitter } from 'node:events';
import autocannon from 'autocannon';

/** One request of a load: called once per request, so every create can carry a new id. */
export interface LoadRequest {
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  body?: string;
  /** Sent besides the bearer token, e.g. a Consistency-Token. */
  headers?: Record<string, string>;
}

export interface LoadOptions {
  baseUrl: string;
  token: string;
  connections: number;
  seconds: number;
  /** Requests per second from all connections together; undefined: as fast as answered. */
  rate: number | undefined;
  next: () => LoadRequest;
  signal: AbortSignal;
}

export interface LoadResult {
  /** 2xx answers, and per second. */
  succeeded: number;
  throughput: number;
  /** Latency of the 2xx answers, ms. */
  p50Ms: number | null;
  p99Ms: number | null;
  /** Other answers, socket errors and timeouts. */
  errors: number;
}

const percentile = (sorted: Float64Array, q: number) =>
  sorted.length === 0 ? null : (sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? null);

/**
 * autocannon from keep-alive connections, pipelining 1. Latencies are recorded here: its own
 * histogram keeps whole milliseconds, too coarse for answers in a fraction of one.
 */
export function runLoad(options: LoadOptions): Promise<LoadResult> {
  const latencies: number[] = [];
  const authorization = `Bearer ${options.token}`;
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: options.baseUrl,
        connections: options.connections,
        pipelining: 1,
        duration: options.seconds,
        timeout: 10,
        ...(options.rate !== undefined && { overallRate: options.rate }),
        requests: [
          {
            setupRequest: (request) => {
              const { method, path, body, headers: extra } = options.next();
              // Fresh headers each time: autocannon writes the content length into them.
              const headers: Record<string, string> =
                body === undefined
                  ? { authorization, ...extra }
                  : { authorization, 'content-type': 'application/json', ...extra };
              return { ...request, method, path, headers, body };
            },
          },
        ],
      },
      (error, result) => {
        options.signal.removeEventListener('abort', stop);
        if (error) return reject(error);
        const sorted = Float64Array.from(latencies).sort();
        resolve({
          succeeded: result['2xx'],
          throughput: result.duration > 0 ? result['2xx'] / result.duration : 0,
          p50Ms: percentile(sorted, 0.5),
          p99Ms: percentile(sorted, 0.99),
          errors: result.non2xx + result.errors,
        });
      },
    );
    // autocannon emits (client, statusCode, bytes, milliseconds); its typings omit the client.
    (instance as EventEmitter).on('response', (_client, status: number, _bytes, ms: number) => {
      if (status >= 200 && status < 300) latencies.push(ms);
    });
    const stop = () => instance.stop();
    if (options.signal.aborted) stop();
    else options.signal.addEventListener('abort', stop, { once: true });
  });
}
