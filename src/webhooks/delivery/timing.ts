/**
 * Every timing of the delivery engine, each with its reason. The defaults are production's;
 * tests hand shorter ones to createDispatcher (and to createService) rather than wait on them.
 */
export interface EngineTiming {
  /** A claim outlives the attempt's time limit by this much, so a live holder always finishes first. */
  leaseMarginMs: number;
  /** An attempt must start this long before its claim could no longer cover its time limit. */
  startMarginMs: number;
  /**
   * An attempt starts within this long of its claim, or is given back: so an attempt that starts
   * this long after a change to its endpoint committed was claimed after it, and uses the
   * endpoint as it now is, on every replica (the claim reads the row).
   */
  startWindowMs: number;
  /** How often a process looks for events and due deliveries that nobody announced to it. */
  pollIntervalMs: number;
  /** How often old attempts and failed deliveries are swept away (WEBHOOK_LOG_RETENTION_S). */
  sweepIntervalMs: number;
  /** An endpoint's lane with nothing to do for this long is closed (it is made again if needed). */
  idleLaneMs: number;
  /**
   * A connection to a receiver is kept open this long unused (unless the receiver says less):
   * past the poll and a quiet spell, since a new handshake costs more than a delivery.
   */
  connectionIdleMs: number;
  /** A WEBHOOK_URLS endpoint receives this long after the last replica declaring it stopped. */
  declaredForMs: number;
  /** How often a running process declares its WEBHOOK_URLS again: well within declaredForMs. */
  declareAgainMs: number;
  /**
   * Outcomes are written together, at most this often: one DELETE for hundreds of deliveries
   * costs the database about what one costs, and a claim lasts far longer than the wait.
   */
  recordIntervalMs: number;
  /**
   * A lane wakes for a retry this long after it falls due by this process's clock: a timer may
   * fire a little early, and the row is due by the database's.
   */
  wakeMarginMs: number;
}

export const ENGINE_TIMING: EngineTiming = {
  leaseMarginMs: 5000,
  startMarginMs: 1000,
  startWindowMs: 1000,
  pollIntervalMs: 1000,
  sweepIntervalMs: 60_000,
  idleLaneMs: 60_000,
  connectionIdleMs: 60_000,
  declaredForMs: 60_000,
  declareAgainMs: 10_000,
  recordIntervalMs: 100,
  wakeMarginMs: 5,
};

/** The claim of a delivery lasts this long: the time limit of its attempt and a margin. */
export const leaseMsFor = (timeoutMs: number, timing: EngineTiming = ENGINE_TIMING) =>
  timeoutMs + timing.leaseMarginMs;

/**
 * A claim takes the slots of a rate-limited endpoint that begin within this long of it: a
 * quarter less than the start window, so that the last one still starts in time once the
 * claim has answered.
 */
export const paceWindowMsFor = (startWindowMs: number) => startWindowMs * 0.75;
