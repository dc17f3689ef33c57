import type { FastifyBaseLogger } from 'fastify';
import type { DisabledEndpoint, Outcome, OutcomeStatements } from './outcomes.js';

/** Outcomes one statement writes at most. */
const RECORD_BATCH_MAX = 5000;

/**
 * Writes outcomes in batches, one batch at a time. A batch that cannot be written is logged
 * and dropped: its claims expire and its deliveries are attempted again (at least once holds).
 */
export function createRecorder(
  statements: OutcomeStatements,
  logger: FastifyBaseLogger,
  onRecorded: (batch: readonly Outcome[], disabled: DisabledEndpoint[]) => void,
  /** See EngineTiming.recordIntervalMs. */
  intervalMs: number,
) {
  const unrecorded: Outcome[] = [];
  let recording: Promise<void> | undefined;
  let timer: NodeJS.Timeout | undefined;
  let timerSoon = false;

  async function write(): Promise<void> {
    clearTimeout(timer);
    timer = undefined;
    while (recording) await recording;
    if (unrecorded.length === 0) return;
    const batch = unrecorded.splice(0, RECORD_BATCH_MAX);
    recording = statements.record(batch).then(
      (disabled) => {
        // What follows a batch must not stop the next one from being written.
        try {
          onRecorded(batch, disabled);
        } catch (error) {
          logger.error({ err: error }, 'webhook outcomes recorded; what follows them failed');
        }
      },
      (error) => {
        logger.warn({ err: error, outcomes: batch.length }, 'webhook outcomes not recorded');
      },
    );
    try {
      await recording;
    } finally {
      recording = undefined;
    }
    if (unrecorded.length > 0) schedule(unrecorded.some((outcome) => outcome.kind !== 'delivered'));
  }

  function schedule(soon: boolean): void {
    if (timer !== undefined && (timerSoon || !soon)) return;
    clearTimeout(timer);
    timerSoon = soon;
    timer = setTimeout(write, soon ? 0 : intervalMs);
  }

  return {
    // A retry is written at once, so that it is due when a process wakes up for it.
    record(outcome: Outcome): void {
      unrecorded.push(outcome);
      schedule(outcome.kind !== 'delivered');
    },
    async flush(): Promise<void> {
      while (unrecorded.length > 0 || recording) await write();
    },
  };
}
