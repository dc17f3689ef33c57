import type { SpanContext } from '@opentelemetry/api';
import { QueueFullError } from './errors.js';
import { callerContext, forCallers } from './spans.js';

/** An item waiting in a batch queue, and how to answer its caller. */
export interface Pending<Item, Result> {
  readonly item: Item;
  /** The caller's trace context, when it has one. */
  readonly trace: SpanContext | undefined;
  resolve(result: Result): void;
  reject(error: unknown): void;
}

export interface BatchQueueOptions {
  /** The most items one batch carries. */
  maxBatchSize: number;
  /** Batches in flight at once, each on a connection of its own. */
  maxConcurrentBatches: number;
  /** Items that may wait for a batch; beyond them an item fails with QueueFullError. */
  maxQueued: number;
  /** Told the size of every batch sent. */
  onBatch?: (size: number) => void;
}

export interface BatchQueue<Item, Result> {
  /** Queues the item; settles once the batch that carries it has answered it. */
  add(item: Item): Promise<Result>;
  /** Resolves when every item added so far has its answer. */
  drain(): Promise<void>;
  /** Items waiting for a batch, and batches in flight. */
  stats(): { queued: number; inFlight: number };
}

export interface BatchHandler<Item, Result> {
  /** Answers every item of the batch; a rejection fails the items it left unanswered. */
  run(batch: Pending<Item, Result>[]): Promise<void>;
  /** True when a batch's failure dooms the items still queued, so they fail unsent. */
  failsQueued?: (error: unknown) => boolean;
}

/**
 * Coalesces concurrent work: while batches are in flight, new items queue, and each batch takes
 * everything queued (up to maxBatchSize), so one round trip serves many callers. An idle queue
 * sends an item at once: the queue is flushed on the next turn of the event loop, not after a
 * delay. An item never joins a batch already in flight, so it sees every write answered before
 * it was added.
 */
export function createBatchQueue<Item, Result>(
  handler: BatchHandler<Item, Result>,
  options: BatchQueueOptions,
): BatchQueue<Item, Result> {
  let queue: Pending<Item, Result>[] = [];
  let inFlight = 0;
  let flushScheduled = false;
  let drained: Array<() => void> = [];

  async function runBatch(batch: Pending<Item, Result>[]): Promise<void> {
    try {
      // A batch's statements are linked to the callers it serves.
      await forCallers(
        batch.map((pending) => pending.trace),
        () => handler.run(batch),
      );
    } catch (error) {
      // Promises settle once: the items the handler already answered keep their answers.
      for (const pending of batch) pending.reject(error);
      if (handler.failsQueued?.(error)) {
        const waiting = queue;
        queue = [];
        for (const pending of waiting) pending.reject(error);
      }
    }
  }

  function flush(): void {
    flushScheduled = false;
    while (queue.length > 0 && inFlight < options.maxConcurrentBatches) {
      const batch =
        queue.length <= options.maxBatchSize ? queue : queue.slice(0, options.maxBatchSize);
      queue = batch === queue ? [] : queue.slice(batch.length);
      inFlight++;
      options.onBatch?.(batch.length);
      runBatch(batch).finally(() => {
        inFlight--;
        scheduleFlush();
        if (inFlight === 0 && queue.length === 0) {
          for (const resolve of drained) resolve();
          drained = [];
        }
      });
    }
  }

  function scheduleFlush(): void {
    if (flushScheduled || queue.length === 0 || inFlight >= options.maxConcurrentBatches) return;
    flushScheduled = true;
    // Items that arrive in the same turn of the event loop leave in one batch.
    setImmediate(flush);
  }

  return {
    add(item) {
      if (queue.length >= options.maxQueued) return Promise.reject(new QueueFullError());
      return new Promise<Result>((resolve, reject) => {
        queue.push({ item, trace: callerContext(), resolve, reject });
        scheduleFlush();
      });
    },
    drain() {
      if (inFlight === 0 && queue.length === 0) return Promise.resolve();
      return new Promise<void>((resolve) => drained.push(resolve));
    },
    stats: () => ({ queued: queue.length, inFlight }),
  };
}
