/**
 * The slot of a delivery to a rate-limited endpoint. A claim (outbox.ts) takes the
 * endpoint's next free slots, 1/rateLimit s apart, and moves its paced_until past them under
 * the row's lock, so the slots of every replica's claims never overlap.
 */
export interface Pacing {
  /** performance.now() when its attempt may start, not before. */
  startAt: number;
  /** performance.now() when the endpoint's first slot after those of this claim begins. */
  nextAt: number;
  /** 1000 / rateLimit: the time between two slots, in ms. */
  spacingMs: number;
}

/** What a claim returns of a delivery's slot: nulls when its endpoint has no rate limit. */
export interface PacedColumns {
  /** When its slot begins, by the database's clock (ms since the epoch). */
  start_ms: number | null;
  /** When the endpoint's next free slot begins, by the database's clock. */
  next_ms: number | null;
  rate_limit: number | null;
  /** The database's clock as the statement ended. */
  ended_ms: number;
}

/**
 * Reads the database's clock on this process's (performance.now()): its time plus the least
 * difference seen, over the last minute or two, between when an answer was read here and when
 * its statement ended there. That difference is the clocks' offset plus the answer's way back,
 * and plus however long this process was too busy to read it: the least is the nearest to the
 * offset and never early, so one answer read late does not move the slots it carries (which
 * would bring them too close to the slots of the next claim, another replica's perhaps).
 */
export function createClockReading(windowMs = 60_000) {
  let since = Number.NEGATIVE_INFINITY;
  let least = Number.POSITIVE_INFINITY;
  let leastBefore = Number.POSITIVE_INFINITY;
  return {
    /** Learns from an answer read at `readAt` of a statement that ended at `endedMs`. */
    observe(readAt: number, endedMs: number): void {
      if (readAt - since >= windowMs) {
        since = readAt;
        leastBefore = least;
        least = Number.POSITIVE_INFINITY;
      }
      least = Math.min(least, performance.timeOrigin + readAt - endedMs);
    },
    /** performance.now() when the database's clock reads `ms`. */
    local: (ms: number) => ms + Math.min(least, leastBefore) - performance.timeOrigin,
  };
}

export type ClockReading = ReturnType<typeof createClockReading>;

/** A claimed row's slot, on this process's clock; undefined when its endpoint has no limit. */
export function pacingOf(row: PacedColumns, clock: ClockReading): Pacing | undefined {
  if (row.start_ms === null || row.next_ms === null || row.rate_limit === null) return undefined;
  return {
    startAt: clock.local(row.start_ms),
    nextAt: clock.local(row.next_ms),
    spacingMs: 1000 / row.rate_limit,
  };
}
