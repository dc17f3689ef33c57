import { type SQL, sql } from 'drizzle-orm';
import type { Database } from '../../db/database.js';
import { prepareStatement } from '../../db/prepared.js';
import type { DeliveryTrigger } from '../tables/triggers.js';
import { missedLog } from './given-up.js';
import {
  type ClockReading,
  createClockReading,
  type PacedColumns,
  type Pacing,
  pacingOf,
} from './pacing.js';
import { ENGINE_TIMING, paceWindowMsFor } from './timing.js';

/** An endpoint as a claim reads it: what its next attempt is sent to and signed with. */
export type EndpointTarget = ClaimedDelivery['endpoint'];
/** A delivery this process holds the claim of, until `claimedAt + leaseMs`. */
export type ClaimedDelivery = ReturnType<typeof deliveryOf> & {
  /** Set when its endpoint has a rate limit: the slot its claim took for it. */
  pacing?: Pacing | undefined;
};

export const leaseEnd = (leaseMs: number) =>
  sql.raw(`now() + interval '${Math.trunc(leaseMs)} milliseconds'`);

/** The columns every claim returns: the delivery, and its endpoint's target when it has one. */
export interface DeliveryRow {
  id: string;
  event_id: string;
  endpoint_key: string;
  endpoint_url: string;
  secret: string;
  previous_secret: string | null;
  headers: string | null;
  endpoint_version: number;
  configured: boolean;
  body: string;
  /** Why the delivery exists (see tables/triggers.ts). */
  trigger: DeliveryTrigger;
  event_type: string;
  attempts: number;
  /** The row's count of claims, this one included, in decimal. */
  claims: string;
  created_ms: number;
}

/** A taken event, with one of its deliveries to attempt (id null when it has none). */
interface FanOutRow extends Omit<DeliveryRow, 'id'> {
  id: string | null;
  /** The event's row, in the order events were recorded. */
  position: string;
  traceparent: string | null;
  /** The rate-limited endpoints deliveries were written for, unclaimed: keys, comma-separated. */
  paced: string | null;
}

/**
 * The target of an endpoint's delivery, read beside it; the old key only within its grace. Its
 * version is updated_at, which every change sets to clock_timestamp(): a change that waited for
 * another change of the row reads it again after that one commits, so the last is the newest
 * (now() is when its transaction began, which may be before the other's).
 */
export const endpointColumns = sql.raw(`e.id::text as endpoint_key, e.url as endpoint_url,
  e.secret, case when e.previous_secret_until > now() then e.previous_secret end as previous_secret,
  e.headers, (extract(epoch from e.updated_at) * 1000)::float8 as endpoint_version, e.configured`);

/** Endpoints that receive: a configured one only while some running replica declares it. */
export const receiving = sql.raw('(not e.configured or e.declared_until > now())');
/** The deliveries `d` of the endpoint `endpoint` names that are due: not given up, their time come. */
const dueOf = (endpoint: SQL) => sql`webhook_deliveries as d
  where d.endpoint_id = ${endpoint} and d.failed_at is null and d.next_attempt_at <= now()`;
/** A fan-out's delivery is born claimed, unless born failed or due (only a claim paces). */
const bornClaimed = sql.raw('(not e.disabled and e.rate_limit is null)');

export function deliveryOf(row: DeliveryRow, claimedAt: number, traceparent?: string | null) {
  return {
    id: row.id,
    /** The event (a UUID): `webhook-id` is derived from it, the same on every attempt. */
    eventId: row.event_id,
    /** The endpoint, as it was when the delivery was claimed. */
    endpoint: {
      /** The endpoint's row key, in decimal. */
      key: row.endpoint_key,
      url: row.endpoint_url,
      /** The signing key, sealed (see security/secrets.ts). */
      secret: row.secret,
      /** The key before the last rotation, sealed, while it still signs. */
      previousSecret: row.previous_secret ?? undefined,
      /** Its custom headers, sealed (see security/custom-headers.ts); null when it has none. */
      headers: row.headers,
      /** When the endpoint was last changed (ms since the epoch): an older view is not applied. */
      version: row.endpoint_version,
      /** Declared by WEBHOOK_URLS: trusted (no private-network check), never disabled. */
      configured: row.configured,
    },
    /** The exact bytes to sign and send. */
    body: row.body,
    /** Why the delivery exists: its first attempt is logged with it, later ones as retries. */
    trigger: row.trigger,
    /** The type of its event (see catalog/event-types.ts). */
    eventType: row.event_type,
    /** This attempt's number, from 1. */
    attempt: row.attempts,
    /** The row's count of claims when this one was made: it fences the claim (see record). */
    claim: row.claims,
    /** performance.now() when the claiming statement was sent: the claim ends leaseMs later. */
    claimedAt,
    /** When the event was recorded (ms since the epoch). */
    createdAtMs: row.created_ms,
    /** The W3C trace context recorded with the event, on the deliveries its fan-out made. */
    traceparent: traceparent ?? undefined,
  };
}

