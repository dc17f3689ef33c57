import { sql } from 'drizzle-orm';
import type { Database } from '../db/client.js';
import { prepareStatement } from '../db/prepared.js';
import { missedLog } from './endpoints.js';

/** What the dispatcher's statements need to know. */
export interface OutboxOptions {
  /** The static subscribers: every event gets one delivery per URL. */
  urls: string[];
  /** How long a process holds the deliveries it claims before any process may claim them. */
  leaseMs: number;
}

/** An endpoint as a claim reads it: what its next attempt is sent to and signed with. */
export interface EndpointTarget {
  /** The endpoint's row key, in decimal. */
  key: string;
  url: string;
  /** The signing key, sealed (see secrets.ts). */
  secret: string;
  /** The key before the last rotation, sealed, while it still signs. */
  previousSecret: string | undefined;
  /** When the endpoint was last changed (ms since the epoch): an older view is not applied. */
  version: number;
}

/**
 * An endpoint's delivery is attempted within this long of its claim, or given back: so an
 * attempt that starts this long after a change to its endpoint committed was claimed after it,
 * and uses the endpoint as it now is, on every replica (the claim reads the row).
 */
export const ENDPOINT_START_WINDOW_MS = 1000;

/** A delivery this process holds the claim of, until `claimedAt + leaseMs`. */
export interface ClaimedDelivery {
  id: string;
  /** The event (a UUID): `webhook-id` is derived from it, the same on every attempt. */
  eventId: string;
  /** A static subscriber's URL; undefined for an endpoint's delivery. */
  url: string | undefined;
  /** The endpoint, as it was when the delivery was claimed; undefined for a static URL. */
  endpoint: EndpointTarget | undefined;
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

/** The queue a delivery waits in: one per static URL and one per endpoint. */
export const laneKeyOf = (delivery: Pick<ClaimedDelivery, 'url' | 'endpoint'>) =>
  delivery.url ?? `endpoint:${delivery.endpoint?.key}`;

export const leaseEnd = (leaseMs: number) =>
  sql.raw(`now() + interval '${Math.trunc(leaseMs)} milliseconds'`);

/** The columns every claim returns: the delivery, and its endpoint's target when it has one. */
interface DeliveryRow {
  id: string;
  event_id: string;
  url: string | null;
  endpoint_key: string | null;
  endpoint_url: string | null;
  secret: string | null;
  previous_secret: string | null;
  endpoint_version: number | null;
  body: string;
  attempts: number;
  created_ms: number;
}

/** A taken event, with one of its deliveries to attempt (id null when it has none). */
interface FanOutRow extends Omit<DeliveryRow, 'id'> {
  id: string | null;
  /** The event's row, in the order events were recorded. */
  position: string;
  traceparent: string | null;
}

/** The target of an endpoint's delivery, read beside it; the old key only within its grace. */
const endpointColumns = sql.raw(`e.id::text as endpoint_key, e.url as endpoint_url,
  e.secret, case when e.previous_secret_until > now() then e.previous_secret end as previous_secret,
  (extract(epoch from e.updated_at) * 1000)::float8 as endpoint_version`);

function deliveryOf(row: DeliveryRow, claimedAt: number, traceparent?: string | null) {
  const endpoint: EndpointTarget | undefined =
    row.endpoint_key === null
      ? undefined
      : {
          key: row.endpoint_key,
          url: row.endpoint_url ?? '',
          secret: row.secret ?? '',
          previousSecret: row.previous_secret ?? undefined,
          version: row.endpoint_version ?? 0,
        };
  return {
    id: row.id,
    eventId: row.event_id,
    url: row.url ?? undefined,
    endpoint,
    body: row.body,
    attempt: row.attempts,
    claimedAt,
    createdAtMs: row.created_ms,
    traceparent: traceparent ?? undefined,
  } satisfies ClaimedDelivery;
}

export interface FanOut {
  events: number;
  /** The position of the last event taken; undefined when none was. */
  last: bigint | undefined;
  deliveries: ClaimedDelivery[];
}

export interface Outbox {
  /**
   * Takes up to `limit` recorded events whose position is above `after`, oldest first, skipping
   * those another process is taking, and turns each into one delivery per static URL and per
   * endpoint whose creating transaction started before the event's, born claimed by this process (attempt 1,
   * for the lease); a disabled endpoint's is born failed ("endpoint disabled"). The events go.
   */
  fanOut(limit: number, after: bigint): Promise<FanOut>;
  /** Claims up to `limit` due deliveries of `url`, oldest first, skipping rows others hold. */
  claim(url: string, limit: number): Promise<ClaimedDelivery[]>;
  /**
   * Claims due deliveries of enabled endpoints, up to `limit` per endpoint, oldest first: of
   * `only` when given, otherwise of every endpoint but those in `busy`.
   */
  claimForEndpoints(
    limit: number,
    only: string | undefined,
    busy: string[],
  ): Promise<ClaimedDelivery[]>;
}

/** The statements that hand deliveries to dispatchers, each prepared once. */
export function createOutbox(db: Database, options: OutboxOptions): Outbox {
  // One statement, one transaction: an event goes only with its deliveries written, so one
  // taken by a process that dies before the commit stays for the next fan-out of any process.
  // An endpoint gets the events recorded after it was made (both times are of their
  // transactions' starts, from one clock).
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
        targets as (
          select urls.url, null::int8 as endpoint_id, false as disabled, null::timestamptz as since
            from unnest(${sql.placeholder('urls')}::text[]) as urls(url)
          union all
          select null, id, disabled, created_at from webhook_endpoints
        ),
        written as (
          insert into webhook_deliveries (event_id, url, endpoint_id, body, created_at, attempts,
                                          next_attempt_at, failed_at, last_error)
          select taken.event_id, targets.url, targets.endpoint_id, taken.body, taken.created_at,
                 case when targets.disabled then 0 else 1 end,
                 case when targets.disabled then now() else ${leaseEnd(options.leaseMs)} end,
                 case when targets.disabled then now() end,
                 case when targets.disabled then 'endpoint disabled' end
            from taken join targets
              on targets.since is null or targets.since <= taken.created_at
          returning id, event_id, url, endpoint_id, body, failed_at is null as claimed
        ),
        missed as (select endpoint_id, event_id, body from written where not claimed),
        ${missedLog('missed')}
        select taken.id::text as position, written.id::text as id,
               taken.event_id::text as event_id, written.url, ${endpointColumns}, taken.body,
               1 as attempts, (extract(epoch from taken.created_at) * 1000)::float8 as created_ms,
               taken.traceparent
          from taken
          left join written on written.event_id = taken.event_id and written.claimed
          left join webhook_endpoints as e on e.id = written.endpoint_id`,
  );
  // `= any(array(...))` runs the locking subquery once, so a claim takes at most `limit` rows.
  const claim = prepareStatement<DeliveryRow>(
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
     returning id::text as id, event_id::text as event_id, url, null::text as endpoint_key,
               null::text as endpoint_url, null::text as secret, null::text as previous_secret,
               null::float8 as endpoint_version, body, attempts, (extract(epoch from created_at) * 1000)::float8 as created_ms`,
  );
  // One statement for every endpoint: a poll costs the same with one endpoint or a hundred.
  const claimForEndpoints = prepareStatement<DeliveryRow>(
    db,
    'webhook_claim_endpoints',
    sql`with claimed as (
          update webhook_deliveries
             set attempts = attempts + 1, next_attempt_at = ${leaseEnd(options.leaseMs)}
           where id = any(array(
                   select due.id from webhook_endpoints as e
                    cross join lateral (
                      select id from webhook_deliveries as d
                       where d.endpoint_id = e.id and d.failed_at is null
                         and d.next_attempt_at <= now()
                       order by d.next_attempt_at
                       limit ${sql.placeholder('limit')}
                         for update skip locked) as due
                    where not e.disabled
                      and (${sql.placeholder('only')}::int8 is null
                           or e.id = ${sql.placeholder('only')}::int8)
                      and e.id <> all(${sql.placeholder('busy')}::int8[])))
          returning id, event_id, endpoint_id, body, attempts, created_at
        )
        select claimed.id::text as id, claimed.event_id::text as event_id, null::text as url,
               ${endpointColumns}, claimed.body, claimed.attempts,
               (extract(epoch from claimed.created_at) * 1000)::float8 as created_ms
          from claimed join webhook_endpoints as e on e.id = claimed.endpoint_id`,
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
        if (row.id === null) continue;
        deliveries.push(deliveryOf({ ...row, id: row.id }, claimedAt, row.traceparent));
      }
      return { events: events.size, last, deliveries };
    },
    async claim(url, limit) {
      const claimedAt = performance.now();
      const rows = await claim.execute({ url, limit });
      return rows.map((row) => deliveryOf(row, claimedAt));
    },
    async claimForEndpoints(limit, only, busy) {
      const claimedAt = performance.now();
      const rows = await claimForEndpoints.execute({ limit, only: only ?? null, busy });
      return rows.map((row) => deliveryOf(row, claimedAt));
    },
  };
}
