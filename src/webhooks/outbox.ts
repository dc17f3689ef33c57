import { sql } from 'drizzle-orm';
import type { Database } from '../db/client.js';
import { prepareStatement } from '../db/prepared.js';

/** What the dispatcher's statements need to know. */
export interface OutboxOptions {
  /** Every event gets one delivery per URL. */
  urls: string[];
  /** How long a process holds the deliveries it claims before any process may claim them. */
  leaseMs: number;
}

/** A delivery this process holds the claim of, until `claimedAt + leaseMs`. */
export interface ClaimedDelivery {
  id: string;
  /** The event (a UUID): `webhook-id` is derived from it, the same on every attempt. */
  eventId: string;
  url: string;
  /** The exact bytes to sign and send. */
  body: string;
  /** This attempt's number, from 1; it fences the claim (see recordOutcomes). */
  attempt: number;
  /** performance.now() when the claiming statement was sent: the claim ends leaseMs later. */
  claimedAt: number;
  /** When the event was recorded (ms since the epoch). */
  createdAtMs: number;
  /** The W3C trace context recorded with the event, on the deliveries its fan-out made. */
  traceparent?: string | undefined;
}

const leaseEnd = (leaseMs: number) =>
  sql.raw(`now() + interval '${Math.trunc(leaseMs)} milliseconds'`);

/** How one attempt, or a claim given back, leaves its delivery. */
export type Outcome =
  /** Delivered: the row goes. */
  | { kind: 'delivered'; id: string }
  /** Failed; attempted again after `delayMs`. */
  | { kind: 'retry'; id: string; attempt: number; delayMs: number; status?: number; error: string }
  /** Given up: after the last attempt, or a 410. */
  | { kind: 'failed'; id: string; attempt: number; status?: number; error: string }
  /** Claimed but not attempted (shutdown, or no free slot in time): due again at once. */
  | { kind: 'released'; id: string; attempt: number };

interface ClaimRow {
  id: string;
  event_id: string;
  url: string;
  body: string;
  attempts: number;
  created_ms: number;
}

/** A taken event, with one of its deliveries (none, id and url null, when there is no URL). */
interface FanOutRow {
  /** The event's row, in the order events were recorded. */
  position: string;
  id: string | null;
  event_id: string;
  url: string | null;
  body: string;
  created_ms: number;
  traceparent: string | null;
}

export interface OutboxStats {
  /**
   * Deliveries not yet delivered nor failed, an event not yet fanned out counting once per URL,
   * counted up to STATS_COUNT_LIMIT.
   */
  pending: number;
  /** Failed deliveries waiting for a redelivery, counted up to STATS_COUNT_LIMIT. */
  failed: number;
  /** How long the oldest delivery that is due (and not claimed) has waited, in seconds. */
  oldestDueSeconds: number;
}

/** Counts stop here, so a scrape costs a bounded index scan however large a backlog grows. */
export const STATS_COUNT_LIMIT = 100_000;

export interface FanOut {
  events: number;
  /** The position of the last event taken; undefined when none was. */
  last: bigint | undefined;
  deliveries: ClaimedDelivery[];
}

export interface Outbox {
  /**
   * Takes up to `limit` recorded events whose position is above `after`, oldest first, skipping
   * those another process is taking, and turns each into one delivery per URL, born claimed by
   * this process (attempt 1, for the lease); the events go. Returns how many events it took, the
   * highest position among them, and their deliveries.
   */
  fanOut(limit: number, after: bigint): Promise<FanOut>;
  /** Claims up to `limit` due deliveries of `url`, oldest first, skipping rows others hold. */
  claim(url: string, limit: number): Promise<ClaimedDelivery[]>;
  /** Records what became of attempts; a stale claim (another attempt since) changes nothing. */
  recordOutcomes(outcomes: Outcome[]): Promise<void>;
  stats(): Promise<OutboxStats>;
}

