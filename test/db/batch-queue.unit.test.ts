import { describe, expect, it } from 'vitest';
import { type BatchHandler, createBatchQueue, type Pending } from '../../src/db/batch-queue.js';
import { QueueFullError } from '../../src/db/errors.js';

/** A handler whose batches stay in flight until the test answers them. */
function heldBatches() {
  const batches: Pending<number, number>[][] = [];
  const waiting: Array<() => void> = [];
  const handler: BatchHandler<number, number> = {
    run(batch) {
      batches.push(batch);
      return new Promise<void>((resolve) => waiting.push(resolve));
    },
  };
  /** Answers every item of the batches in flight with twice its value. */
  const release = () => {
    for (const batch of batches.splice(0)) for (const p of batch) p.resolve(p.item * 2);
    for (const resolve of waiting.splice(0)) resolve();
  };
  return { handler, batches, release };
}

/** A few turns of the event loop: enough for settled batches to hand over to the next. */
async function turns(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
}

describe('a batch queue', () => {
  it('sends the items added in one turn of the event loop as one batch', async () => {
    const sizes: number[] = [];
    const queue = createBatchQueue<number, number>(
      {
        async run(batch) {
          for (const p of batch) p.resolve(p.item + 1);
        },
      },
      { maxBatchSize: 100, maxConcurrentBatches: 1, maxQueued: 100, onBatch: (n) => sizes.push(n) },
    );
    const answers = await Promise.all([1, 2, 3].map((n) => queue.add(n)));
    expect(answers).toStrictEqual([2, 3, 4]);
    expect(sizes).toStrictEqual([3]);
  });

  it('queues what arrives while the batches are in flight, and sends it together next', async () => {
    const { handler, batches, release } = heldBatches();
    const queue = createBatchQueue(handler, {
      maxBatchSize: 100,
      maxConcurrentBatches: 1,
      maxQueued: 100,
    });
    const first = queue.add(1);
    await turns();
    const later = [2, 3, 4].map((n) => queue.add(n));
    await turns();
    expect(batches.map((batch) => batch.map((p) => p.item))).toStrictEqual([[1]]);
    release();
    expect(await first).toBe(2);
    await turns();
    expect(batches.map((batch) => batch.map((p) => p.item))).toStrictEqual([[2, 3, 4]]);
    release();
    expect(await Promise.all(later)).toStrictEqual([4, 6, 8]);
  });

  it('keeps at most maxConcurrentBatches in flight, each at most maxBatchSize long', async () => {
    const { handler, batches, release } = heldBatches();
    const queue = createBatchQueue(handler, {
      maxBatchSize: 2,
      maxConcurrentBatches: 2,
      maxQueued: 100,
    });
    const answers = Promise.all([1, 2, 3, 4, 5].map((n) => queue.add(n)));
    await turns();
    expect(batches.map((batch) => batch.length)).toStrictEqual([2, 2]);
    expect(queue.stats()).toStrictEqual({ queued: 1, inFlight: 2 });
    release();
    await turns();
    expect(batches.map((batch) => batch.length)).toStrictEqual([1]);
    release();
    expect(await answers).toStrictEqual([2, 4, 6, 8, 10]);
  });

  it('refuses an item with QueueFullError when maxQueued items already wait', async () => {
    const { handler, release } = heldBatches();
    const queue = createBatchQueue(handler, {
      maxBatchSize: 10,
      maxConcurrentBatches: 1,
      maxQueued: 2,
    });
    const inFlight = queue.add(1);
    await turns();
    const queued = [queue.add(2), queue.add(3)];
    await expect(queue.add(4)).rejects.toBeInstanceOf(QueueFullError);
    release();
    await inFlight;
    await turns();
    release();
    expect(await Promise.all(queued)).toStrictEqual([4, 6]);
  });

  it('fails the items a failed batch left unanswered, and keeps the answers it gave', async () => {
    const queue = createBatchQueue<number, string>(
      {
        async run([first]) {
          first?.resolve('answered');
          throw new Error('the batch failed');
        },
      },
      { maxBatchSize: 10, maxConcurrentBatches: 1, maxQueued: 10 },
    );
    const results = await Promise.allSettled([queue.add(1), queue.add(2)]);
    expect(results[0]).toStrictEqual({ status: 'fulfilled', value: 'answered' });
    expect(results[1]).toMatchObject({
      status: 'rejected',
      reason: { message: 'the batch failed' },
    });
  });

  it('fails the queued items unsent when a failure dooms them, and only then', async () => {
    for (const doomed of [true, false]) {
      const sent: number[] = [];
      let fail = () => {};
      const queue = createBatchQueue<number, number>(
        {
          async run(batch) {
            sent.push(...batch.map((p) => p.item));
            if (batch[0]?.item === 1) {
              await new Promise<void>((resolve) => {
                fail = resolve;
              });
              throw new Error('gone');
            }
            for (const p of batch) p.resolve(p.item);
          },
          failsQueued: () => doomed,
        },
        { maxBatchSize: 10, maxConcurrentBatches: 1, maxQueued: 10 },
      );
      const first = queue.add(1).catch((error: Error) => error.message);
      await turns();
      const queued = queue.add(2).catch((error: Error) => error.message);
      fail();
      expect(await first).toBe('gone');
      expect(await queued).toBe(doomed ? 'gone' : 2);
      expect(sent).toStrictEqual(doomed ? [1] : [1, 2]);
    }
  });

  it('drains: resolves once every item added before has its answer', async () => {
    const { handler, release } = heldBatches();
    const queue = createBatchQueue(handler, {
      maxBatchSize: 1,
      maxConcurrentBatches: 1,
      maxQueued: 10,
    });
    const answered: number[] = [];
    for (const n of [1, 2, 3]) queue.add(n).then((answer) => answered.push(answer));
    let drained = false;
    const drain = queue.drain().then(() => {
      drained = true;
    });
    for (let i = 0; i < 3; i++) {
      await turns();
      expect(drained).toBe(false);
      release();
      await turns();
    }
    await drain;
    expect(answered).toStrictEqual([2, 4, 6]);
    await expect(queue.drain()).resolves.toBeUndefined();
  });
});
