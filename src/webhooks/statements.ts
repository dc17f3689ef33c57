import { sql } from 'drizzle-orm';
import type { Database } from '../db/client.js';
import { prepareStatement } from '../db/prepared.js';
import {
  givenUp,
  missedLog,
  NEXT_ENDPOINT,
  NEXT_EVENT,
  SUBSCRIPTION_LOCKED,
  subscriptionLockedIf,
} from './endpoints.js';
import { createClockReading, type PacedColumns, type Pacing, pacingOf } from './pacing.js';
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
const endpointColumns = sql.raw(`e.id::text as endpoint_key, e.url as endpoint_url,
  e.secret, case when e.previous_secret_until > now() then e.previous_secret end as previous_secret,
  (extract(epoch from e.updated_at) * 1000)::float8 as endpoint_version, e.configured`);

/** Endpoints that receive: a configured one only while some running replica declares it. */
const receiving = sql.raw('(not e.configured or e.declared_until > now())');
/** A configured endpoint no running replica declares. */
const lapsed = sql.raw('not coalesce(e.declared_until > now(), false)');
/** A fan-out's delivery is born claimed, unless born failed or due (only a claim paces). */
const bornClaimed = sql.raw('(not e.disabled and e.rate_limit is null)');
/** A lapsed endpoint declared again receives the events after it, as a new endpoint does. */
const sinceIfLapsed = sql`case when ${lapsed} then ${NEXT_EVENT} else e.since_event end`;

