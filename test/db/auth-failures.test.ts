import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AppDatabase } from '../../src/db/app-database.js';
import { createAuthFailureCounts } from '../../src/db/auth-failures.js';
import { createScratchDatabase, type ScratchDatabase } from '../helpers/database.js';

// The shared count of failed authentications, as two replicas use it: one of them through a
// pooler in transaction mode (DB_POOLER), whose statements need no session state.

describe('the failed authentications table', () => {
  let database: ScratchDatabase;
  let direct: AppDatabase;
  let pooled: AppDatabase;
  beforeAll(async () => {
    database = await createScratchDatabase();
    direct = database.open();
    pooled = database.open({ pooler: true, poolMax: 1 });
  });
  afterAll(async () => {
    await pooled.close();
    await direct.close();
    await database.drop();
  });

  const countsOn = (opened: AppDatabase, windowMs = 60_000) =>
    createAuthFailureCounts(opened.db, { limit: 3, windowMs });

  it('counts the failures of one address on every handle, each once', async () => {
    const [first, second] = [countsOn(direct), countsOn(pooled)];
    const counted = await Promise.all(
      Array.from({ length: 8 }, (_, i) => (i % 2 ? first : second).recordFailure('10.1.0.1')),
    );
    expect(counted.map(({ failures }) => failures).sort((a, b) => a - b)).toStrictEqual([
      1, 2, 3, 4, 5, 6, 7, 8,
    ]);
    for (const { remainingMs } of counted) {
      expect(remainingMs).toBeGreaterThan(55_000);
      expect(remainingMs).toBeLessThanOrEqual(60_000);
    }
  });

  it('lists an address as throttled once its failures reach the limit', async () => {
    const counts = countsOn(pooled);
    await counts.recordFailure('10.1.0.2');
    await counts.recordFailure('10.1.0.2');
    expect((await counts.throttled()).map(({ address }) => address)).not.toContain('10.1.0.2');
    await counts.recordFailure('10.1.0.2');
    const throttled = await countsOn(direct).throttled();
    expect(throttled.find(({ address }) => address === '10.1.0.2')?.remainingMs).toBeGreaterThan(
      55_000,
    );
  });

  it('starts a new window, unthrottled, once the last one has passed', async () => {
    const counts = countsOn(direct, 200);
    for (let i = 0; i < 3; i++) await counts.recordFailure('10.1.0.3');
    expect((await counts.throttled()).map(({ address }) => address)).toContain('10.1.0.3');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect((await counts.throttled()).map(({ address }) => address)).not.toContain('10.1.0.3');
    expect((await counts.recordFailure('10.1.0.3')).failures).toBe(1);
  });

  it('forgets the rows whose window has passed, and only those', async () => {
    const counts = countsOn(pooled, 200);
    await counts.recordFailure('10.1.0.4');
    await countsOn(pooled).recordFailure('10.1.0.5');
    await new Promise((resolve) => setTimeout(resolve, 300));
    await counts.forgetExpired();
    const rows = await database.query<{ address: string }>(
      "select address from auth_failures where address in ('10.1.0.4', '10.1.0.5')",
    );
    expect(rows).toStrictEqual([{ address: '10.1.0.5' }]);
  });
});
