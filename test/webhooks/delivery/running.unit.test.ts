// The engine's small machinery on its own, on an injected clock: the alarm that wakes a lane, and
// the recorder that writes outcomes in batches.
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Outcome, OutcomeStatements } from '../../../src/webhooks/delivery/outcomes.js';
import { createRecorder } from '../../../src/webhooks/delivery/recorder.js';
import { createAlarm } from '../../../src/webhooks/delivery/running.js';

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('an alarm', () => {
  it('rings at each time asked for, the earliest first, however they were asked', () => {
    const rang: number[] = [];
    const alarm = createAlarm(() => rang.push(performance.now()));
    const start = performance.now();
    for (const after of [300, 100, 200]) alarm.at(start + after);
    vi.advanceTimersByTime(1000);
    expect(rang.map((at) => at - start)).toStrictEqual([100, 200, 300]);
    expect(alarm.pending()).toBe(false);
  });

  it('rings once per step of its granularity, at or after each time asked for', () => {
    const rang: number[] = [];
    const alarm = createAlarm(() => rang.push(performance.now()), 50);
    const start = 1000;
    vi.advanceTimersByTime(start - performance.now());
    for (let i = 0; i < 100; i++) alarm.at(start + 1 + i);
    expect(alarm.pending()).toBe(true);
    vi.advanceTimersByTime(1000);
    expect(rang.map((at) => at - start)).toStrictEqual([50, 100]);
  });

  it('rings no more once cleared', () => {
    const job = vi.fn();
    const alarm = createAlarm(job);
    alarm.at(performance.now() + 10);
    alarm.clear();
    vi.advanceTimersByTime(100);
    expect(job).not.toHaveBeenCalled();
    expect(alarm.pending()).toBe(false);
  });
});

describe('the recorder', () => {
  it('writes the next batch when what follows the last one failed', async () => {
    const written: Outcome[][] = [];
    const statements = {
      record: async (batch: Outcome[]) => {
        written.push(batch);
        return [];
      },
    } as unknown as OutcomeStatements;
    let calls = 0;
    const recorder = createRecorder(
      statements,
      pino({ level: 'silent' }),
      () => {
        calls++;
        if (calls === 1) throw new Error('what follows the batch failed');
      },
      0,
    );
    recorder.record({ kind: 'delivered', id: '1' });
    await vi.runAllTimersAsync();
    await recorder.flush();
    recorder.record({ kind: 'delivered', id: '2' });
    await recorder.flush();
    expect(written.map((batch) => batch.map((outcome) => outcome.id))).toStrictEqual([
      ['1'],
      ['2'],
    ]);
    expect(calls).toBe(2);
  });
});
