import { type SQL, sql } from 'drizzle-orm';
import { rfc3339 } from '../../db/rfc3339.js';
import { endpointIdSql, webhookIdSql } from '../tables/ids.js';
import type { EventTypeName } from './event-types.js';

// The bodies of the operational events, written by the statement that makes the change they
// tell of, in SQL: compact JSON, strings escaped by to_json as JSON.stringify escapes them, in
// the Standard Webhooks envelope `{"type","timestamp","data"}` (see event-types.ts).

/** A text value as a JSON string. */
const jsonString = (value: SQL) => sql`to_json((${value})::text)::text`;

/** The body of a `type` event at `at` whose `data` has `members`, each a JSON value as text. */
function envelope(type: EventTypeName, at: SQL, members: [name: string, json: SQL][]): SQL {
  const data = members.map(
    ([name, json], i) => sql`${sql.raw(`'${i === 0 ? '' : ','}"${name}":'`)} || ${json}`,
  );
  return sql`${sql.raw(`'{"type":"${type}","timestamp":"'`)} || ${rfc3339(at)} || '","data":{' || ${sql.join(data, sql` || `)} || '}}'`;
}

/** Records events of `type`, one per row of `from`, each with the body `body`: their count. */
const recorded = (type: EventTypeName, body: SQL, from: SQL) =>
  sql`select record_events(${sql.raw(`'${type}'`)}, array(select ${body} from ${from}), null) as count`;

/**
 * A CTE `name` that records an endpointDisabled event for each row of `rows`, a query of the
 * columns (key, url, reason, disabled_at).
 */
export function endpointDisabledEvents(name: string, rows: SQL): SQL {
  const at = sql.raw('r.disabled_at');
  const body = envelope('endpointDisabled', at, [
    ['endpointId', jsonString(endpointIdSql(sql.raw('r.key')))],
    ['url', jsonString(sql.raw('r.url'))],
    ['reason', jsonString(sql.raw('r.reason'))],
    ['disabledAt', jsonString(rfc3339(at))],
  ]);
  const from = sql`(${rows}) as r(key, url, reason, disabled_at)`;
  return sql`${sql.raw(name)} as (${recorded('endpointDisabled', body, from)})`;
}

/**
 * A CTE `name` that records a deliveryExhausted event for each row of `rows`, a query of the
 * columns (endpoint_key, event_id, event_type, attempts, status, error): the last attempt's
 * status when the receiver answered, otherwise its error.
 */
export function deliveryExhaustedEvents(name: string, rows: SQL): SQL {
  const lastError = sql.raw(
    `case when r.status is not null then 'the receiver answered ' || r.status else r.error end`,
  );
  const body = envelope('deliveryExhausted', sql.raw('now()'), [
    ['endpointId', jsonString(endpointIdSql(sql.raw('r.endpoint_key')))],
    ['eventId', jsonString(webhookIdSql(sql.raw('r.event_id')))],
    ['eventType', jsonString(sql.raw('r.event_type'))],
    ['attempts', sql.raw('r.attempts::text')],
    ['lastError', jsonString(lastError)],
  ]);
  const from = sql`(${rows}) as r(endpoint_key, event_id, event_type, attempts, status, error)`;
  return sql`${sql.raw(name)} as (${recorded('deliveryExhausted', body, from)})`;
}
