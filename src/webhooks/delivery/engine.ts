import { setMaxListeners } from 'node:events';
import type { FastifyBaseLogger } from 'fastify';
import type { Database } from '../../db/database.js';
import { type EventTypeName, exampleBody } from '../catalog/event-types.js';
import { plantIdOf } from '../catalog/plant-id.js';
import type { SecuritySettings } from '../security/settings.js';
import { webhookId } from '../tables/ids.js';
import { attemptTrigger } from '../tables/triggers.js';
import { createDeclarations, type Declarations } from './declare.js';
import { createLanes, type Lane } from './lanes.js';
import type { WebhookMetrics } from './metrics.js';
import { type ClaimedDelivery, createOutbox, type Outbox } from './outbox.js';
import {
  createOutcomeStatements,
  type DisabledEndpoint,
  GONE_REASON,
  type Outcome,
} from './outcomes.js';
import { createRecorder } from './recorder.js';
import { createReplays, type Replays } from './replays.js';
import { oneAtATime } from './running.js';
import { nextStep } from './schedule.js';
import { type AttemptResult, describeFailure, sendOn } from './sending.js';
import type { DeliverySettings } from './settings.js';
import { ENGINE_TIMING, type EngineTiming, leaseMsFor, paceWindowMsFor } from './timing.js';
import { createUpkeep, type Upkeep } from './upkeep.js';

/** Events one fan-out takes at most; when it takes that many, another follows at once. */
const FAN_OUT_LIMIT = 1000;
/**
 * A woken fan-out looks at events recorded after the last one taken, less this many: it does
 * not walk the index entries of the events already gone (until a vacuum), and still finds
 * events whose statements committed out of order. Anything older is the poll's.
 */
const FAN_OUT_MARGIN = 10_000n;
/** Deliveries that may wait in one lane's queue; beyond, new ones are released at once. */
const QUEUE_MAX = 10_000;
/**
 * A paced delivery starts at most half its endpoint's spacing after its slot (or this long, at
 * high rates, where timers are coarser than the spacing), else it is given back: a later start
 * would come too close to the next slot, which another replica may hold.
 */
const SLOT_LATE_MIN_MS = 20;

export type Dispatcher = ReturnType<typeof createDispatcher>;

/** An attempt that ended, for its outcome. */
interface Attempted {
  lane: Lane;
  delivery: ClaimedDelivery;
  result: AttemptResult;
  /** Date.now() when it started. */
  startedAt: number;
  durationMs: number;
}

/** What a test of an endpoint answers: how its one attempt ended. */
export interface TestOutcome {
  /** Its `webhook-id`, `msg_test_...`. */
  eventId: string;
  status: 'succeeded' | 'failed';
  responseStatus?: number;
  error?: string;
  durationMs: number;
}

export interface DispatcherOptions {
  db: Database;
  config: DeliverySettings & SecuritySettings;
  logger: FastifyBaseLogger;
  metrics?: WebhookMetrics;
  /** The statements; made from `db` unless given. */
  outbox?: Outbox;
  declarations?: Declarations;
  upkeep?: Upkeep;
  replays?: Replays;
  /** Timings other than production's (tests). */
  timing?: Partial<EngineTiming> | undefined;
}

/**
 * Delivers the newPlant webhook to every endpoint, configured or made through the API. A fan-out
 * takes the events that writers recorded, writes one delivery per endpoint, born claimed by this process, and
 * attempts them at once; it runs when this process is woken after recording events and at every
 * poll, so events that a dead process recorded are fanned out by any other. A poll also claims
 * whatever deliveries are due (retries, those whose holder died). Both take rows with FOR UPDATE
 * SKIP LOCKED, so processes share the work and no delivery has two attempts at once. At most
 * `concurrency` attempts per subscriber are in flight, over keep-alive connections; a slow or
 * dead receiver holds only its own lane's slots.
 */