function deliveryOf(row: DeliveryRow, claimedAt: number, traceparent?: string | null) {
  return {
    id: row.id,
    /** The event (a UUID): `webhook-id` is derived from it, the same on every attempt. */
    eventId: row.event_id,
    /** The endpoint, as it was when the delivery was claimed. */
    endpoint: {
      /** The endpoint's row key, in decimal. */
      key: row.endpoint_key,
      url: row.endpoint_url,
      /** The signing key, sealed (see secrets.ts). */
      secret: row.secret,
      /** The key before the last rotation, sealed, while it still signs. */
      previousSecret: row.previous_secret ?? undefined,
      /** When the endpoint was last changed (ms since the epoch): an older view is not applied. */
      version: row.endpoint_version,
      /** Declared by WEBHOOK_URLS: trusted (no private-network check), never disabled. */
      configured: row.configured,
    },
    /** The exact bytes to sign and send. */
    body: row.body,
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
 * deliveries it claims for `leaseMs`, then any process may claim them.
 */
export function createOutbox(db: Database, { leaseMs }: { leaseMs: number }) {
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
                                          claims, next_attempt_at, failed_at, last_error)
          select taken.event_id, e.id, taken.body, taken.created_at,
                 case when ${bornClaimed} then 1 else 0 end, case when ${bornClaimed} then 1 else 0 end,
                 case when ${bornClaimed} then ${leaseEnd(leaseMs)} else now() end,
                 case when e.disabled then now() end,
                 case when e.disabled then 'endpoint disabled' end
            from taken join webhook_endpoints as e
              on e.since_event < taken.id and ${receiving}
          returning id, event_id, endpoint_id, body, claims > 0 as claimed,
                    failed_at is not null as born_failed
        ),
        missed as (select endpoint_id, event_id, body from written where born_failed),
        ${missedLog('missed')}
        select taken.id::text as position, written.id::text as id,
               taken.event_id::text as event_id, ${endpointColumns}, taken.body,
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
  const clock = createClockReading();
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
             for no key update of e skip locked
        ),
        claimed as (
          update webhook_deliveries
             set attempts = attempts + 1, claims = claims + 1,
                 next_attempt_at = ${leaseEnd(leaseMs)}
           where id = any(array(
                   select due.id from webhook_endpoints as e
                    cross join lateral (
                      select id from webhook_deliveries as d
                       where d.endpoint_id = e.id and d.failed_at is null
                         and d.next_attempt_at <= now()
                       order by d.next_attempt_at
                       limit ${sql.placeholder('limit')}
                         for update skip locked) as due
                    where e.rate_limit is null and ${claimable})
                 || array(
                   select due.id from pacing as p
                    cross join lateral (
                      select id from webhook_deliveries as d
                       where d.endpoint_id = p.id and d.failed_at is null
                         and d.next_attempt_at <= now()
                       order by d.next_attempt_at
                       limit least(${sql.placeholder('limit')}, greatest(p.slots, 0))
                         for update skip locked) as due))
          returning id, event_id, endpoint_id, body, attempts, claims, created_at
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
               ${endpointColumns}, claimed.body, claimed.attempts, claimed.claims::text as claims,
               (extract(epoch from claimed.created_at) * 1000)::float8 as created_ms,
               (extract(epoch from slots.start_at) * 1000)::float8 as start_ms,
               (extract(epoch from moved.paced_until) * 1000)::float8 as next_ms,
               (extract(epoch from clock_timestamp()) * 1000)::float8 as ended_ms,
               slots.rate as rate_limit
          from claimed join webhook_endpoints as e on e.id = claimed.endpoint_id
          left join slots on slots.id = claimed.id
          left join moved on moved.id = claimed.endpoint_id`,
  );
  // The secret is sealed for its row: a URL's key is its row's, or drawn for the insert (only
  // when there is none, so a restart uses up no id).
  const declaredKeys = prepareStatement<{ url: string; id: string }>(
    db,
    'webhook_declare_keys',
    sql`select urls.url,
               coalesce((select e.id from webhook_endpoints as e
                          where e.configured and e.url = urls.url), ${NEXT_ENDPOINT})::text as id
          from unnest(${sql.placeholder('urls')}::text[]) as urls(url)`,
  );
  // A URL declared for the first time, or again after it lapsed, takes the subscription lock,
  // as any new endpoint does.
  // A row whose key is not the one sealed for (another replica inserted it meanwhile) is left
  // as it is and its URL not returned, to be sealed again for that row.
  const declare = prepareStatement<{ url: string }>(
    db,
    'webhook_declare',
    sql`with given as (
          select * from unnest(${sql.placeholder('urls')}::text[], ${sql.placeholder('ids')}::int8[],
                               ${sql.placeholder('secrets')}::text[]) as given(url, id, secret)
        ),
        updated as (
          update webhook_endpoints as e
             set secret = given.secret, updated_at = clock_timestamp(), since_event = ${sinceIfLapsed},
                 declared_until = now() + ${sql.placeholder('untilMs')}::int4 * interval '1 millisecond'
            from given, ${subscriptionLockedIf(sql`select 1 from webhook_endpoints as e join given
                                                     on e.configured and e.url = given.url
                                                  where ${lapsed}`)}
           where e.configured and e.url = given.url and e.id = given.id
          returning e.id, e.url
        ),
        inserted as (
          insert into webhook_endpoints (id, url, secret, configured, declared_until, since_event)
          overriding system value
          select given.id, given.url, given.secret, true,
                 now() + ${sql.placeholder('untilMs')}::int4 * interval '1 millisecond', ${NEXT_EVENT}
            from ${SUBSCRIPTION_LOCKED}, given
           where given.url not in (select url from updated)
          on conflict (url) where configured do nothing
          returning id, url
        ),
        declared as (select * from updated union all select * from inserted),
        moved as (
          update webhook_deliveries as d set endpoint_id = declared.id, url = null
            from declared where d.url = declared.url
        )
        select url from declared`,
  );
  const renew = prepareStatement(
    db,
    'webhook_declare_again',
    sql`with renewed as (
          update webhook_endpoints as e
             set since_event = ${sinceIfLapsed}, declared_until = greatest(e.declared_until,
                   now() + ${sql.placeholder('untilMs')}::int4 * interval '1 millisecond')
            from ${subscriptionLockedIf(sql`select 1 from webhook_endpoints as e
                                                where e.configured and ${lapsed}
                                                  and e.url = any(${sql.placeholder('urls')}::text[])`)}
           where e.configured and e.url = any(${sql.placeholder('urls')}::text[])
          returning e.id, e.url
        )
        update webhook_deliveries as d set endpoint_id = renewed.id, url = null
          from renewed where d.url = renewed.url`,
  );

  return {
    /**
     * Takes up to `limit` recorded events whose position is above `after`, oldest first, skipping
     * those another process is taking, and turns each into one delivery per receiving endpoint
     * made before it (see since_event), born claimed by this process (attempt 1, for the lease);
     * a disabled endpoint's is born failed ("endpoint disabled") and logged so, and a
     * rate-limited endpoint's is born due, for a claim to pace (`paced` lists those endpoints).
     * The events go. `last` is the position of the last event taken.
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
    /**
     * Declares the WEBHOOK_URLS endpoints, signed with the secret `sealFor` seals for each row
     * key, until `untilMs` from now, and moves to them the deliveries older releases wrote by
     * URL. `sealFor` undefined only renews the declaration.
     */
    async declare(
      urls: string[],
      sealFor: ((endpoint: string) => string) | undefined,
      untilMs: number,
    ) {
      if (urls.length === 0) return;
      if (sealFor === undefined) {
        await renew.execute({ urls, untilMs: Math.trunc(untilMs) });
        return;
      }
      let due = urls;
      // A second round finds the row another replica inserted; a third is only for a deletion.
      for (let round = 0; round < 3 && due.length > 0; round++) {
        const keys = await declaredKeys.execute({ urls: due });
        const declared = await declare.execute({
          urls: keys.map((row) => row.url),
          ids: keys.map((row) => row.id),
          secrets: keys.map((row) => sealFor(row.id)),
          untilMs: Math.trunc(untilMs),
        });
        const done = new Set(declared.map((row) => row.url));
        due = due.filter((url) => !done.has(url));
      }
      if (due.length > 0) throw new Error(`${due.length} WEBHOOK_URLS could not be declared`);
    },
  };
}

/** What the attempt log keeps of an attempt to an endpoint. */
export interface AttemptRecord {
  /** The endpoint's row key, in decimal. */
  endpoint: string;
  eventId: string;
  /** The plant's id, in decimal, read from the body; undefined when it has none. */
  plantId: string | undefined;
  succeeded: boolean;
  status?: number | undefined;
  error?: string | undefined;
  durationMs: number;
  /** When the attempt started (ms since the epoch). */
  attemptedAtMs: number;
  /** The receiver answered 410 Gone: its endpoint is disabled at once. */
  gone: boolean;
}

/** How one attempt, or a claim given back, leaves its delivery. */
export type Outcome = (
  | /** Delivered: the row goes. */ { kind: 'delivered'; id: string }
  /** Failed; attempted again after `delayMs`. */
  | { kind: 'retry'; id: string; claim: string; delayMs: number; status?: number; error: string }
  /** Given up: after the last attempt, or a 410. */
  | { kind: 'failed'; id: string; claim: string; status?: number; error: string }
  /** Claimed but not attempted (shutdown, or no free slot in time): due again at once. */
  | { kind: 'released'; id: string; claim: string }
) & {
  /** For an attempt made to an endpoint: what its attempt log and its health learn. */
  record?: AttemptRecord | undefined;
};

/** An endpoint disabled by what its receiver did. */
export interface DisabledEndpoint {
  key: string;
  reason: string;
}

export const GONE_REASON = 'the receiver answered 410 Gone';

/** Why an endpoint that failed for `seconds` is disabled. */
export const failingReason = (seconds: number) =>
  `every attempt failed for ${seconds} seconds (WEBHOOK_DISABLE_AFTER_S)`;

/** `{"id":<digits>` opens every newPlant body: the plant's id, exactly. */
const plantIdPattern = /^\{"id":(-?\d{1,19})[,}]/;
export const plantIdOf = (body: string) => plantIdPattern.exec(body)?.[1];

export type OutcomeStatements = ReturnType<typeof createOutcomeStatements>;

export function createOutcomeStatements(
  db: Database,
  { disableAfterS }: { disableAfterS: number },
) {
  const deleteDelivered = prepareStatement(
    db,
    'webhook_delete_delivered',
    sql`delete from webhook_deliveries where id = any(${sql.placeholder('ids')}::int8[])`,
  );
  // A null delay gives the delivery up. The count of claims, which nothing resets, fences the
  // claim: if it expired and another process claimed the row again, this outcome is stale and
  // matches nothing; so does one for a delivery given up meanwhile (its endpoint disabled).
  const reschedule = prepareStatement(
    db,
    'webhook_reschedule',
    sql`update webhook_deliveries as d
           set next_attempt_at = now() + coalesce(o.delay_ms, 0) * interval '1 millisecond',
               failed_at = case when o.delay_ms is null then now() end,
               last_status = o.status,
               last_error = o.error
          from unnest(${sql.placeholder('ids')}::int8[], ${sql.placeholder('claims')}::int8[],
                      ${sql.placeholder('delays')}::float8[], ${sql.placeholder('statuses')}::int4[],
                      ${sql.placeholder('errors')}::text[]) as o(id, claim, delay_ms, status, error)
         where d.id = o.id and d.claims = o.claim and d.failed_at is null`,
  );
  // Not attempted: the claim did not start an attempt, so it does not count as one.
  const release = prepareStatement(
    db,
    'webhook_release',
    sql`update webhook_deliveries as d
           set next_attempt_at = now(), attempts = d.attempts - 1
          from unnest(${sql.placeholder('ids')}::int8[], ${sql.placeholder('claims')}::int8[])
            as o(id, claim)
         where d.id = o.id and d.claims = o.claim and d.failed_at is null`,
  );
  // The attempt log, and each endpoint's health: a success ends its run of failures; a 410,
  // or failures for `disableAfterS`, disable it, and its pending deliveries fail with it, to be
  // recovered once it is enabled again. An endpoint deleted before it runs, or while it
  // runs, is left out (its log goes with it); the rest of the batch is written. Its effects,
  // in order: the log rows; the health of each endpoint (its last attempt in the batch decides);
  // and, for an endpoint this disables, its pending deliveries failed.
  const logAttempts = prepareStatement<{ key: string; reason: string }>(
    db,
    'webhook_log_attempts',
    sql`with live as (
          -- Waits for a delete of one of them to commit, then leaves it out; in key order. Read
          -- by health too, so it is taken before changed updates the rows.
          select id from webhook_endpoints
           where id = any(${sql.placeholder('endpoints')}::int8[])
           order by id
             for key share
        ),
        logged as (
          insert into webhook_attempts (endpoint_id, event_id, plant_id, succeeded,
                                        response_status, error, duration_ms, attempted_at)
          select a.endpoint_id, a.event_id, a.plant_id, a.succeeded, a.status, a.error,
                 a.duration_ms, to_timestamp(a.at_ms / 1000)
            from unnest(${sql.placeholder('endpoints')}::int8[], ${sql.placeholder('events')}::uuid[],
                        ${sql.placeholder('plants')}::int8[], ${sql.placeholder('succeeded')}::bool[],
                        ${sql.placeholder('statuses')}::int4[], ${sql.placeholder('errors')}::text[],
                        ${sql.placeholder('durations')}::int4[], ${sql.placeholder('at')}::float8[])
              with ordinality
              as a(endpoint_id, event_id, plant_id, succeeded, status, error, duration_ms, at_ms, n)
            join live on live.id = a.endpoint_id
           -- Ids in the order the attempts started: the log lists them newest first by id.
           order by a.n
        ),
        health as (
          select e.id, h.ok, h.gone, coalesce(e.failing_since, now()) as failing_since,
                 not h.ok and (h.gone or coalesce(e.failing_since, now())
                   <= now() - ${sql.placeholder('disableAfter')}::int4 * interval '1 second') as disable
            from unnest(${sql.placeholder('healthEndpoints')}::int8[], ${sql.placeholder('ok')}::bool[],
                        ${sql.placeholder('gone')}::bool[]) as h(id, ok, gone)
            join live on live.id = h.id
            join webhook_endpoints as e on e.id = h.id
           -- A configured endpoint is never disabled: a 410 ends that delivery alone.
           where not e.disabled and not e.configured and not (h.ok and e.failing_since is null)
           -- Always in one order, so that two processes' batches cannot deadlock.
           order by e.id
             for no key update of e
        ),
        changed as (
          update webhook_endpoints as e
             set failing_since = case when h.ok then null else h.failing_since end,
                 disabled = h.disable,
                 disabled_reason = case when not h.disable then null
                                        when h.gone then ${GONE_REASON}::text
                                        else ${sql.placeholder('failingReason')}::text end,
                 updated_at = case when h.disable then clock_timestamp() else e.updated_at end
            from health as h
           where e.id = h.id
          returning e.id, e.disabled, e.disabled_reason
        ),
        ${givenUp('select id from changed where disabled')}
        select id::text as key, disabled_reason as reason from changed where disabled`,
  );

  return {
    /** Writes outcomes; returns the endpoints that their attempts disabled. */
    async record(outcomes: Outcome[]): Promise<DisabledEndpoint[]> {
      const delivered = outcomes.filter((o) => o.kind === 'delivered');
      const settled = outcomes.filter((o) => o.kind === 'retry' || o.kind === 'failed');
      const released = outcomes.filter((o) => o.kind === 'released');
      const records = outcomes.flatMap((o) => (o.record ? [o.record] : []));
      await Promise.all([
        delivered.length > 0 && deleteDelivered.execute({ ids: delivered.map((o) => o.id) }),
        settled.length > 0 &&
          reschedule.execute({
            ids: settled.map((o) => o.id),
            claims: settled.map((o) => o.claim),
            delays: settled.map((o) => (o.kind === 'retry' ? o.delayMs : null)),
            statuses: settled.map((o) => o.status ?? null),
            errors: settled.map((o) => o.error),
          }),
        released.length > 0 &&
          release.execute({
            ids: released.map((o) => o.id),
            claims: released.map((o) => o.claim),
          }),
      ]);
      // After the others: disabling an endpoint fails its pending deliveries, which the
      // statements above may be updating too; one after the other, they cannot deadlock.
      if (records.length === 0) return [];
      return logAttempts.execute(logValues(records, disableAfterS));
    },
  };
}

/** The attempt log's columns, and each endpoint's health as its last attempt in the batch says. */
function logValues(unordered: AttemptRecord[], disableAfterS: number) {
  const records = unordered.toSorted((a, b) => a.attemptedAtMs - b.attemptedAtMs);
  const health = new Map<string, { ok: boolean; gone: boolean }>();
  for (const record of records) {
    const seen = health.get(record.endpoint);
    health.set(record.endpoint, {
      ok: record.succeeded,
      gone: record.gone || (seen?.gone === true && !record.succeeded),
    });
  }
  return {
    endpoints: records.map((r) => r.endpoint),
    events: records.map((r) => r.eventId),
    plants: records.map((r) => r.plantId ?? null),
    succeeded: records.map((r) => r.succeeded),
    statuses: records.map((r) => r.status ?? null),
    errors: records.map((r) => r.error ?? null),
    durations: records.map((r) => Math.round(r.durationMs)),
    at: records.map((r) => r.attemptedAtMs),
    healthEndpoints: [...health.keys()],
    ok: [...health.values()].map((h) => h.ok),
    gone: [...health.values()].map((h) => h.gone),
    disableAfter: disableAfterS,
    failingReason: failingReason(disableAfterS),
  };
}

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
          (select count(*) from (select 1 from webhook_deliveries where failed_at is not null
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
