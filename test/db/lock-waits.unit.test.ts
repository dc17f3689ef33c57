import { describe, expect, it } from 'vitest';
import {
  backoffMs,
  type Clock,
  DEADLOCK_DETECTED,
  describeBlockers,
  firstWords,
  LOCK_NOT_AVAILABLE,
  MigrationGaveUpError,
  withLockRetries,
} from '../../src/db/lock-waits.js';
import { concurrentIndexName } from '../../src/db/migrate.js';

describe('firstWords', () => {
  it.each([
    ['select * from plants where id = any($1)', 'select * from plants where id ='],
    ["update plants set name = 'secret' where id = 7", 'update plants set name ='],
    [
      'select "id", "name" from "plants" where "id" > 42',
      'select "id", "name" from "plants" where "id" >',
    ],
    ['insert into plants (id, name) values(1, 2)', 'insert into plants (id, name)'],
    ['  -- a comment\n  vacuum   plants', 'vacuum plants'],
    ['/* job: nightly */ vacuum plants', 'vacuum plants'],
    ['/* a\n -- b */ select name from plants', 'select name from plants'],
    ["/* secret's */ select /* x */ id from plants", 'select id from plants'],
    ['select 1', 'select'],
    ['', ''],
  ])('keeps %j as %j', (query, words) => {
    expect(firstWords(query)).toBe(words);
  });

  it('keeps at most eight words', () => {
    expect(firstWords('a b c d e f g h i j')).toBe('a b c d e f g h');
  });

  it('stops before a dollar-quoted body', () => {
    expect(firstWords('do $$ begin perform 1; end $$')).toBe('do');
  });
});

describe('describeBlockers', () => {
  it('names each blocking session with its state, age and first words', () => {
    expect(
      describeBlockers([
        { pid: 4242, state: 'idle in transaction', transactionSeconds: 8, query: 'select *' },
        { pid: 7, state: null, transactionSeconds: null, query: '' },
      ]),
    ).toBe(
      'pid 4242 (idle in transaction for 8 s: select *), pid 7 (unknown state: no statement yet)',
    );
  });

  it('says a lock held by another session when none was seen', () => {
    expect(describeBlockers([])).toBe('a lock held by another session');
  });
});

describe('concurrentIndexName', () => {
  it.each([
    ['CREATE INDEX CONCURRENTLY "plants_name_idx" ON "plants" ("name")', '"plants_name_idx"'],
    ['create unique index concurrently if not exists public.x on plants (name)', 'public.x'],
    ['-- migrate: outside a transaction\nCREATE INDEX CONCURRENTLY "a" ON "plants" ("tag")', '"a"'],
    ['CREATE INDEX "plants_name_idx" ON "plants" ("name")', undefined],
    ['DROP INDEX CONCURRENTLY "plants_name_idx"', undefined],
  ])('reads %j as %j', (statement, name) => {
    expect(concurrentIndexName(statement)).toBe(name);
  });
});

describe('withLockRetries', () => {
  const lockTimeout = Object.assign(new Error('canceling statement due to lock timeout'), {
    code: LOCK_NOT_AVAILABLE,
  });

  function fakeClock(): Clock & { slept: number[] } {
    let now = 0;
    const slept: number[] = [];
    return {
      slept,
      now: () => now,
      sleep: async (ms) => {
        slept.push(ms);
        now += ms;
      },
    };
  }

  const options = (clock: Clock, events: unknown[] = []) => ({
    step: '0100_x',
    lockTimeoutMs: 500,
    retryForMs: 10_000,
    clock,
    onWait: (event: unknown) => events.push(event),
  });

  it('tries again after 250 ms, doubling up to 5 s, and resolves with the attempt that succeeds', async () => {
    const clock = fakeClock();
    const events: unknown[] = [];
    let attempts = 0;
    const result = await withLockRetries(options(clock, events), async () => {
      attempts++;
      if (attempts < 4) throw lockTimeout;
      return 'applied';
    });
    expect(result).toBe('applied');
    expect(clock.slept).toStrictEqual([250, 500, 1000]);
    expect(events).toHaveLength(3);
    expect([1, 2, 3, 4, 5, 6, 7].map(backoffMs)).toStrictEqual([
      250, 500, 1000, 2000, 4000, 5000, 5000,
    ]);
  });

  it('tries again a step the server ended to break a deadlock', async () => {
    const deadlock = Object.assign(new Error('deadlock detected'), { code: DEADLOCK_DETECTED });
    const clock = fakeClock();
    let attempts = 0;
    const result = await withLockRetries(options(clock), async () => {
      attempts++;
      if (attempts < 2) throw deadlock;
      return 'applied';
    });
    expect(result).toBe('applied');
    expect(clock.slept).toStrictEqual([250]);
  });

  it('gives up once the retry period is over, naming the blocker it saw last', async () => {
    const clock = fakeClock();
    const attempt = withLockRetries(options(clock), async (blockers) => {
      blockers.push({ pid: 99, state: 'active', transactionSeconds: 3, query: 'vacuum full' });
      throw lockTimeout;
    });
    await expect(attempt).rejects.toThrow(MigrationGaveUpError);
    await expect(attempt).rejects.toThrow(
      /^migration 0100_x gave up after 10 s and \d+ attempts: each time it waited 500 ms \(MIGRATION_LOCK_TIMEOUT_MS\) for pid 99 \(active for 3 s: vacuum full\) and gave way; nothing of it was applied/,
    );
    expect(clock.slept.reduce((sum, ms) => sum + ms, 0)).toBe(10_000);
  });

  it('does not retry any other failure', async () => {
    let attempts = 0;
    const failure = Object.assign(new Error('syntax error'), { code: '42601' });
    await expect(
      withLockRetries(options(fakeClock()), async () => {
        attempts++;
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(attempts).toBe(1);
  });
});
