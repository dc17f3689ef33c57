import { setMaxListeners } from 'node:events';
import type { Attributes } from '@opentelemetry/api';
import type { FastifyBaseLogger } from 'fastify';
import { Pool } from 'undici';
import type { WebhookConfig } from '../config.js';
import type { Database } from '../db/client.js';
import { type AttemptResult, attemptDelivery } from './attempt.js';
import { attemptSpan, receiverSpanAttributes } from './attempt-span.js';
import type { WebhookMetrics } from './metrics.js';
import { type ClaimedDelivery, createOutbox, type Outbox, type Outcome } from './outbox.js';
import { describeFailure, nextStep } from './schedule.js';
import { signingKey, webhookId } from './signature.js';

/** A claim outlives the attempt's time limit by this much, so a live holder always finishes first. */
export const LEASE_MARGIN_MS = 5000;
/** An attempt must start this long before its claim could no longer cover its time limit. */
const START_MARGIN_MS = 1000;
/** How often a dispatcher looks for events and due deliveries that nobody announced to it. */
const POLL_INTERVAL_MS = 1000;
/** Events one fan-out takes at most; when it takes that many, another follows at once. */
const FAN_OUT_LIMIT = 1000;
/**
 * A woken fan-out looks at events recorded after the last one taken, less this many: it does
 * not walk the index entries of the events already gone (until a vacuum), and still finds events
 * whose statements committed out of order. Anything older is the poll's, which looks at all.
 */
const FAN_OUT_MARGIN = 10_000n;
/** Deliveries that may wait in one URL's queue; beyond, new ones are released at once. */
const QUEUE_MAX = 10_000;
/**
 * Outcomes are written together, at most this often: one DELETE for hundreds of deliveries
 * costs the database about what one costs, and a claim lasts far longer than the wait.
 */
const RECORD_INTERVAL_MS = 100;
const RECORD_BATCH_MAX = 5000;

export interface Dispatcher {
  /**
   * Fans out the events recorded so far and attempts their deliveries at once: for a process
   * that has just recorded some. Nothing depends on it: the poll fans out every event too.
   */
  wake(): void;
  /** Starts looking for events and due deliveries: retries, and what other processes left. */
  start(): void;
  /**
   * Stops claiming, gives back the claims of deliveries not yet attempted, lets attempts in
   * flight finish for up to `waitMs` (then abandons them and gives their claims back too), and
   * records every outcome.
   */
  stop(waitMs: number): Promise<void>;
  /** Attempts in flight and deliveries waiting for one, over every URL. */
  stats(): { inFlight: number; queued: number };
}

export interface DispatcherOptions {
  db: Database;
  config: WebhookConfig;
  logger: FastifyBaseLogger;
  metrics?: WebhookMetrics;
  /** The outbox's statements; made from `db` unless given. */
  outbox?: Outbox;
}

/** The claim of a delivery lasts this long: the time limit of its attempt and a margin. */
export function leaseMsFor(config: Pick<WebhookConfig, 'timeoutMs'>): number {
  return config.timeoutMs + LEASE_MARGIN_MS;
}

/** One subscriber: its connections, its queue and its attempts in flight. */
interface Lane {
  url: string;
  /** Origin and path, for the log: a query string may carry a credential. */
  receiver: string;
  /** What the span of every attempt says of the receiver. */
  receiverAttributes: Attributes;
  path: string;
  pool: Pool;
  queue: ClaimedDelivery[];
  inFlight: Set<ClaimedDelivery>;
  claiming: boolean;
  claimAgain: boolean;
  /** The last claim took all it asked for: more may be due. */
  backlog: boolean;
  wakeAt: number;
  wakeTimer: NodeJS.Timeout | undefined;
}

/**
 * Delivers the newPlant webhook. A fan-out takes the events that writers recorded, writes one
 * delivery per URL, born claimed by this process, and attempts them at once; it runs when this
 * process is woken after recording events and at every poll, so events that a dead process
 * recorded are fanned out by any other. A poll also claims whatever deliveries are due (retries,
 * those whose holder died). Both take rows with FOR UPDATE SKIP LOCKED, so processes share the
 * work and no delivery has two attempts at once. At most `concurrency` attempts per URL are in
 * flight, over keep-alive connections; a slow or dead receiver holds only its own URL's slots.
 */
