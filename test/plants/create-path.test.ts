import fs, { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import type { DestinationStream } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { stdoutDestination } from '../../src/logger.js';
import { postPlant, startTestApp, type TestApp } from '../helpers/app.js';

// What a create costs, counted rather than timed: one statement per batch of creates, one log
// line per request, and no write of its own: the log's lines leave in batches. A change that adds a round
// trip or a synchronous write to the create path fails here, however fast the machine.

const CREATES = 100;

let testApp: TestApp;
let folder: string;
let logFile: string;
let logFd: number;
let destination: DestinationStream & { flushSync(): void };

beforeAll(async () => {
  folder = mkdtempSync(join(tmpdir(), 'plant-store-create-path-'));
  logFile = join(folder, 'service.log');
  logFd = openSync(logFile, 'w');
  destination = stdoutDestination(logFd) as typeof destination;
  testApp = await startTestApp({ logDestination: destination });
});
afterAll(async () => {
  await testApp?.close();
  closeSync(logFd);
  rmSync(folder, { recursive: true, force: true });
});

/** Batches the write path has sent so far (its batch size histogram's count). */
async function batchesSent(): Promise<number> {
  const metric = testApp.metrics.registry.getSingleMetric('plant_store_write_batch_size');
  const values = ((await metric?.get())?.values ?? []) as { metricName?: string; value: number }[];
  const count = values.find((value) => value.metricName === 'plant_store_write_batch_size_count');
  return count?.value ?? 0;
}

const requestLines = () =>
  readFileSync(logFile, 'utf8')
    .split('\n')
    .filter((line) => line.includes('"msg":"request completed"'));

describe('the create path', () => {
  it('sends one statement per batch, logs one line per request, and writes no line on its own', async () => {
    const first = await postPlant(testApp.app, { id: 1, name: 'Warm-up' });
    expect(first.statusCode).toBe(200);
    destination.flushSync();
    const linesBefore = requestLines().length;
    const batchesBefore = await batchesSent();

    // Every statement of the service goes through its pool, the plants' by name.
    const { pool } = testApp.appDatabase as unknown as { pool: pg.Pool };
    const statements = vi.spyOn(pool, 'query');
    const writeSync = vi.spyOn(fs, 'writeSync');
    const writes = vi.spyOn(fs, 'write');
    let answers: Awaited<ReturnType<typeof postPlant>>[];
    let counted: { statements: number; writeSyncs: unknown[][]; writes: unknown[][] };
    try {
      answers = await Promise.all(
        Array.from({ length: CREATES }, (_, i) =>
          postPlant(testApp.app, { id: 1000 + i, name: 'Counted', tag: 'guard' }),
        ),
      );
    } finally {
      // Taken before the spies go: restoring one forgets its calls.
      counted = {
        // The plants' own: the webhook engine and the auth throttle share the pool, and run
        // on timers of their own, which a slow machine's window of creates can take in.
        statements: statements.mock.calls.filter(([query]) =>
          String((query as { name?: string })?.name ?? '').startsWith('plants_'),
        ).length,
        writeSyncs: [...writeSync.mock.calls],
        writes: [...writes.mock.calls],
      };
      statements.mockRestore();
      writeSync.mockRestore();
      writes.mockRestore();
    }

    expect(answers.map((answer) => answer.statusCode)).toStrictEqual(Array(CREATES).fill(200));
    const batches = (await batchesSent()) - batchesBefore;
    // Coalesced: fewer batches than creates, and each batch is one statement, one round trip.
    expect(batches).toBeGreaterThan(0);
    expect(batches).toBeLessThan(CREATES);
    expect(counted.statements).toBe(batches);
    // Nothing but the log is written, and the log in a few batches of many lines: a create
    // does not wait for a write of its own.
    const written = [...counted.writeSyncs, ...counted.writes];
    expect(written.filter(([fd]) => fd !== logFd)).toStrictEqual([]);
    expect(written.length).toBeLessThanOrEqual(CREATES / 10);

    destination.flushSync();
    expect(requestLines().length - linesBefore).toBe(CREATES);
  });
});
