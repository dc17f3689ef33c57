import { sql } from 'drizzle-orm';
import { plantIdSql } from '../catalog/plant-id.js';

/**
 * A CTE that writes each delivery of `deliveries` (endpoint_id, event_id, body, event_type) that
 * an endpoint being disabled misses as an entry of its attempt log, with the body a resend
 * sends, so an admin sees what recover will send. The plant's id as plantIdOf reads it.
 */
export const missedLog = (deliveries: string) =>
  sql`${sql.raw(`missed_log_${deliveries}`)} as (
          insert into webhook_attempts (endpoint_id, event_id, plant_id, event_type, body, succeeded,
                                        error, duration_ms)
          select endpoint_id, event_id, ${plantIdSql(sql.raw('body'))},
                 event_type, body, false, 'endpoint disabled', 0
            from ${sql.raw(deliveries)}
        )`;
/** CTEs that give up the pending deliveries of the endpoints `disabled` selects, and log them. */
export const givenUp = (disabled: string) =>
  sql`given_up as (
          update webhook_deliveries
             set failed_at = now(), last_error = 'endpoint disabled'
           where endpoint_id in (${sql.raw(disabled)}) and failed_at is null
          returning endpoint_id, event_id, body, event_type
        ),
        ${missedLog('given_up')}`;