export function createDispatcher(options: DispatcherOptions): Dispatcher {
  const { config, logger, metrics } = options;
  const leaseMs = leaseMsFor(config);
  const outbox = options.outbox ?? createOutbox(options.db, { urls: config.urls, leaseMs });
  const key = signingKey(config.secret ?? '');
  let running = false;
  let stopping = false;
  // Aborts the attempts still in flight when shutdown can wait no longer.
  const abandon = new AbortController();
  // Every attempt in flight listens to it: as many as the URLs' concurrency allows.
  setMaxListeners(0, abandon.signal);
  let pollTimer: NodeJS.Timeout | undefined;

  const unrecorded: Outcome[] = [];
  let recording: Promise<void> | undefined;
  let recordTimer: NodeJS.Timeout | undefined;

  /** Writes the outcomes noted so far, one write at a time; resolves when all are written. */
  async function recordOutcomes(): Promise<void> {
    clearTimeout(recordTimer);
    recordTimer = undefined;
    while (recording) await recording;
    if (unrecorded.length === 0) return;
    const batch = unrecorded.splice(0, RECORD_BATCH_MAX);
    recording = outbox.recordOutcomes(batch).then(
      () => {},
      (error) => {
        // The claims expire and the deliveries are attempted again: at least once still holds.
        logger.warn({ err: error, outcomes: batch.length }, 'webhook outcomes not recorded');
      },
    );
    await recording;
    recording = undefined;
    if (unrecorded.length > 0) {
      scheduleRecording(unrecorded.some((outcome) => outcome.kind !== 'delivered'));
    }
  }

  let recordSoon = false;
  function scheduleRecording(soon = false): void {
    if (recordTimer !== undefined && (recordSoon || !soon)) return;
    clearTimeout(recordTimer);
    recordSoon = soon;
    recordTimer = setTimeout(recordOutcomes, soon ? 0 : RECORD_INTERVAL_MS);
  }

  // A retry is written at once, so that it is due when this process wakes up for it.
  const record = (outcome: Outcome) => {
    unrecorded.push(outcome);
    scheduleRecording(outcome.kind !== 'delivered');
  };

  const lanes = new Map<string, Lane>();
  for (const url of config.urls) {
    const parsed = new URL(url);
    const receiver = `${parsed.origin}${parsed.pathname}`;
    lanes.set(url, {
      url,
      receiver,
      receiverAttributes: receiverSpanAttributes(parsed, receiver),
      path: `${parsed.pathname}${parsed.search}`,
      pool: new Pool(parsed.origin, {
        connections: config.concurrency,
        connect: { timeout: config.timeoutMs },
      }),
      queue: [],
      inFlight: new Set(),
      claiming: false,
      claimAgain: false,
      backlog: false,
      wakeAt: Number.POSITIVE_INFINITY,
      wakeTimer: undefined,
    });
  }

  /** The latest moment an attempt of `delivery` may start and still end within its claim. */
  const startBy = (delivery: ClaimedDelivery) =>
    delivery.claimedAt + leaseMs - config.timeoutMs - START_MARGIN_MS;

  function release(delivery: ClaimedDelivery): void {
    record({ kind: 'released', id: delivery.id, attempt: delivery.attempt });
  }

  function pump(lane: Lane): void {
    while (lane.inFlight.size < config.concurrency && lane.queue.length > 0) {
      const delivery = lane.queue.shift() as ClaimedDelivery;
      if (stopping || performance.now() > startBy(delivery)) release(delivery);
      else void attempt(lane, delivery);
    }
    if (lane.queue.length === 0 && lane.backlog) claim(lane);
  }

  async function attempt(lane: Lane, delivery: ClaimedDelivery): Promise<void> {
    lane.inFlight.add(delivery);
    const result = await attemptSpan(
      {
        receiver: lane.receiverAttributes,
        webhookId: webhookId(delivery.eventId),
        attempt: delivery.attempt,
        traceparent: delivery.traceparent,
      },
      () =>
        attemptDelivery(delivery, {
          client: lane.pool,
          path: lane.path,
          key,
          timeoutMs: config.timeoutMs,
          signal: abandon.signal,
        }),
    );
    // Abandoned at shutdown: stop() gave its claim back.
    if (abandon.signal.aborted) return;
    lane.inFlight.delete(delivery);
    settle(lane, delivery, result);
    pump(lane);
  }

  function settle(lane: Lane, delivery: ClaimedDelivery, result: AttemptResult): void {
    metrics?.observeAttempt(result);
    const step = nextStep(result, delivery.attempt, config.retrySchedule);
    if (step.kind === 'delivered') {
      record({ kind: 'delivered', id: delivery.id });
      const lagMs =
        delivery.createdAtMs === undefined
          ? performance.now() - delivery.claimedAt
          : Date.now() - delivery.createdAtMs;
      metrics?.observeDelivery('delivered', lagMs / 1000);
      return;
    }
    const failure = describeFailure(result);
    const context = {
      webhookId: webhookId(delivery.eventId),
      deliveryId: delivery.id,
      receiver: lane.receiver,
      attempt: delivery.attempt,
      ...(failure.status === undefined ? { error: failure.error } : { status: failure.status }),
    };
    if (step.kind === 'retry') {
      logger.warn({ ...context, retryInMs: step.delayMs }, 'webhook attempt failed; will retry');
      record({
        kind: 'retry',
        id: delivery.id,
        attempt: delivery.attempt,
        ...failure,
        delayMs: step.delayMs,
      });
      wakeAt(lane, performance.now() + step.delayMs);
      return;
    }
    record({ kind: 'failed', id: delivery.id, attempt: delivery.attempt, ...failure });
    metrics?.observeDelivery(step.kind);
    if (step.kind === 'gone') {
      logger.warn(context, 'webhook receiver answered 410 Gone: delivery ended');
    } else {
      logger.error(context, 'webhook delivery failed after its last attempt');
    }
  }

  /** Claims again when a retry this process scheduled falls due (others find it by polling). */
  function wakeAt(lane: Lane, at: number): void {
    if (stopping || at >= lane.wakeAt) return;
    clearTimeout(lane.wakeTimer);
    lane.wakeAt = at;
    // A little after: the outcome that set the time must be recorded first.
    lane.wakeTimer = setTimeout(
      () => {
        lane.wakeAt = Number.POSITIVE_INFINITY;
        claim(lane);
      },
      Math.max(0, at - performance.now()) + 50,
    );
    lane.wakeTimer.unref();
  }

  /** Claims due deliveries for the lane's free slots; a claim asked for meanwhile runs after. */
  function claim(lane: Lane): void {
    if (!running || stopping) return;
    if (lane.claiming) {
      lane.claimAgain = true;
      return;
    }
    const free = config.concurrency - lane.inFlight.size - lane.queue.length;
    if (free <= 0) return;
    lane.claiming = true;
    outbox
      .claim(lane.url, free)
      .then(
        (claimed) => {
          lane.backlog = claimed.length === free;
          lane.queue.push(...claimed);
        },
        (error) => {
          lane.backlog = false;
          logger.warn({ err: error, receiver: lane.receiver }, 'webhook deliveries not claimed');
        },
      )
      .finally(() => {
        lane.claiming = false;
        pump(lane);
        if (lane.claimAgain) {
          lane.claimAgain = false;
          claim(lane);
        }
      });
  }

  /** Hands deliveries claimed by a fan-out to their lanes; a full lane gives them back. */
  function enqueue(deliveries: ClaimedDelivery[]): void {
    for (const delivery of deliveries) {
      const lane = lanes.get(delivery.url);
      if (!lane || stopping || lane.queue.length >= QUEUE_MAX) release(delivery);
      else lane.queue.push(delivery);
    }
    for (const lane of lanes.values()) if (lane.queue.length > 0) pump(lane);
  }

  let fanningOut: Promise<void> | undefined;
  /** A fan-out asked for while one ran: from where it looks. */
  let fanOutAgain: bigint | undefined;
  let lastTaken = 0n;

  /**
   * Fans out the events above `after`, one statement at a time; one asked for meanwhile runs
   * after it, from the lowest position asked for.
   */
  function fanOut(after: bigint): void {
    if (!running || stopping) return;
    if (fanningOut) {
      if (fanOutAgain === undefined || after < fanOutAgain) fanOutAgain = after;
      return;
    }
    fanningOut = outbox.fanOut(FAN_OUT_LIMIT, after).then(
      ({ events, last, deliveries }) => {
        enqueue(deliveries);
        if (last !== undefined && last > lastTaken) lastTaken = last;
        // More may wait right after the last one taken.
        if (events === FAN_OUT_LIMIT && last !== undefined) fanOut(last);
      },
      (error) => {
        logger.warn({ err: error }, 'webhook events not fanned out');
      },
    );
    void fanningOut.finally(() => {
      fanningOut = undefined;
      const again = fanOutAgain;
      fanOutAgain = undefined;
      if (again !== undefined) fanOut(again);
    });
  }

  const fanOutRecent = () => fanOut(lastTaken > FAN_OUT_MARGIN ? lastTaken - FAN_OUT_MARGIN : 0n);

  function poll(): void {
    fanOut(0n);
    for (const lane of lanes.values()) claim(lane);
    pollTimer = setTimeout(poll, POLL_INTERVAL_MS * (0.9 + 0.2 * Math.random()));
    pollTimer.unref();
  }

  return {
    wake: fanOutRecent,
    start() {
      if (running) return;
      running = true;
      poll();
    },
    async stop(waitMs) {
      stopping = true;
      clearTimeout(pollTimer);
      // Its deliveries are claimed: they reach the lanes, and are given back below.
      await fanningOut;
      for (const lane of lanes.values()) {
        clearTimeout(lane.wakeTimer);
        for (const delivery of lane.queue.splice(0)) release(delivery);
      }
      const inFlight = () => [...lanes.values()].reduce((n, lane) => n + lane.inFlight.size, 0);
      const deadline = performance.now() + waitMs;
      while (inFlight() > 0 && performance.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      abandon.abort();
      for (const lane of lanes.values()) {
        // The abandoned attempts are given back now, rather than when their claims expire.
        for (const delivery of lane.inFlight) release(delivery);
        lane.inFlight.clear();
      }
      while (unrecorded.length > 0 || recording) await recordOutcomes();
      await Promise.all([...lanes.values()].map((lane) => lane.pool.destroy()));
    },
    stats() {
      let inFlight = 0;
      let queued = 0;
      for (const lane of lanes.values()) {
        inFlight += lane.inFlight.size;
        queued += lane.queue.length;
      }
      return { inFlight, queued };
    },
  };
}
