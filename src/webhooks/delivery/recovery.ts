import { sql } from 'drizzle-orm';
import type { Database } from '../../db/database.js';
import { prepareStatement } from '../../db/prepared.js';

const placeholder = (name: string) => sql.placeholder(name);

/** Which failed deliveries a recovery makes due again: each filter left out matches every one. */
export interface RecoveryFilter {
  /** Only those of this endpoint (its row key). */
  endpoint?: bigint | undefined;
  /** Only those to endpoints of this URL. */
  url?: string | undefined;
  /** Only this event (its UUID). */
  eventId?: string | undefined;
  /** Only those that failed at or after this time (RFC 3339). */
  failedSince?: string | undefined;
  /** Only counts them. */
  dryRun?: boolean | undefined;
}

/**
 * The recovery of failed deliveries, for the API's recover and the operator's redeliver: each
 * one `filter` picks is due at once, as new (a fresh retry schedule, no last status or error),
 * logged as `recover`. Never a test's (its row lives only while it runs), nor a disabled
 * endpoint's: nothing would send it, and it stays failed until the endpoint is enabled. Prepared
 * once under `name` (unnamed when ''). Answers how many, and whether the endpoint that
 * `filter.endpoint` names is disabled (undefined when there is no such endpoint, or none named).
 */
export function createRecovery(db: Database, name: string) {
  const given = (name: string, type: string) => sql`${placeholder(name)}::${sql.raw(type)}`;
  const picked = sql`d.failed_at is not null and d.trigger <> 'test'
    and (${given('endpoint', 'int8')} is null or d.endpoint_id = ${given('endpoint', 'int8')})
    and (${given('url', 'text')} is null
         or d.endpoint_id in (select id from webhook_endpoints where url = ${given('url', 'text')}))
    and (${given('event', 'uuid')} is null or d.event_id = ${given('event', 'uuid')})
    and (${given('since', 'timestamptz')} is null or d.failed_at >= ${given('since', 'timestamptz')})
    and not exists (select 1 from webhook_endpoints as e where e.id = d.endpoint_id and e.disabled)`;
  const statement = prepareStatement<{ disabled: boolean | null; count: number }>(
    db,
    name,
    sql`with recovered as (
          update webhook_deliveries as d
             set failed_at = null, attempts = 0, next_attempt_at = now(),
                 last_status = null, last_error = null, trigger = 'recover'
           where ${picked} and not ${given('dryRun', 'boolean')}
          returning 1
        )
        select (select disabled from webhook_endpoints where id = ${given('endpoint', 'int8')}),
               (case when ${given('dryRun', 'boolean')}
                     then (select count(*) from webhook_deliveries as d where ${picked})
                     else (select count(*) from recovered) end)::int4 as count`,
  );
  return async (filter: RecoveryFilter) => {
    const [row] = await statement.execute({
      endpoint: filter.endpoint?.toString() ?? null,
      url: filter.url ?? null,
      event: filter.eventId ?? null,
      since: filter.failedSince ?? null,
      dryRun: filter.dryRun ?? false,
    });
    return { count: row?.count ?? 0, disabled: row?.disabled ?? undefined };
  };
}

/**
 * The operator's redelivery (npm run webhooks:redeliver): the recovery of every failed delivery
 * that `filter` picks, on any endpoint, with an unnamed statement (a command runs it once).
 * Returns how many; `dryRun` only counts them.
 */
export async function redeliverFailed(
  db: Database,
  filter: Omit<RecoveryFilter, 'endpoint' | 'dryRun'>,
  dryRun = false,
): Promise<number> {
  const { count } = await createRecovery(db, '')({ ...filter, dryRun });
  return count;
}
