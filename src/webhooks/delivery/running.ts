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

/**
 * Runs `job` at each of the times (performance.now()) it is asked for: armed for the earliest,
 * it keeps the later ones and arms again for the next once it has run. Times already passed
 * when it runs are run together. With `granularityMs`, a time is moved to the next multiple of
 * it: the times of many retries, spread by their jitter, then run a job per step at most.
 */
export function createAlarm(job: () => void, granularityMs = 0) {
  /** The times asked for and not yet run, earliest first. */
  const times: number[] = [];
  let armedAt = Number.POSITIVE_INFINITY;
  let timer: NodeJS.Timeout | undefined;
  function arm(): void {
    const next = times[0] ?? Number.POSITIVE_INFINITY;
    if (next === armedAt) return;
    clearTimeout(timer);
    armedAt = next;
    if (next === Number.POSITIVE_INFINITY) return;
    timer = setTimeout(ring, Math.max(0, next - performance.now()));
    timer.unref();
  }
  function ring(): void {
    const until = Math.max(armedAt, performance.now());
    while ((times[0] ?? Number.POSITIVE_INFINITY) <= until) times.shift();
    armedAt = Number.POSITIVE_INFINITY;
    arm();
    job();
  }
  return {
    at(asked: number): void {
      const time = granularityMs > 0 ? Math.ceil(asked / granularityMs) * granularityMs : asked;
      let place = times.length;
      while (place > 0 && (times[place - 1] ?? 0) > time) place--;
      if (times[place - 1] !== time) times.splice(place, 0, time);
      arm();
    },
    clear(): void {
      times.length = 0;
      arm();
    },
    /** Some time is still to come. */
    pending: () => times.length > 0,
  };
}

export type Alarm = ReturnType<typeof createAlarm>;
