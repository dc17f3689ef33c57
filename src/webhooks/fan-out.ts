import type { FastifyBaseLogger } from 'fastify';
import type { ClaimedDelivery, Outbox } from './outbox.js';

export interface FanOutLoopOptions {
  /** Events one fan-out takes at most; when it takes that many, another follows at once. */
  limit: number;
  /**
   * A woken fan-out looks at events recorded after the last one taken, less this many: it does
   * not walk the index entries of the events already gone (until a vacuum), and still finds
   * events whose statements committed out of order. Anything older is the poll's.
   */
  margin: bigint;
  /** False once the dispatcher stops: no fan-out starts. */
  active: () => boolean;
  /** Takes the deliveries a fan-out wrote, born claimed by this process. */
  take: (deliveries: ClaimedDelivery[]) => void;
  logger: FastifyBaseLogger;
}

/** Runs fan-outs one statement at a time; one asked for meanwhile runs after it. */
export function createFanOutLoop(outbox: Outbox, options: FanOutLoopOptions) {
  let running: Promise<void> | undefined;
  /** A fan-out asked for while one ran: from where it looks. */
  let again: bigint | undefined;
  let lastTaken = 0n;

  /** Fans out the events above `after`; asked again meanwhile, from the lowest position asked. */
  function fanOut(after: bigint): void {
    if (!options.active()) return;
    if (running) {
      if (again === undefined || after < again) again = after;
      return;
    }
    running = outbox.fanOut(options.limit, after).then(
      ({ events, last, deliveries }) => {
        options.take(deliveries);
        if (last !== undefined && last > lastTaken) lastTaken = last;
        // More may wait right after the last one taken.
        if (events === options.limit && last !== undefined) fanOut(last);
      },
      (error) => {
        options.logger.warn({ err: error }, 'webhook events not fanned out');
      },
    );
    void running.finally(() => {
      running = undefined;
      const from = again;
      again = undefined;
      if (from !== undefined) fanOut(from);
    });
  }

  return {
    fanOut,
    /** Fans out what was recorded lately: for a process that has just recorded events. */
    recent: () => fanOut(lastTaken > options.margin ? lastTaken - options.margin : 0n),
    /** Resolves when the fan-out running now (if any) has handed over its deliveries. */
    settled: async () => {
      await running;
    },
  };
}
