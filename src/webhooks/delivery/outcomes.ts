// What each attempt leaves, written in batches: its delivery deleted, rescheduled, given up or
// given back; its entry in the attempt log; its endpoint's health; and the operational events
// (endpointDisabled, deliveryExhausted) that these decide, in the same statements.
import { sql } from 'drizzle-orm';
import type { Database } from '../../db/database.js';
import { prepareStatement } from '../../db/prepared.js';
import { deliveryExhaustedEvents, endpointDisabledEvents } from '../catalog/event-bodies.js';
import { subscriptionSharedIf } from '../tables/locks.js';
import type { AttemptTrigger } from '../tables/triggers.js';
import { givenUp } from './given-up.js';

/** What the attempt log keeps of an attempt to an endpoint. */
export interface AttemptRecord {
  /** The endpoint's row key, in decimal. */
  endpoint: string;
  eventId: string;
  /** The plant's id, in decimal, read from the body; undefined when it has none. */
  plantId: string | undefined;
  /** Why the attempt was made; a test's attempt says nothing of the endpoint's health. */
  trigger: AttemptTrigger;
  eventType: string;
  /** The bytes sent: what a resend of the event sends again. */
  body: string;
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
  /** A test, whatever it answered: the row goes (a test is never attempted again). */
  | { kind: 'tested'; id: string }
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
  // A delivery given up after its last attempt is a deliveryExhausted event, in the same
  // statement; not one a 410 ended (410 is always `gone`, see nextStep), nor a test, nor a
  // deliveryExhausted event itself (events about it would never end). A batch that may record
  // one takes the subscription lock before the delivery rows (`outcomes` yields no row until it
  // has it), as the order of locks in tables/locks.ts says: a PATCH that disables holds it while it
  // gives up that endpoint's deliveries.
  const reschedule = prepareStatement(
    db,
    'webhook_reschedule',
    sql`with outcomes as (
          select o.* from unnest(${sql.placeholder('ids')}::int8[], ${sql.placeholder('claims')}::int8[],
                                 ${sql.placeholder('delays')}::float8[], ${sql.placeholder('statuses')}::int4[],
                                 ${sql.placeholder('errors')}::text[]) as o(id, claim, delay_ms, status, error),
                 ${subscriptionSharedIf(sql`${sql.placeholder('exhausting')}::boolean`)}
        ),
        settled as (
          update webhook_deliveries as d
             set next_attempt_at = now() + coalesce(o.delay_ms, 0) * interval '1 millisecond',
                 failed_at = case when o.delay_ms is null then now() end,
                 last_status = o.status,
                 last_error = o.error
            from outcomes as o
           where d.id = o.id and d.claims = o.claim and d.failed_at is null
          returning d.endpoint_id, d.event_id, d.event_type, d.trigger, d.attempts, o.delay_ms,
                    o.status, o.error
        ),
        ${deliveryExhaustedEvents(
          'exhausted',
          sql`select endpoint_id, event_id, event_type, attempts, status, error from settled
               where delay_ms is null and status is distinct from 410 and trigger <> 'test'
                 and event_type <> 'deliveryExhausted' and endpoint_id is not null`,
        )}
        select count from exhausted`,
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
  // and, for an endpoint this disables, its pending deliveries failed and an endpointDisabled
  // event.
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
          insert into webhook_attempts (endpoint_id, event_id, plant_id, trigger, event_type, body,
                                        succeeded, response_status, error, duration_ms, attempted_at)
          select a.endpoint_id, a.event_id, a.plant_id, a.trigger, a.event_type, a.body,
                 a.succeeded, a.status, a.error, a.duration_ms, to_timestamp(a.at_ms / 1000)
            from unnest(${sql.placeholder('endpoints')}::int8[], ${sql.placeholder('events')}::uuid[],
                        ${sql.placeholder('plants')}::int8[], ${sql.placeholder('triggers')}::text[],
                        ${sql.placeholder('eventTypes')}::text[], ${sql.placeholder('bodies')}::text[],
                        ${sql.placeholder('succeeded')}::bool[],
                        ${sql.placeholder('statuses')}::int4[], ${sql.placeholder('errors')}::text[],
                        ${sql.placeholder('durations')}::int4[], ${sql.placeholder('at')}::float8[])
              with ordinality
              as a(endpoint_id, event_id, plant_id, trigger, event_type, body, succeeded, status,
                   error, duration_ms, at_ms, n)
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
          returning e.id, e.url, e.disabled, e.disabled_reason, e.updated_at
        ),
        ${givenUp('select id from changed where disabled')},
        ${endpointDisabledEvents(
          'disabled_events',
          sql`select id, url, disabled_reason, updated_at from changed where disabled`,
        )}
        select id::text as key, disabled_reason as reason from changed, disabled_events
         where disabled`,
  );

  return {
    /** Writes outcomes; returns the endpoints that their attempts disabled. */
    async record(outcomes: Outcome[]): Promise<DisabledEndpoint[]> {
      const delivered = outcomes.filter((o) => o.kind === 'delivered' || o.kind === 'tested');
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
            exhausting: settled.some((o) => o.kind === 'failed' && o.status !== 410),
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
    // A test neither ends a run of failures nor adds to one: it never disables its endpoint.
    if (record.trigger === 'test') continue;
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
    triggers: records.map((r) => r.trigger),
    eventTypes: records.map((r) => r.eventType),
    bodies: records.map((r) => r.body),
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
