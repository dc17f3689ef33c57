/**
 * Runs `job` one at a time: asked while it runs, it runs once more after it ends (once, however
 * often it was asked meanwhile), so that no request is lost and no two runs overlap. `job` must
 * not reject.
 */
export function oneAtATime(job: () => Promise<void>) {
  let running: Promise<void> | undefined;
  let again = false;
  function run(): void {
    if (running) {
      again = true;
      return;
    }
    running = job().finally(() => {
      running = undefined;
      if (again) {
        again = false;
        run();
      }
    });
  }
  return {
    run,
    /** A run is under way. */
    busy: () => running !== undefined,
    /** Resolves when the run under way ends (at once when there is none). */
    ended: () => running ?? Promise.resolve(),
  };
}

export type OneAtATime = ReturnType<typeof oneAtATime>;

/** Runs `job` at the earliest of the times (performance.now()) it is asked for. */
export function createAlarm(job: () => void) {
  let armedAt = Number.POSITIVE_INFINITY;
  let timer: NodeJS.Timeout | undefined;
  return {
    at(time: number): void {
      if (time >= armedAt) return;
      clearTimeout(timer);
      armedAt = time;
      timer = setTimeout(
        () => {
          armedAt = Number.POSITIVE_INFINITY;
          job();
        },
        Math.max(0, time - performance.now()),
      );
      timer.unref();
    },
    clear(): void {
      clearTimeout(timer);
      armedAt = Number.POSITIVE_INFINITY;
    },
  };
}

export type Alarm = ReturnType<typeof createAlarm>;
