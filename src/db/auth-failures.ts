import { sql } from 'drizzle-orm';
import { boolean, index, integer, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { createBatchQueue } from './batch-queue.js';
import type { Database } from './database.js';
import { prepareStatement } from './prepared.js';

/**
 * Failed authentications per client address (see clientKeyOf), shared by every replica:
 * written only when an authentication fails, read about once a second for the throttled ones.
 * The table is UNLOGGED (its migration says so; the schema cannot): a crash loses a minute's
 * worth of counts at most, which is not worth WAL or replicas.
 */
export const authFailures = pgTable(
  'auth_failures',
  {
    address: text('address').primaryKey(),
    /** Failures within the window. */
    failures: integer('failures').notNull(),
    /** The window began at the first of them, and ends then. */
    windowEnds: timestamp('window_ends', { withTimezone: true }).notNull(),
    /** The failures reached the limit: the address is refused until `window_ends`. */
    throttled: boolean('throttled').notNull(),
  },
  (table) => [
    // What every replica reads: a range scan of the throttled rows only.
    index('auth_failures_throttled_idx').on(table.windowEnds).where(sql`${table.throttled}`),
  ],
);
const table = authFailures;

export interface AuthFailureCountsOptions {
  /** Failures that throttle an address. */
  limit: number;
  windowMs: number;
}

type CountRow = { address: string; failures: number; remaining_ms: number };

/**
 * The failed authentications of every replica, counted in the `auth_failures` table. Windows
 * are timed by the database's clock, so replicas whose clocks differ agree on them. Failures
 * that arrive together are counted by one statement, and one such statement runs at a time,
 * so a flood of bad tokens holds one pooled connection at most; beyond 10,000 waiting, a
 * failure is refused (QueueFullError) and its caller counts it elsewhere.
 */
export function createAuthFailureCounts(db: Database, options: AuthFailureCountsOptions) {
  // now() is when a statement's transaction began: one that waited on another's row may see
  // a window that began after it, so the time left is capped at the window.
  const remainingMs = sql`least(ceil(extract(epoch from window_ends - now()) * 1000),
    ${sql.placeholder('windowMs')}::int4)::int4`;
  const record = prepareStatement<CountRow>(
    db,
    'auth_failures_record',
    sql`insert into ${table} as counted (address, failures, window_ends, throttled)
        select input.address, input.failures,
               now() + ${sql.placeholder('windowMs')}::int4 * interval '1 millisecond',
               input.failures >= ${sql.placeholder('limit')}::int4
          from unnest(${sql.placeholder('addresses')}::text[], ${sql.placeholder('counts')}::int4[])
               as input(address, failures)
        on conflict (address) do update set
          failures = case when counted.window_ends > now()
            then counted.failures + excluded.failures else excluded.failures end,
          window_ends = case when counted.window_ends > now()
            then counted.window_ends else excluded.window_ends end,
          throttled = case when counted.window_ends > now()
            then counted.failures + excluded.failures >= ${sql.placeholder('limit')}::int4
            else excluded.throttled end
        returning address, failures, ${remainingMs} as remaining_ms`,
  );
  const throttled = prepareStatement<Omit<CountRow, 'failures'>>(
    db,
    'auth_failures_throttled',
    sql`select address, ${remainingMs} as remaining_ms from ${table}
         where throttled and window_ends > now()`,
  );
  const forget = prepareStatement(
    db,
    'auth_failures_forget',
    sql`delete from ${table} where window_ends <= now()`,
  );

  const failures = createBatchQueue<string, { failures: number; remainingMs: number }>(
    {
      async run(batch) {
        const byAddress = new Map<string, typeof batch>();
        for (const pending of batch) {
          const same = byAddress.get(pending.item);
          if (same) same.push(pending);
          else byAddress.set(pending.item, [pending]);
        }
        const rows = await record.execute({
          addresses: [...byAddress.keys()],
          counts: [...byAddress.values()].map((pending) => pending.length),
          limit: options.limit,
          windowMs: options.windowMs,
        });
        for (const row of rows) {
          const pending = byAddress.get(row.address) ?? [];
          // The batch's failures of one address are counted in the order they arrived.
          const before = row.failures - pending.length;
          for (const [index, { resolve }] of pending.entries()) {
            resolve({ failures: before + index + 1, remainingMs: row.remaining_ms });
          }
        }
      },
    },
    { maxBatchSize: 500, maxConcurrentBatches: 1, maxQueued: 10_000 },
  );

  return {
    recordFailure: (address: string) => failures.add(address),
    async throttled() {
      const rows = await throttled.execute({ windowMs: options.windowMs });
      return rows.map(({ address, remaining_ms }) => ({ address, remainingMs: remaining_ms }));
    },
    async forgetExpired() {
      await forget.execute({});
    },
  };
}
