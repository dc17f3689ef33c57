import { sql } from 'drizzle-orm';
import type { Database } from '../db/client.js';
import { prepareStatement } from '../db/prepared.js';

export interface OutboxStats {
  /**
   * Deliveries not yet delivered nor failed, an event not yet fanned out counting once per
   * receiving endpoint, counted up to STATS_COUNT_LIMIT.
   */
  pending: number;
  /** Failed deliveries waiting for a redelivery, counted up to STATS_COUNT_LIMIT. */
  failed: number;
  /** How long the oldest delivery that is due (and not claimed) has waited, in seconds. */
  oldestDueSeconds: number;
}

/** Counts stop here, so a scrape costs a bounded index scan however large a backlog grows. */
export const STATS_COUNT_LIMIT = 100_000;

/** Rows one sweep deletes at most from each table; the next sweep goes on. */
const SWEEP_LIMIT = 10_000;

export interface Upkeep {
  stats(): Promise<OutboxStats>;
  /**
   * Deletes attempts and failed deliveries older than the retention (returns how many), and
   * the keys rotated out whose grace is over.
   */
  sweep(): Promise<number>;
}

export function createUpkeep(db: Database, { logRetentionS }: { logRetentionS: number }): Upkeep {
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
          (select count(*) from (select 1 from webhook_deliveries where failed_at is null
                                  limit ${STATS_COUNT_LIMIT}) as p)::int4 as pending,
          (select count(*) from (select 1 from webhook_deliveries where failed_at is not null
                                  limit ${STATS_COUNT_LIMIT}) as f)::int4 as failed,
          (select extract(epoch from now() - min(due.next_attempt_at))::float8
             from webhook_endpoints as e
             cross join lateral (
               select next_attempt_at from webhook_deliveries
                where endpoint_id = e.id and failed_at is null and next_attempt_at <= now()
                order by next_attempt_at limit 1) as due
            where not e.disabled) as oldest_due,
          (select count(*) from webhook_endpoints as e
            where not e.disabled and (not e.configured or e.declared_until > now()))::int4
            as receivers,
          (select count(*) from (select 1 from webhook_events
                                  limit ${STATS_COUNT_LIMIT}) as e)::int4 as events,
          (select extract(epoch from now() - created_at)::float8 from webhook_events
            order by id limit 1) as oldest_event`,
  );
  const sweep = prepareStatement<{ count: number }>(
    db,
    'webhook_sweep',
    sql`with old_attempts as (
          delete from webhook_attempts
           where id = any(array(
                   select id from webhook_attempts
                    where attempted_at < now() - ${sql.placeholder('retention')}::int4 * interval '1 second'
                    limit ${SWEEP_LIMIT}))
          returning 1
        ),
        old_deliveries as (
          delete from webhook_deliveries
           where id = any(array(
                   select id from webhook_deliveries
                    where failed_at < now() - ${sql.placeholder('retention')}::int4 * interval '1 second'
                    limit ${SWEEP_LIMIT}))
          returning 1
        ),
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
        pending: Math.min(pending, STATS_COUNT_LIMIT),
        failed: row?.failed ?? 0,
        oldestDueSeconds: Math.max(0, row?.oldest_due ?? 0, row?.oldest_event ?? 0),
      };
    },
    async sweep() {
      const [row] = await sweep.execute({ retention: logRetentionS });
      return row?.count ?? 0;
    },
  };
}

/** Which failed deliveries to send again; every one when nothing is given. */
export interface RedeliveryFilter {
  /** Only those to endpoints of this URL. */
  url?: string | undefined;
  /** Only this event (its UUID). */
  eventId?: string | undefined;
  /** Only those that failed at or after this time. */
  failedSince?: Date | undefined;
}

/**
 * Makes failed deliveries due again with a fresh retry schedule, so that any running
 * dispatcher sends them within a poll interval. Returns how many; `dryRun` only counts them.
 */
export async function redeliverFailed(
  db: Database,
  filter: RedeliveryFilter,
  dryRun = false,
): Promise<number> {
  const where = sql`failed_at is not null
    and (${filter.url ?? null}::text is null
         or endpoint_id in (select id from webhook_endpoints where url = ${filter.url ?? null}::text))
    and (${filter.eventId ?? null}::uuid is null or event_id = ${filter.eventId ?? null}::uuid)
    and (${filter.failedSince?.toISOString() ?? null}::timestamptz is null
         or failed_at >= ${filter.failedSince?.toISOString() ?? null}::timestamptz)`;
  const query = dryRun
    ? sql`select count(*)::int4 as count from webhook_deliveries where ${where}`
    : sql`with redelivered as (
            update webhook_deliveries
               set failed_at = null, attempts = 0, next_attempt_at = now()
             where ${where}
            returning 1)
          select count(*)::int4 as count from redelivered`;
  const [row] = await prepareStatement<{ count: number }>(db, '', query).execute({});
  return row?.count ?? 0;
}
