import { sql } from 'drizzle-orm';
import type { Database } from '../db/client.js';
import { prepareStatement } from '../db/prepared.js';
import { missedLog, NEXT_EVENT, SUBSCRIPTION_LOCKED } from './endpoints.js';

/** What the dispatcher's statements need to know. */
export interface OutboxOptions {
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
  /** Declared by WEBHOOK_URLS: trusted (no private-network check), never disabled. */
  configured: boolean;
}

/** A delivery this process holds the claim of, until `claimedAt + leaseMs`. */
export interface ClaimedDelivery {
  id: string;
  /** The event (a UUID): `webhook-id` is derived from it, the same on every attempt. */
  eventId: string;
  /** The endpoint, as it was when the delivery was claimed. */
  endpoint: EndpointTarget;
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

export const leaseEnd = (leaseMs: number) =>
  sql.raw(`now() + interval '${Math.trunc(leaseMs)} milliseconds'`);

/** The columns every claim returns: the delivery, and its endpoint's target when it has one. */
interface DeliveryRow {
  id: string;
  event_id: string;
  endpoint_key: string;
  endpoint_url: string;
  secret: string;
  previous_secret: string | null;
  endpoint_version: number;
  configured: boolean;
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
  (extract(epoch from e.updated_at) * 1000)::float8 as endpoint_version, e.configured`);

/** Endpoints that receive: a configured one only while some running replica declares it. */
const receiving = sql.raw('(not e.configured or e.declared_until > now())');

function deliveryOf(row: DeliveryRow, claimedAt: number, traceparent?: string | null) {
  return {
    id: row.id,
    eventId: row.event_id,
    endpoint: {
      key: row.endpoint_key,
      url: row.endpoint_url,
      secret: row.secret,
      previousSecret: row.previous_secret ?? undefined,
      version: row.endpoint_version,
      configured: row.configured,
    },
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
   * those another process is taking, and turns each into one delivery per receiving endpoint
   * made before it (see since_event), born claimed by this process (attempt 1, for the lease);
   * a disabled endpoint's is born failed ("endpoint disabled") and logged so. The events go.
   */
  fanOut(limit: number, after: bigint): Promise<FanOut>;
  /**
   * Claims due deliveries of enabled, receiving endpoints, up to `limit` per endpoint, oldest
   * first: of `only` when given, otherwise of every endpoint but those in `busy`.
   */
  claim(limit: number, only: string | undefined, busy: string[]): Promise<ClaimedDelivery[]>;
  /**
   * Declares the WEBHOOK_URLS endpoints, signed with `secret` (sealed), until `untilMs` from
   * now, and moves to them the deliveries older releases wrote by URL. `secret` undefined only
   * renews the declaration.
   */
  declare(urls: string[], secret: string | undefined, untilMs: number): Promise<void>;
}

/** The statements that hand deliveries to dispatchers, each prepared once. */
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
          insert into webhook_deliveries (event_id, endpoint_id, body, created_at, attempts,
                                          next_attempt_at, failed_at, last_error)
          select taken.event_id, e.id, taken.body, taken.created_at,
                 case when e.disabled then 0 else 1 end,
                 case when e.disabled then now() else ${leaseEnd(options.leaseMs)} end,
                 case when e.disabled then now() end,
                 case when e.disabled then 'endpoint disabled' end
            from taken join webhook_endpoints as e
              on e.since_event < taken.id and ${receiving}
          returning id, event_id, endpoint_id, body, failed_at is null as claimed
        ),
        missed as (select endpoint_id, event_id, body from written where not claimed),
        ${missedLog('missed')}
        select taken.id::text as position, written.id::text as id,
               taken.event_id::text as event_id, ${endpointColumns}, taken.body,
               1 as attempts, (extract(epoch from taken.created_at) * 1000)::float8 as created_ms,
               taken.traceparent
          from taken
          left join written on written.event_id = taken.event_id and written.claimed
          left join webhook_endpoints as e on e.id = written.endpoint_id`,
  );
  // One statement for every endpoint: a poll costs the same with one endpoint or a hundred.
  // `= any(array(...))` runs the locking subquery once, so a claim takes at most its limit.
  const claim = prepareStatement<DeliveryRow>(
    db,
    'webhook_claim',
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
                    where not e.disabled and ${receiving}
                      and (${sql.placeholder('only')}::int8 is null
                           or e.id = ${sql.placeholder('only')}::int8)
                      and e.id <> all(${sql.placeholder('busy')}::int8[])))
          returning id, event_id, endpoint_id, body, attempts, created_at
        )
        select claimed.id::text as id, claimed.event_id::text as event_id,
               ${endpointColumns}, claimed.body, claimed.attempts,
               (extract(epoch from claimed.created_at) * 1000)::float8 as created_ms
          from claimed join webhook_endpoints as e on e.id = claimed.endpoint_id`,
  );
  // A URL declared for the first time takes the subscription lock, as any new endpoint does;
  // one already declared is updated first, so a restart uses up no id.
  const declare = prepareStatement(
    db,
    'webhook_declare',
    sql`with updated as (
          update webhook_endpoints
             set secret = ${sql.placeholder('secret')}::text, updated_at = now(),
                 declared_until = now() + ${sql.placeholder('untilMs')}::int4 * interval '1 millisecond'
           where configured and url = any(${sql.placeholder('urls')}::text[])
          returning id, url
        ),
        inserted as (
          insert into webhook_endpoints (url, secret, configured, declared_until, since_event)
          select urls.url, ${sql.placeholder('secret')}::text, true,
                 now() + ${sql.placeholder('untilMs')}::int4 * interval '1 millisecond', ${NEXT_EVENT}
            from ${SUBSCRIPTION_LOCKED}, unnest(${sql.placeholder('urls')}::text[]) as urls(url)
           where urls.url not in (select url from updated)
          on conflict (url) where configured do nothing
          returning id, url
        ),
        declared as (select * from updated union all select * from inserted)
        update webhook_deliveries as d set endpoint_id = declared.id, url = null
          from declared where d.url = declared.url`,
  );
  const renew = prepareStatement(
    db,
    'webhook_declare_again',
    sql`with renewed as (
          update webhook_endpoints
             set declared_until = greatest(declared_until,
                   now() + ${sql.placeholder('untilMs')}::int4 * interval '1 millisecond')
           where configured and url = any(${sql.placeholder('urls')}::text[])
          returning id, url
        )
        update webhook_deliveries as d set endpoint_id = renewed.id, url = null
          from renewed where d.url = renewed.url`,
  );

  return {
    async fanOut(limit, after) {
      const claimedAt = performance.now();
      const rows = await fanOut.execute({ limit, after });
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
    async claim(limit, only, busy) {
      const claimedAt = performance.now();
      const rows = await claim.execute({ limit, only: only ?? null, busy });
      return rows.map((row) => deliveryOf(row, claimedAt));
    },
    async declare(urls, secret, untilMs) {
      if (urls.length === 0) return;
      const values = { urls, untilMs: Math.trunc(untilMs) };
      await (secret === undefined ? renew.execute(values) : declare.execute({ ...values, secret }));
    },
  };
}