export type Outbox = ReturnType<typeof createOutbox>;

/**
 * The statements that hand deliveries to dispatchers, each prepared once; a process holds the
 * deliveries it claims for `leaseMs`, then any process may claim them. `clock` reads the
 * database's slot times on this process's clock (a test's may read them as they are).
 */
export function createOutbox(
  db: Database,
  { leaseMs, clock = createClockReading() }: { leaseMs: number; clock?: ClockReading },
) {
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
          returning id, event_id, type, body, traceparent, created_at
        ),
        written as (
          insert into webhook_deliveries (event_id, endpoint_id, body, event_type, created_at,
                                          attempts, claims, next_attempt_at, failed_at, last_error)
          select taken.event_id, e.id, taken.body, taken.type, taken.created_at,
                 case when ${bornClaimed} then 1 else 0 end, case when ${bornClaimed} then 1 else 0 end,
                 case when ${bornClaimed} then ${leaseEnd(leaseMs)} else now() end,
                 case when e.disabled then now() end,
                 case when e.disabled then 'endpoint disabled' end
            from taken join webhook_endpoints as e
              on e.since_event < taken.id and ${receiving} and taken.type = any(e.events)
          returning id, event_id, endpoint_id, body, event_type, trigger, claims > 0 as claimed,
                    failed_at is not null as born_failed
        ),
        missed as (select endpoint_id, event_id, body, event_type from written where born_failed),
        ${missedLog('missed')}
        select taken.id::text as position, written.id::text as id,
               taken.event_id::text as event_id, ${endpointColumns}, taken.body,
               written.trigger, written.event_type,
               1 as attempts, '1' as claims, (extract(epoch from taken.created_at) * 1000)::float8 as created_ms,
               taken.traceparent,
               (select string_agg(distinct endpoint_id::text, ',') from written
                 where not claimed and not born_failed) as paced
          from taken
          left join written on written.event_id = taken.event_id and written.claimed
          left join webhook_endpoints as e on e.id = written.endpoint_id`,
  );
  // One statement for every endpoint: a poll costs the same with one endpoint or a hundred.
  // `= any(array(...))` runs the locking subquery once, so a claim takes at most its limit.
  // A rate-limited endpoint's row is locked (skipped if another claim holds it): the claim takes
  // its slots that begin within `paceWindowMs`, 1/rate_limit s apart from paced_until or the
  // lock, and moves paced_until past them. Without a limit, its row is neither locked nor written.
  const claimable = sql`not e.disabled and ${receiving}
    and (${sql.placeholder('only')}::int8 is null or e.id = ${sql.placeholder('only')}::int8)
    and e.id <> all(${sql.placeholder('busy')}::int8[])`;
  const claim = prepareStatement<DeliveryRow & PacedColumns>(
    db,
    'webhook_claim',
    sql`with pacing as (
          select e.id, e.rate_limit as rate, greatest(e.paced_until, c.now) as start,
                 ceil(extract(epoch from c.now - greatest(e.paced_until, c.now)
                        + ${sql.placeholder('paceWindowMs')}::float8 * interval '1 millisecond')
                      * e.rate_limit)::int4 as slots
            from webhook_endpoints as e, (select clock_timestamp() as now) as c
           where e.rate_limit is not null and ${claimable}
             -- Only an endpoint with something due: a poll locks and writes no other row.
             and exists (select 1 from ${dueOf(sql.raw('e.id'))})
             for no key update of e skip locked
        ),
        claimed as (
          update webhook_deliveries
             set attempts = attempts + 1, claims = claims + 1,
                 next_attempt_at = ${leaseEnd(leaseMs)}
           where id = any(array(
                   select due.id from webhook_endpoints as e
                    cross join lateral (
                      select id from ${dueOf(sql.raw('e.id'))}
                       order by d.next_attempt_at limit ${sql.placeholder('limit')}
                         for update skip locked) as due
                    where e.rate_limit is null and ${claimable})
                 || array(
                   select due.id from pacing as p
                    cross join lateral (
                      select id from ${dueOf(sql.raw('p.id'))}
                       order by d.next_attempt_at
                       limit least(${sql.placeholder('limit')}, greatest(p.slots, 0))
                         for update skip locked) as due))
          returning id, event_id, endpoint_id, body, trigger, event_type, attempts, claims, created_at
        ),
        slots as (
          select claimed.id, p.rate,
                 p.start + (row_number() over (partition by claimed.endpoint_id order by claimed.id) - 1)
                   * interval '1 second' / p.rate as start_at
            from claimed join pacing as p on p.id = claimed.endpoint_id
        ),
        moved as (
          update webhook_endpoints as e
             set paced_until = p.start + taken.n * interval '1 second' / p.rate
            from pacing as p,
                 (select endpoint_id, count(*) as n from claimed group by endpoint_id) as taken
           where e.id = p.id and taken.endpoint_id = p.id
          returning e.id, e.paced_until
        )
        select claimed.id::text as id, claimed.event_id::text as event_id,
               ${endpointColumns}, claimed.body, claimed.trigger, claimed.event_type,
               claimed.attempts, claimed.claims::text as claims,
               (extract(epoch from claimed.created_at) * 1000)::float8 as created_ms,
               (extract(epoch from slots.start_at) * 1000)::float8 as start_ms,
               (extract(epoch from moved.paced_until) * 1000)::float8 as next_ms,
               (extract(epoch from clock_timestamp()) * 1000)::float8 as ended_ms,
               slots.rate as rate_limit
          from claimed join webhook_endpoints as e on e.id = claimed.endpoint_id
          left join slots on slots.id = claimed.id
          left join moved on moved.id = claimed.endpoint_id`,
  );
  return {
    /**
     * Takes up to `limit` recorded events whose position is above `after`, oldest first, skipping
     * those another process is taking, and turns each into one delivery per receiving endpoint
     * made before it (see since_event) that lists its type in `events`, born claimed by this
     * process (attempt 1, for the lease); a disabled endpoint's is born failed ("endpoint
     * disabled") and logged so, and a rate-limited endpoint's is born due, for a claim to pace
     * (`paced` lists those endpoints). The events go. `last` is the position of the last event
     * taken.
     */
    async fanOut(limit: number, after: bigint) {
      const claimedAt = performance.now();
      const rows = await fanOut.execute({ limit, after });
      const positions = [...new Set(rows.map((row) => row.position))].map(BigInt);
      return {
        events: positions.length,
        last: positions.reduce<bigint | undefined>(
          (a, b) => (a === undefined || b > a ? b : a),
          undefined,
        ),
        deliveries: rows.flatMap((row) =>
          row.id === null ? [] : [deliveryOf({ ...row, id: row.id }, claimedAt, row.traceparent)],
        ),
        paced: rows[0]?.paced?.split(',') ?? [],
      };
    },
    /**
     * Claims due deliveries of enabled, receiving endpoints, up to `limit` per endpoint, oldest
     * first: of `only` when given, otherwise of every endpoint but those in `busy`. Of a
     * rate-limited endpoint, only as many as have a slot beginning within `paceWindowMs`, each
     * with its slot (see Pacing); none when another claim holds its row at that moment.
     */
    async claim(
      limit: number,
      only: string | undefined,
      busy: string[],
      paceWindowMs = paceWindowMsFor(ENGINE_TIMING.startWindowMs),
    ): Promise<ClaimedDelivery[]> {
      const claimedAt = performance.now();
      const rows = await claim.execute({ limit, only: only ?? null, busy, paceWindowMs });
      const answeredAt = performance.now();
      for (const row of rows) clock.observe(answeredAt, row.ended_ms);
      return rows.map((row) => ({
        ...deliveryOf(row, claimedAt),
        pacing: pacingOf(row, clock),
      }));
    },
  };
}
