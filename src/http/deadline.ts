import { DatabaseUnavailableError } from '../db/errors.js';

interface Waiting {
  /** performance.now() past which the request gets its 503. */
  at: number;
  reject: (error: Error) => void;
  settled: boolean;
}

/**
 * What bounds a request's wait for the store: `answered(work)` settles as `work` does, or
 * rejects with DatabaseUnavailableError (a 503) once `ms` have passed. Every request waits the
 * same time, so they expire in the order they began: one timer serves them all, set for the
 * oldest one still waiting, rather than a timer and a race for each request.
 */
export function answerWithin(ms: number): <T>(work: Promise<T>) => Promise<T> {
  let waiting: Waiting[] = [];
  let next = 0;
  let timer: NodeJS.Timeout | undefined;

  function expire(): void {
    timer = undefined;
    const now = performance.now();
    // One failure for the requests that expire together, so that the log has one line for them.
    let late: DatabaseUnavailableError | undefined;
    for (; next < waiting.length; next++) {
      const entry = waiting[next] as Waiting;
      if (entry.settled) continue;
      if (entry.at > now) break;
      entry.settled = true;
      late ??= new DatabaseUnavailableError(`no answer within ${ms} ms`);
      entry.reject(late);
    }
    waiting = waiting.slice(next);
    next = 0;
    arm();
  }

  function arm(): void {
    const oldest = waiting[next];
    if (timer !== undefined || oldest === undefined) return;
    timer = setTimeout(expire, Math.max(0, oldest.at - performance.now()));
    timer.unref();
  }

  return <T>(work: Promise<T>) =>
    new Promise<T>((resolve, reject) => {
      const entry: Waiting = { at: performance.now() + ms, reject, settled: false };
      // The answered ones at the front go, so that the list holds about the requests in flight.
      while ((waiting[next] as Waiting | undefined)?.settled) next++;
      if (next > 1024 && next * 2 > waiting.length) {
        waiting = waiting.slice(next);
        next = 0;
      }
      waiting.push(entry);
      arm();
      work.then(
        (value) => {
          entry.settled = true;
          resolve(value);
        },
        (error: unknown) => {
          entry.settled = true;
          reject(error);
        },
      );
    });
}
