// The outbox's upkeep: the gauges of its backlog, and the retention's sweep.
import { sql } from 'drizzle-orm';
import type { Database } from '../../db/database.js';
import { prepareStatement } from '../../db/prepared.js';
import { receiving } from './outbox.js';

export type OutboxStats = Awaited<ReturnType<Upkeep['stats']>>;

/** Counts stop here, so a scrape costs a bounded index scan however large a backlog grows. */
export const STATS_COUNT_LIMIT = 100_000;

/** Rows one sweep deletes at most from each table; the next sweep goes on. */
const SWEEP_LIMIT = 10_000;

/** A CTE that deletes the rows of webhook_`table` whose `column` is older than the retention. */
const old = (table: string, column: string) =>
  sql`${sql.raw(`old_${table}`)} as (
          delete from ${sql.raw(`webhook_${table}`)}
           where id = any(array(
                   select id from ${sql.raw(`webhook_${table}`)}
                    where ${sql.raw(column)} < now() - ${sql.placeholder('retention')}::int4 * interval '1 second'
                    limit ${SWEEP_LIMIT}))
          returning 1
        )`;

export type Upkeep = ReturnType<typeof createUpkeep>;

export function createUpkeep(db: Database, { logRetentionS }: { logRetentionS: number }) {
  const stats = prepareStatement<{
    pending: number;
    failed: number;
    oldest_due: number | null;
    receivers: number;
    events: number;
    oldest_event: number | null;
  }>(
    db,
    'webhook_stats',
    sql`select
          -- Only what some replica may claim: a lapsed configured endpoint's wait for none.
          (select count(*) from (select 1 from webhook_deliveries as d
                                   join webhook_endpoints as e on e.id = d.endpoint_id
                                  where d.failed_at is null and ${receiving}
                                  limit ${STATS_COUNT_LIMIT}) as p)::int4 as pending,
          -- A test's row is born given up (see replays.ts): it waits for no redelivery.
          (select count(*) from (select 1 from webhook_deliveries
                                  where failed_at is not null and trigger <> 'test'
                                  limit ${STATS_COUNT_LIMIT}) as f)::int4 as failed,
          (select extract(epoch from now() - min(due.next_attempt_at))::float8
             from webhook_endpoints as e
             cross join lateral (
               select next_attempt_at from webhook_deliveries
                where endpoint_id = e.id and failed_at is null and next_attempt_at <= now()
                order by next_attempt_at limit 1) as due
            where not e.disabled and ${receiving}) as oldest_due,
          (select count(*) from webhook_endpoints as e where not e.disabled and ${receiving})::int4
            as receivers,
          (select count(*) from (select 1 from webhook_events
                                  limit ${STATS_COUNT_LIMIT}) as e)::int4 as events,
          (select extract(epoch from now() - created_at)::float8 from webhook_events
            order by id limit 1) as oldest_event`,
  );
  const sweep = prepareStatement<{ count: number }>(
    db,
    'webhook_sweep',
    sql`with ${old('attempts', 'attempted_at')}, ${old('deliveries', 'failed_at')},
        -- A key replaced by a rotation is not kept once its grace is over.
        expired_keys as (
          update webhook_endpoints set previous_secret = null, previous_secret_until = null
           where previous_secret_until < now()
        )
        select ((select count(*) from old_attempts) + (select count(*) from old_deliveries))::int4 as count`,
  );
  return {
    async stats() {
      const [row] = await stats.execute({});
      // An event not yet fanned out is a delivery pending for each endpoint, due since it was made.
      const pending = (row?.pending ?? 0) + (row?.events ?? 0) * (row?.receivers ?? 0);
      return {
        /**
         * Deliveries to receiving endpoints not yet delivered nor failed, an event not yet fanned
         * out counting once per receiving endpoint, counted up to STATS_COUNT_LIMIT.
         */
        pending: Math.min(pending, STATS_COUNT_LIMIT),
        /** Failed deliveries waiting for a redelivery, counted up to STATS_COUNT_LIMIT. */
        failed: row?.failed ?? 0,
        /** How long the oldest delivery that is due (and not claimed) has waited, in seconds. */
        oldestDueSeconds: Math.max(0, row?.oldest_due ?? 0, row?.oldest_event ?? 0),
      };
    },
    /**
     * Deletes attempts and failed deliveries older than the retention (returns how many), and
     * the keys rotated out whose grace is over.
     */
    async sweep() {
      const [row] = await sweep.execute({ retention: logRetentionS });
      return row?.count ?? 0;
    },
  };
}