export function createDispatcher(options: DispatcherOptions) {
  const { config, logger, metrics } = options;
  const timing = { ...ENGINE_TIMING, ...options.timing };
  const leaseMs = leaseMsFor(config.timeoutMs, timing);
  const outbox = options.outbox ?? createOutbox(options.db, { leaseMs });
  const declarations = options.declarations ?? createDeclarations(options.db);
  const upkeep = options.upkeep ?? createUpkeep(options.db, config);
  const replays = options.replays ?? createReplays(options.db, config);
  const recorder = createRecorder(
    createOutcomeStatements(options.db, config),
    logger,
    recorded,
    timing.recordIntervalMs,
  );
  const { record } = recorder;
  const makeLanes = createLanes(
    { ...config, connectionIdleMs: timing.connectionIdleMs },
    { claim: claimDue, pump },
  );
  let running = false;
  let stopping = false;
  // Aborts the attempts still in flight when shutdown can wait no longer.
  const abandon = new AbortController();
  // Every attempt in flight listens to it: as many as the lanes' concurrency allows.
  setMaxListeners(0, abandon.signal);
  let pollTimer: NodeJS.Timeout | undefined;
  let lastSweep = performance.now();

  const lanes = new Map<string, Lane>();

  /**
   * A retry this process scheduled, and its delay: its lane claims it when it falls due, counted
   * from when its outcome was written (a claim before then would not find it due). Others find
   * it by polling; so does this process when the outcome could not be written.
   */
  const retryWakes = new WeakMap<Outcome, { lane: Lane; delayMs: number }>();
  /**
   * A delivery given back while running (e.g. its start window passed before its claim was
   * answered), and its endpoint: claimed again once that is written; else only a poll would.
   */
  const givenBack = new WeakMap<Outcome, string>();

  /** The lane of a delivery, brought up to date with what its claim read of its endpoint. */
  function laneOf(delivery: ClaimedDelivery): Lane {
    let lane = lanes.get(delivery.endpoint.key);
    if (lane === undefined) {
      lane = makeLanes.lane(delivery.endpoint);
      lanes.set(delivery.endpoint.key, lane);
    } else makeLanes.retarget(lane, delivery.endpoint);
    return lane;
  }

  /** How long after its claim an attempt may start (see startBy). */
  const startWindowMs = Math.min(
    timing.startWindowMs,
    leaseMs - config.timeoutMs - timing.startMarginMs,
  );
  /**
   * The latest moment an attempt of `delivery` may start: within its claim, and within
   * timing.startWindowMs of it, so that no attempt uses what an endpoint was.
   */
  const startBy = (delivery: ClaimedDelivery) => delivery.claimedAt + startWindowMs;
  /** A claim takes the slots of a rate-limited endpoint that begin within this long. */
  const paceWindowMs = paceWindowMsFor(startWindowMs);
  /** A paced delivery that can no longer start close enough to its slot. */
  const missedSlot = ({ pacing }: ClaimedDelivery, now: number) =>
    pacing !== undefined && now - pacing.startAt > Math.max(pacing.spacingMs / 2, SLOT_LATE_MIN_MS);

  /** When an endpoint was last changed here (performance.now()), for a lease after. */
  const changedAt = new Map<string, number>();
  /** Claimed before a change here, it may have read the endpoint as it was: given back. */
  const predatesChange = (delivery: ClaimedDelivery) =>
    delivery.claimedAt <= (changedAt.get(delivery.endpoint.key) ?? Number.NEGATIVE_INFINITY);

  function release(delivery: ClaimedDelivery): void {
    const released = { kind: 'released' as const, id: delivery.id, claim: delivery.claim };
    if (!stopping) givenBack.set(released, delivery.endpoint.key);
    record(released);
  }

  function pump(lane: Lane): void {
    while (lane.inFlight.size < config.concurrency && lane.queue.length > 0) {
      const delivery = lane.queue[0] as ClaimedDelivery;
      const now = performance.now();
      // A paced delivery waits in its place for its slot (the queue is in slot order).
      const startAt = delivery.pacing?.startAt ?? now;
      if (!stopping && startAt > now) {
        lane.pace.at(startAt);
        break;
      }
      lane.queue.shift();
      if (stopping || now > startBy(delivery) || missedSlot(delivery, now)) release(delivery);
      else void attempt(lane, delivery, settle);
    }
    if (lane.queue.length === 0 && lane.backlog) lane.claims.run();
  }

  /** Puts a delivery in its lane's queue: a paced one in slot order, after those not paced. */
  function place(lane: Lane, delivery: ClaimedDelivery): void {
    const startAt = (queued: ClaimedDelivery | undefined) =>
      queued?.pacing?.startAt ?? Number.NEGATIVE_INFINITY;
    let at = lane.queue.length;
    while (at > 0 && startAt(lane.queue[at - 1]) > startAt(delivery)) at--;
    lane.queue.splice(at, 0, delivery);
  }

  /**
   * A lane holding paced deliveries claims again when its last slot is reached (or, at a rate
   * below one slot per pace window, when the next free slot comes within the window): so one
   * process alone keeps to the rate limit, however many others share the endpoint.
   */
  function claimAfterSlots(lane: Lane): void {
    const last = lane.queue.at(-1)?.pacing;
    if (last === undefined) return;
    const at = Math.max(last.startAt, last.nextAt - paceWindowMs);
    if (at > performance.now()) lane.wake.at(at);
  }

  /** A test's outcome is written by its own request; any other's claim is given back at stop. */
  const givenBackAtStop = (delivery: ClaimedDelivery) => delivery.trigger !== 'test';

  /**
   * Makes one attempt of `delivery` on its lane, counted in flight meanwhile, and has `settle`
   * write its outcome; then the lane starts what it may. Undefined when shutdown abandoned it
   * and gave its claim back.
   */
  async function attempt<T>(
    lane: Lane,
    delivery: ClaimedDelivery,
    settle: (attempted: Attempted) => T | Promise<T>,
  ): Promise<T | undefined> {
    lane.inFlight.add(delivery);
    lane.lastBusy = performance.now();
    const startedAt = Date.now();
    const started = performance.now();
    const result = await sendOn(lane, delivery, config.timeoutMs, abandon.signal);
    const durationMs = performance.now() - started;
    if (abandon.signal.aborted && givenBackAtStop(delivery)) return undefined;
    lane.inFlight.delete(delivery);
    metrics?.observeAttempt(result);
    const settled = await settle({ lane, delivery, result, startedAt, durationMs });
    pump(lane);
    return settled;
  }

  /** What the attempt log keeps of an attempt, and what its endpoint's health learns. */
  function attemptRecord(
    { lane, delivery, result, startedAt, durationMs }: Attempted,
    failure: { status?: number; error: string } | undefined,
    step?: { kind: string },
  ) {
    return {
      endpoint: lane.endpoint,
      eventId: delivery.eventId,
      // A test's example names no stored plant.
      plantId: delivery.trigger === 'test' ? undefined : plantIdOf(delivery.body),
      trigger: attemptTrigger(delivery.trigger, delivery.attempt),
      eventType: delivery.eventType,
      body: delivery.body,
      succeeded: failure === undefined,
      status: result.kind === 'answered' ? result.status : undefined,
      error: failure?.status === undefined ? failure?.error : undefined,
      durationMs,
      attemptedAtMs: startedAt,
      gone: step?.kind === 'gone',
    };
  }

  /**
   * The outcome of a test delivery, attempted at once on its endpoint's lane beside what the lane
   * has in flight (neither queued nor given back), written before answering: the attempt logged,
   * the row deleted whatever the answer. It is never attempted again, and no 410 from it
   * disables the endpoint.
   */
  async function settleTest(attempted: Attempted): Promise<TestOutcome> {
    const { delivery, result, durationMs } = attempted;
    const answered = result.kind === 'answered' && result.status >= 200 && result.status <= 299;
    const failure = answered ? undefined : describeFailure(result);
    const record = attemptRecord(attempted, failure);
    recorder.record({ kind: 'tested', id: delivery.id, record });
    await recorder.flush();
    return {
      eventId: webhookId(delivery.eventId, delivery.trigger),
      status: answered ? 'succeeded' : 'failed',
      ...(record.status !== undefined && { responseStatus: record.status }),
      ...(record.error !== undefined && { error: record.error }),
      durationMs: Math.round(durationMs),
    };
  }

  /** The outcome of a delivery's attempt: delivered, retried later, or given up. */
  function settle(attempted: Attempted): void {
    const { lane, delivery, result } = attempted;
    const step = nextStep(result, delivery.attempt, config.retrySchedule);
    const failure = step.kind === 'delivered' ? undefined : describeFailure(result);
    const logged = { record: attemptRecord(attempted, failure, step) };
    if (failure === undefined) {
      record({ kind: 'delivered', id: delivery.id, ...logged });
      metrics?.observeDelivery('delivered', (Date.now() - delivery.createdAtMs) / 1000);
      return;
    }
    const context = {
      webhookId: webhookId(delivery.eventId, delivery.trigger),
      deliveryId: delivery.id,
      receiver: lane.receiver,
      endpoint: lane.endpoint,
      attempt: delivery.attempt,
      ...(failure.status === undefined ? { error: failure.error } : { status: failure.status }),
    };
    const base = { id: delivery.id, claim: delivery.claim, ...failure, ...logged };
    if (step.kind === 'retry') {
      logger.warn({ ...context, retryInMs: step.delayMs }, 'webhook attempt failed; will retry');
      const retry = { kind: 'retry' as const, ...base, delayMs: step.delayMs };
      retryWakes.set(retry, { lane, delayMs: step.delayMs });
      record(retry);
      return;
    }
    record({ kind: 'failed', ...base });
    metrics?.observeDelivery(step.kind === 'gone' ? 'gone' : 'failed');
    if (step.kind === 'gone') {
      logger.warn(context, 'webhook receiver answered 410 Gone: delivery ended');
    } else {
      logger.error(context, 'webhook delivery failed after its last attempt');
    }
  }

  /**
   * A batch of outcomes is written. Giving a delivery up or disabling an endpoint may have
   * recorded an event (deliveryExhausted, endpointDisabled): it is fanned out now, not at the
   * next poll; so are the retries and the deliveries given back claimed when due.
   */
  function recorded(batch: readonly Outcome[], disabled: DisabledEndpoint[]): void {
    const released = new Set<string>();
    for (const outcome of batch) {
      // Written, the retry is due `delayMs` after its statement began: before now.
      const wake = retryWakes.get(outcome);
      if (wake && !stopping) {
        wake.lane.wake.at(performance.now() + wake.delayMs + timing.wakeMarginMs);
      }
      const key = givenBack.get(outcome);
      if (key !== undefined) released.add(key);
    }
    // Claimed again a start window later, not at once: a database that answers claims later than
    // that would otherwise be asked for them again as fast as it answers.
    for (const key of released) {
      const lane = lanes.get(key);
      if (lane) lane.wake.at(performance.now() + startWindowMs);
      else claimFor(key);
    }
    if (disabled.length > 0) disabledByReceivers(disabled);
    if (disabled.length > 0 || batch.some((outcome) => outcome.kind === 'failed')) wakeFanOut();
  }

  /** Endpoints that a 410 or a long run of failures disabled: nothing more is sent to them. */
  function disabledByReceivers(endpoints: DisabledEndpoint[]): void {
    for (const { key, reason } of endpoints) {
      const gone = reason === GONE_REASON;
      metrics?.observeEndpointDisabled(gone ? 'gone' : 'failing');
      logger.warn({ endpoint: key, reason }, `webhook endpoint disabled: ${reason}`);
      const lane = lanes.get(key);
      if (lane) for (const delivery of lane.queue.splice(0)) release(delivery);
    }
  }

  /** Claims due deliveries for the lane's free slots (its claims run one at a time). */
  async function claimDue(lane: Lane): Promise<void> {
    if (!running || stopping) return;
    const free = config.concurrency - lane.inFlight.size - lane.queue.length;
    if (free <= 0) {
      // What was due stays due: claimed when an attempt ends and frees a slot.
      lane.backlog = true;
      return;
    }
    try {
      const deliveries = await outbox.claim(free, lane.endpoint, [], paceWindowMs);
      lane.backlog = deliveries.length === free;
      enqueue(deliveries);
    } catch (error) {
      lane.backlog = false;
      logger.warn({ err: error, receiver: lane.receiver }, 'webhook deliveries not claimed');
    }
    pump(lane);
    claimAfterSlots(lane);
  }

  /** One claim for the due deliveries of every endpoint whose lane here has room. */
  const endpointClaims = oneAtATime(async () => {
    if (!running || stopping) return;
    const busy: string[] = [];
    for (const lane of lanes.values()) {
      const full = lane.inFlight.size + lane.queue.length >= config.concurrency;
      // A full lane claims its own once a slot frees.
      if (full) lane.backlog = true;
      if (full || lane.claims.busy()) busy.push(lane.endpoint);
    }
    try {
      enqueue(await outbox.claim(config.concurrency, undefined, busy, paceWindowMs));
    } catch (error) {
      logger.warn({ err: error }, 'webhook deliveries of endpoints not claimed');
    }
  });

  /** Claims the due deliveries of endpoint `key`: on its lane, or with every endpoint's. */
  function claimFor(key: string): void {
    const lane = lanes.get(key);
    if (lane) lane.claims.run();
    else endpointClaims.run();
  }

  /** Hands claimed deliveries to their lanes; a full lane gives them back. */
  function enqueue(deliveries: ClaimedDelivery[]): void {
    const touched = new Set<Lane>();
    for (const delivery of deliveries) {
      const lane = laneOf(delivery);
      if (stopping || lane.queue.length >= QUEUE_MAX || predatesChange(delivery)) {
        release(delivery);
      } else {
        place(lane, delivery);
        lane.lastBusy = performance.now();
        touched.add(lane);
      }
    }
    for (const lane of touched) {
      claimAfterSlots(lane);
      pump(lane);
    }
  }

  /** Where the next fan-out looks from: the lowest position asked for since the last began. */
  let fanOutFrom: bigint | undefined;
  let lastTaken = 0n;
  const wakeFanOut = () => fanOut(lastTaken > FAN_OUT_MARGIN ? lastTaken - FAN_OUT_MARGIN : 0n);

  /** Fans out the events above `fanOutFrom`, one statement at a time. */
  const fanOuts = oneAtATime(async () => {
    const after = fanOutFrom ?? 0n;
    fanOutFrom = undefined;
    if (!running || stopping) return;
    try {
      const { events, last, deliveries, paced } = await outbox.fanOut(FAN_OUT_LIMIT, after);
      enqueue(deliveries);
      // A rate-limited endpoint's deliveries were left due: claimed now, each with its slot.
      for (const key of paced) claimFor(key);
      if (last !== undefined && last > lastTaken) lastTaken = last;
      // More may wait right after the last one taken.
      if (events === FAN_OUT_LIMIT && last !== undefined) fanOut(last);
    } catch (error) {
      logger.warn({ err: error }, 'webhook events not fanned out');
    }
  });

  /** Fans out the events above `after`; asked while one runs, after it. */
  function fanOut(after: bigint): void {
    if (fanOutFrom === undefined || after < fanOutFrom) fanOutFrom = after;
    fanOuts.run();
  }

  /** Closes the lanes of endpoints that had nothing to do for a while (or were deleted). */
  function closeIdleLanes(now: number): void {
    for (const [key, lane] of lanes) {
      // A lane waiting to claim a retry stays: closed, the retry would wait for the poll.
      const idle =
        lane.queue.length === 0 &&
        lane.inFlight.size === 0 &&
        !lane.claims.busy() &&
        !lane.wake.pending();
      if (idle && now - lane.lastBusy > timing.idleLaneMs) {
        lane.wake.clear();
        lane.pace.clear();
        lanes.delete(key);
        void lane.pool.close().catch(() => {});
      }
    }
  }

  let lastDeclared = performance.now();
  /** Keeps the WEBHOOK_URLS endpoints receiving while this process runs. */
  function declareAgain(now: number): void {
    if (now - lastDeclared < timing.declareAgainMs) return;
    lastDeclared = now;
    declarations.declare(config.urls, undefined, timing.declaredForMs).catch((error) => {
      logger.warn({ err: error }, 'WEBHOOK_URLS endpoints not declared again');
    });
  }

  function sweep(now: number): void {
    if (now - lastSweep < timing.sweepIntervalMs) return;
    lastSweep = now;
    upkeep.sweep().catch((error) => {
      logger.warn({ err: error }, 'old webhook attempts and failed deliveries not swept');
    });
  }

  function poll(): void {
    const now = performance.now();
    for (const [key, at] of changedAt) if (now - at > leaseMs) changedAt.delete(key);
    fanOut(0n);
    endpointClaims.run();
    declareAgain(now);
    closeIdleLanes(now);
    sweep(now);
    pollTimer = setTimeout(poll, timing.pollIntervalMs * (0.9 + 0.2 * Math.random()));
    pollTimer.unref();
  }

  const count = (of: (lane: Lane) => number) =>
    [...lanes.values()].reduce((n, lane) => n + of(lane), 0);
  const inFlight = () => count((lane) => lane.inFlight.size);

  return {
    /**
     * Fans out the events recorded so far and attempts their deliveries at once: for a process
     * that has just recorded some. Nothing depends on it: the poll fans out every event too.
     */
    wake: wakeFanOut,
    /**
     * An endpoint's change committed here: every delivery of it claimed before (waiting, or in a
     * claim still running) is given back and claimed again as it now is, before the answer; other
     * processes' attempts start within EngineTiming.startWindowMs of a claim, which reads the row.
     */
    endpointChanged(key: string): void {
      changedAt.set(key, performance.now());
      // A PATCH that disables may have recorded endpointDisabled.
      wakeFanOut();
      const lane = lanes.get(key);
      const queued = lane ? lane.queue.splice(0) : [];
      for (const delivery of queued) release(delivery);
      // Once the releases are written, the claim reads the endpoint as it now is.
      void recorder.flush().then(() => claimFor(key));
    },
    /**
     * Deliveries of an endpoint were made due here (a recover, a resend): claimed at once rather
     * than at the next poll, without giving back what its lane holds.
     */
    deliveriesDue: claimFor,
    /** Starts looking for events and due deliveries: retries, and what other processes left. */
    start(): void {
      if (running) return;
      running = true;
      poll();
    },
    /**
     * Stops claiming, gives back the claims of deliveries not yet attempted, lets attempts in
     * flight finish for up to `waitMs` (then abandons them and gives their claims back too), and
     * records every outcome.
     */
    async stop(waitMs: number): Promise<void> {
      stopping = true;
      clearTimeout(pollTimer);
      // Its deliveries are claimed: they reach the lanes, and are given back below.
      await fanOuts.ended();
      for (const lane of lanes.values()) {
        lane.wake.clear();
        lane.pace.clear();
        for (const delivery of lane.queue.splice(0)) release(delivery);
      }
      const deadline = performance.now() + waitMs;
      while (inFlight() > 0 && performance.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      abandon.abort();
      for (const lane of lanes.values()) {
        // The abandoned attempts are given back now, rather than when their claims expire; a
        // test's outcome is written by its own request.
        for (const delivery of lane.inFlight) if (givenBackAtStop(delivery)) release(delivery);
        lane.inFlight.clear();
      }
      await recorder.flush();
      await Promise.all([...lanes.values()].map((lane) => lane.pool.destroy()));
    },
    /**
     * Tests endpoint `key` (its row key): sends an example event of `type`, signed with its key,
     * at once, and answers how that one attempt ended once it is in the attempt log. 'disabled'
     * for a disabled endpoint, undefined when there is none. `within` bounds the wait for the
     * statement that makes the test (the attempt has its own time limit).
     */
    async test(
      key: bigint,
      type: EventTypeName,
      within: <T>(work: Promise<T>) => Promise<T> = (work) => work,
    ): Promise<TestOutcome | 'disabled' | undefined> {
      if (!running || stopping) throw new Error('the delivery engine is not running');
      const delivery = await within(replays.test(key, type, exampleBody(type, new Date())));
      if (typeof delivery !== 'object') return delivery;
      return attempt(laneOf(delivery), delivery, settleTest);
    },
    stats: () => ({ inFlight: inFlight(), queued: count((lane) => lane.queue.length) }),
  };
}