/** The statements of the dispatcher, each prepared once. */
export function createOutbox(db: Database, options: OutboxOptions): Outbox {
  // One statement, one transaction: an event goes only with its deliveries written, so one
  // taken by a process that dies before the commit stays for the next fan-out of any process.
  const fanOut = prepareStatement<FanOutRow>(
    db,
    'webhook_fan_out',
    sql`with taken as (
          delete from webhook_events
           where id = any(array(
                   select id from webhook_events where id > ${sql.placeholder('after')}
                    order by id limit ${sql.placeholder('limit')}
                      for update skip locked))
          returning id, event_id, body, traceparent, created_at
        ),
        written as (
          insert into webhook_deliveries
                 (event_id, url, body, created_at, attempts, next_attempt_at)
          select taken.event_id, urls.url, taken.body, taken.created_at, 1,
                 ${leaseEnd(options.leaseMs)}
            from taken cross join unnest(${sql.placeholder('urls')}::text[]) as urls(url)
          returning id, event_id, url
        )
        select taken.id::text as position, written.id::text as id,
               taken.event_id::text as event_id, written.url, taken.body,
               (extract(epoch from taken.created_at) * 1000)::float8 as created_ms,
               taken.traceparent
          from taken left join written on written.event_id = taken.event_id`,
  );
  // `= any(array(...))` runs the locking subquery once, so a claim takes at most `limit` rows.
  const claim = prepareStatement<ClaimRow>(
    db,
    'webhook_claim',
    sql`update webhook_deliveries
           set attempts = attempts + 1, next_attempt_at = ${leaseEnd(options.leaseMs)}
         where id = any(array(
                 select id from webhook_deliveries
                  where url = ${sql.placeholder('url')} and failed_at is null
                    and next_attempt_at <= now()
                  order by next_attempt_at
                  limit ${sql.placeholder('limit')}
                    for update skip locked))
     returning id::text as id, event_id::text as event_id, url, body, attempts,
               (extract(epoch from created_at) * 1000)::float8 as created_ms`,
  );
  const deleteDelivered = prepareStatement(
    db,
    'webhook_delete_delivered',
    sql`delete from webhook_deliveries where id = any(${sql.placeholder('ids')}::int8[])`,
  );
  // A null delay gives the delivery up. The attempt number fences the claim: if it expired and
  // another process claimed the row again, this outcome is stale and matches nothing.
  const reschedule = prepareStatement(
    db,
    'webhook_reschedule',
    sql`update webhook_deliveries as d
           set next_attempt_at = now() + coalesce(o.delay_ms, 0) * interval '1 millisecond',
               failed_at = case when o.delay_ms is null then now() end,
               last_status = o.status,
               last_error = o.error
          from unnest(${sql.placeholder('ids')}::int8[], ${sql.placeholder('attempts')}::int4[],
                      ${sql.placeholder('delays')}::float8[], ${sql.placeholder('statuses')}::int4[],
                      ${sql.placeholder('errors')}::text[]) as o(id, attempt, delay_ms, status, error)
         where d.id = o.id and d.attempts = o.attempt`,
  );
  // Not attempted: the claim did not start an attempt, so it does not count as one.
  const release = prepareStatement(
    db,
    'webhook_release',
    sql`update webhook_deliveries as d
           set next_attempt_at = now(), attempts = d.attempts - 1
          from unnest(${sql.placeholder('ids')}::int8[], ${sql.placeholder('attempts')}::int4[])
            as o(id, attempt)
         where d.id = o.id and d.attempts = o.attempt`,
  );
  const stats = prepareStatement<{
    pending: number;
    failed: number;
    oldest_due: number | null;
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
             from unnest(${sql.placeholder('urls')}::text[]) as urls(url)
             cross join lateral (
               select next_attempt_at from webhook_deliveries
                where url = urls.url and failed_at is null and next_attempt_at <= now()
                order by next_attempt_at limit 1) as due) as oldest_due,
          (select count(*) from (select 1 from webhook_events
                                  limit ${STATS_COUNT_LIMIT}) as e)::int4 as events,
          (select extract(epoch from now() - created_at)::float8 from webhook_events
            order by id limit 1) as oldest_event`,
  );

  return {
    async fanOut(limit, after) {
      const claimedAt = performance.now();
      const rows = await fanOut.execute({ limit, after, urls: options.urls });
      const events = new Set<string>();
      let last: bigint | undefined;
      const deliveries: ClaimedDelivery[] = [];
      for (const row of rows) {
        if (!events.has(row.position)) {
          events.add(row.position);
          const position = BigInt(row.position);
          if (last === undefined || position > last) last = position;
        }
        if (row.id === null || row.url === null) continue;
        deliveries.push({
          id: row.id,
          eventId: row.event_id,
          url: row.url,
          body: row.body,
          attempt: 1,
          claimedAt,
          createdAtMs: row.created_ms,
          traceparent: row.traceparent ?? undefined,
        });
      }
      return { events: events.size, last, deliveries };
    },
    async claim(url, limit) {
      const claimedAt = performance.now();
      const rows = await claim.execute({ url, limit });
      return rows.map((row) => ({
        id: row.id,
        eventId: row.event_id,
        url: row.url,
        body: row.body,
        attempt: row.attempts,
        claimedAt,
        createdAtMs: row.created_ms,
      }));
    },
    async recordOutcomes(outcomes) {
      const delivered: string[] = [];
      const settled: Array<Extract<Outcome, { kind: 'retry' | 'failed' }>> = [];
      const released: Array<Extract<Outcome, { kind: 'released' }>> = [];
      for (const outcome of outcomes) {
        if (outcome.kind === 'delivered') delivered.push(outcome.id);
        else if (outcome.kind === 'released') released.push(outcome);
        else settled.push(outcome);
      }
      const statements: Promise<unknown>[] = [];
      if (delivered.length > 0) statements.push(deleteDelivered.execute({ ids: delivered }));
      if (settled.length > 0) {
        statements.push(
          reschedule.execute({
            ids: settled.map((o) => o.id),
            attempts: settled.map((o) => o.attempt),
            delays: settled.map((o) => (o.kind === 'retry' ? o.delayMs : null)),
            statuses: settled.map((o) => o.status ?? null),
            errors: settled.map((o) => o.error),
          }),
        );
      }
      if (released.length > 0) {
        statements.push(
          release.execute({
            ids: released.map((o) => o.id),
            attempts: released.map((o) => o.attempt),
          }),
        );
      }
      await Promise.all(statements);
    },
    async stats() {
      const [row] = await stats.execute({ urls: options.urls });
      // An event not yet fanned out is a delivery pending for each URL, due since it was made.
      const pending = (row?.pending ?? 0) + (row?.events ?? 0) * options.urls.length;
      return {
        pending: Math.min(pending, STATS_COUNT_LIMIT),
        failed: row?.failed ?? 0,
        oldestDueSeconds: Math.max(0, row?.oldest_due ?? 0, row?.oldest_event ?? 0),
      };
    },
  };
}

/** Which failed deliveries to send again; every one when nothing is given. */
export interface RedeliveryFilter {
  /** Only those to this URL. */
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
    and (${filter.url ?? null}::text is null or url = ${filter.url ?? null}::text)
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
