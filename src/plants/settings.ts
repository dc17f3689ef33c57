import { type Static, Type } from '@sinclair/typebox';
import { integer } from '../environment.js';

/** The variables of the plants' batched writes and reads, with their defaults. */
export const PlantsEnvironment = Type.Object({
  WRITE_BATCH_MAX: integer(1, 10_000, 500),
  WRITE_CONCURRENCY: integer(1, 1000, 1),
  WRITE_QUEUE_MAX: integer(1, 1_000_000, 10_000),
  READ_BATCH_MAX: integer(1, 10_000, 500),
  READ_CONCURRENCY: integer(1, 1000, 4),
  READ_QUEUE_MAX: integer(1, 1_000_000, 10_000),
});

/** A batch never waits for a connection the pool of `poolMax` cannot give. */
export function readPlantsSettings(
  environment: Static<typeof PlantsEnvironment>,
  { poolMax }: { poolMax: number },
) {
  return {
    /** Creates: each batch is one INSERT. */
    writes: {
      maxBatchSize: environment.WRITE_BATCH_MAX,
      maxConcurrentBatches: Math.min(environment.WRITE_CONCURRENCY, poolMax),
      maxQueued: environment.WRITE_QUEUE_MAX,
    },
    /** Reads by id: each batch is one SELECT. */
    reads: {
      maxBatchSize: environment.READ_BATCH_MAX,
      maxConcurrentBatches: Math.min(environment.READ_CONCURRENCY, poolMax),
      maxQueued: environment.READ_QUEUE_MAX,
    },
  };
}
