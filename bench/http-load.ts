import type { EventEmitter } from 'node:events';
import autocannon from 'autocannon';

/** What each request is: POST /plants with the next body, or GET of the next path. */
export type LoadRequests =
  /** Called once per request, so every plant is new. */
  | { nextBody: () => string }
  /** Called once per request, e.g. /plants/<a stored id>. */
  | { nextGetPath: () => string }
  /** Called once per request: any method, path and body. */
  | { nextRequest: () => MixedRequest };

/** One request of a mixed load. */
export interface MixedRequest {
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  body?: string;
}

export type HttpLoadOptions = LoadRequests & {
  /** e.g. http://127.0.0.1:41234 */
  baseUrl: string;
  connections: number;
  durationSeconds: number;
  token: string;
  signal: AbortSignal;
  /** Requests per second from all connections together; undefined: as fast as answered. */
  rate?: number | undefined;
};

export interface HttpLoadResult {
  durationSeconds: number;
  /** 2xx answers. */
  succeeded: number;
  /** 2xx answers per second. */
  throughput: number;
  /** Latency of the 2xx answers, ms; null when there were none. */
  p50Ms: number | null;
  p99Ms: number | null;
  /** Non-2xx answers plus socket errors and timeouts. */
  errors: number;
  non2xx: number;
  socketErrors: number;
  timeouts: number;
  statusCodes: Record<string, number>;
}

/** Latencies as they arrive, in a growable typed array (no per-sample object). */
class Samples {
  private values = new Float64Array(1 << 16);
  private length = 0;

  add(value: number): void {
    if (this.length === this.values.length) {
      const bigger = new Float64Array(this.values.length * 2);
      bigger.set(this.values);
      this.values = bigger;
    }
    this.values[this.length++] = value;
  }

  /** Nearest-rank percentiles, e.g. [0.5, 0.99]. */
  percentiles(quantiles: number[]): (number | null)[] {
    const sorted = this.values.subarray(0, this.length).sort();
    return quantiles.map((q) =>
      sorted.length === 0
        ? null
        : (sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ??
          null),
    );
  }
}

function requestOf(options: HttpLoadOptions): autocannon.Request {
  const authorization = `Bearer ${options.token}`;
  if ('nextBody' in options) {
    const { nextBody } = options;
    return {
      method: 'POST',
      path: '/plants',
      headers: { authorization, 'content-type': 'application/json' },
      setupRequest: (request) => ({ ...request, body: nextBody() }),
    };
  }
  if ('nextRequest' in options) {
    const { nextRequest } = options;
    return {
      method: 'GET',
      path: '/plants',
      headers: { authorization },
      setupRequest: (request) => {
        const { method, path, body } = nextRequest();
        // A JSON content type on a request without a body would be refused. Fresh objects:
        // autocannon writes the content length into the headers it is given.
        const headers: Record<string, string> =
          body === undefined
            ? { authorization }
            : { authorization, 'content-type': 'application/json' };
        return { ...request, method, path, headers, body };
      },
    };
  }
  const { nextGetPath } = options;
  return {
    method: 'GET',
    path: '/plants',
    headers: { authorization },
    setupRequest: (request) => ({ ...request, path: nextGetPath() }),
  };
}

/**
 * The requests of `options` from `connections` keep-alive connections, pipelining 1, for the
 * duration, at `rate` requests per second when given.
 *
 * Latencies are recorded here rather than taken from autocannon's summary: its histogram keeps
 * whole milliseconds, too coarse for a server that answers in a fraction of one.
 */
export function runHttpLoad(options: HttpLoadOptions): Promise<HttpLoadResult> {
  const latencies = new Samples();
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: options.baseUrl,
        connections: options.connections,
        pipelining: 1,
        duration: options.durationSeconds,
        timeout: 10,
        ...(options.rate !== undefined && { overallRate: options.rate }),
        requests: [requestOf(options)],
      },
      (error, result) => {
        options.signal.removeEventListener('abort', stop);
        if (error) {
          reject(error);
          return;
        }
        const [p50Ms = null, p99Ms = null] = latencies.percentiles([0.5, 0.99]);
        const statusCodes: Record<string, number> = {};
        for (const [code, { count }] of Object.entries(result.statusCodeStats ?? {})) {
          statusCodes[code] = count ?? 0;
        }
        resolve({
          durationSeconds: result.duration,
          succeeded: result['2xx'],
          throughput: result.duration > 0 ? result['2xx'] / result.duration : 0,
          p50Ms,
          p99Ms,
          errors: result.non2xx + result.errors,
          non2xx: result.non2xx,
          socketErrors: result.errors - result.timeouts,
          timeouts: result.timeouts,
          statusCodes,
        });
      },
    );
    // autocannon emits (client, statusCode, bytes, milliseconds); its typings omit the client.
    (instance as EventEmitter).on(
      'response',
      (_client: unknown, statusCode: number, _bytes: number, milliseconds: number) => {
        if (statusCode >= 200 && statusCode < 300) latencies.add(milliseconds);
      },
    );
    const stop = () => instance.stop();
    if (options.signal.aborted) stop();
    else options.signal.addEventListener('abort', stop, { once: true });
  });
}
