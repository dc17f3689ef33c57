// Node.js runs no idle-time garbage collection: once requests stop, V8 keeps the garbage of the
// busy spell and the pages it pooled until allocation starts again, so the resident memory stays
// at its peak. After a busy spell, one memory-reducing collection once the process has gone
// quiet gives them back. It needs `gc`, which the start flags expose (--expose-gc); without it
// (tests, a start without the flags) nothing runs.

/** How often the event loop's utilization is read. */
const INTERVAL_MS = 5000;
/** At or above this share of an interval spent running, the process is busy. */
const BUSY = 0.05;
/** Below it, quiet: a /metrics scrape or a webhook poll takes about a thousandth of an interval. */
const QUIET = 0.01;

/**
 * After an interval in which the process ran `utilization` of the time: whether it has been busy
 * since the last collection, and whether to collect now (the first quiet interval after that).
 */
export function afterInterval(
  busy: boolean,
  utilization: number,
): { busy: boolean; collect: boolean } {
  if (utilization >= BUSY) return { busy: true, collect: false };
  if (busy && utilization < QUIET) return { busy: false, collect: true };
  return { busy, collect: false };
}

/** Watches the event loop while the process lives; returns the function that stops it. */
export function collectWhenIdle(gc = globalThis.gc): () => void {
  if (gc === undefined) return () => {};
  let since = performance.eventLoopUtilization();
  let busy = false;
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const next = afterInterval(busy, performance.eventLoopUtilization(now, since).utilization);
    since = now;
    busy = next.busy;
    if (next.collect) gc({ type: 'major', execution: 'async', flavor: 'last-resort' });
  }, INTERVAL_MS);
  timer.unref();
  return () => clearInterval(timer);
}
