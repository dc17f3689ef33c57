import { sql } from 'drizzle-orm';
import type { Database } from '../../db/database.js';
import { prepareStatement } from '../../db/prepared.js';
import { type DeliveryRow, deliveryOf, endpointColumns } from './outbox.js';

// The deliveries an admin asks for, beside those the fan-out makes: a resend of one event to one
// endpoint, and a test of an endpoint. Both are rows of webhook_deliveries, attempted, signed and
// logged by the one engine, and told apart by their trigger.

const key = sql`${sql.placeholder('key')}::int8`;

export type Replays = ReturnType<typeof createReplays>;

export function createReplays(db: Database, { logRetentionS }: { logRetentionS: number }) {
  const retention = sql`now() - ${sql.placeholder('retention')}::int4 * interval '1 second'`;
  // The bytes the endpoint last got for the event (its attempt log, through its index on
  // endpoint and event), or, for an event not yet attempted, those of its delivery: the first
  // branch that finds one ends the search. A test is not an event of the endpoint's.
  const resend = prepareStatement<{ disabled: boolean; found: boolean }>(
    db,
    'webhook_resend',
    // The endpoint's row is read under a share lock: a PATCH that disables it waits for the
    // resend's commit and then gives its delivery up with the others (logged as missed), or
    // commits first and the resend reads it disabled.
    sql`with endpoint as (
          select id, disabled from webhook_endpoints where id = ${key} for share
        ),
        source as (
          select * from (
            (select a.body, a.event_type from webhook_attempts as a join endpoint on a.endpoint_id = endpoint.id
              where a.event_id = ${sql.placeholder('event')}::uuid and a.body is not null
                and a.trigger <> 'test' and a.attempted_at >= ${retention}
              order by a.id desc limit 1)
            union all
            (select d.body, d.event_type from webhook_deliveries as d join endpoint on d.endpoint_id = endpoint.id
              where d.event_id = ${sql.placeholder('event')}::uuid and d.trigger <> 'test'
                and d.created_at >= ${retention}
              limit 1)
          ) as found
          limit 1
        ),
        resent as (
          insert into webhook_deliveries (event_id, endpoint_id, body, event_type, trigger)
          select ${sql.placeholder('event')}::uuid, endpoint.id, source.body, source.event_type, 'resend'
            from endpoint, source
           where not endpoint.disabled
        )
        select endpoint.disabled, exists (select 1 from source) as found from endpoint`,
  );
  // Born given up (failed_at set) and attempted at once by the process that made it: no claim,
  // retry, release or disabling ever takes it, recover and redeliver leave it, and its outcome
  // deletes it, whatever it was. One whose process died before that goes with the retention.
  const test = prepareStatement<{ disabled: boolean } & Partial<DeliveryRow>>(
    db,
    'webhook_test',
    sql`with tested as (
          insert into webhook_deliveries (event_id, endpoint_id, body, event_type, trigger,
                                          attempts, claims, failed_at)
          select gen_random_uuid(), e.id, ${sql.placeholder('body')}::text,
                 ${sql.placeholder('type')}::text, 'test', 1, 1, now()
            from webhook_endpoints as e
           where e.id = ${key} and not e.disabled
          returning id, event_id, endpoint_id, body, trigger, event_type, attempts, claims, created_at
        )
        select e.disabled, tested.id::text as id, tested.event_id::text as event_id,
               ${endpointColumns}, tested.body, tested.trigger, tested.event_type,
               tested.attempts, tested.claims::text as claims,
               (extract(epoch from tested.created_at) * 1000)::float8 as created_ms
          from webhook_endpoints as e
          left join tested on tested.endpoint_id = e.id
         where e.id = ${key}`,
  );

  return {
    /**
     * Makes a new delivery of event `eventId` (a UUID) to the endpoint `endpoint` (its row key),
     * due now, with the body and type it had: 'resent'; 'unknown' when the endpoint has no record
     * of the event within the retention, 'disabled' for a disabled endpoint, undefined when there
     * is no such endpoint.
     */
    async resend(endpoint: bigint, eventId: string) {
      const [row] = await resend.execute({
        key: endpoint.toString(),
        event: eventId,
        retention: logRetentionS,
      });
      if (!row) return undefined;
      if (!row.found) return 'unknown' as const;
      return row.disabled ? ('disabled' as const) : ('resent' as const);
    },
    /**
     * Makes a test delivery of `body` (an example of `type`) to the endpoint, held by this
     * process, to attempt at once: with its endpoint's target, as a claim reads it. 'disabled'
     * for a disabled endpoint, undefined when there is no such endpoint.
     */
    async test(endpoint: bigint, type: string, body: string) {
      const claimedAt = performance.now();
      const [row] = await test.execute({ key: endpoint.toString(), type, body });
      if (!row) return undefined;
      if (row.id === undefined || row.id === null) return 'disabled' as const;
      return deliveryOf(row as DeliveryRow, claimedAt);
    },
  };
}
