import { attemptIdOf, endpointIdOf, webhookId } from '../tables/ids.js';
import type { AttemptRow, EndpointRow } from './endpoints.js';
import type { Endpoint } from './schemas.js';

/** An endpoint as the API shows it: its public id, `disabledReason` and `configured` only when they are. */
export function endpointOf(row: EndpointRow): Endpoint {
  return {
    id: endpointIdOf(row.id),
    url: row.url,
    description: row.description,
    disabled: row.disabled,
    ...(row.disabledReason !== null && { disabledReason: row.disabledReason }),
    events: row.events as Endpoint['events'],
    rateLimit: row.rateLimit,
    ...(row.configured && { configured: true as const }),
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

/**
 * A page of the attempt log as JSON text. The plant id is written as its decimal digits, a JSON
 * integer that a number would round; the optional members are left out when there are none (a
 * plant id when the event is about no plant). A test's event id is `msg_test_...`.
 */
export function attemptsJson(rows: readonly AttemptRow[]): string {
  const items = rows.map((row) => {
    const plant = row.plantId === null ? '' : `,"plantId":${row.plantId}`;
    const status = row.responseStatus === null ? '' : `,"responseStatus":${row.responseStatus}`;
    const error = row.error === null ? '' : `,"error":${JSON.stringify(row.error)}`;
    return (
      `{"id":"${attemptIdOf(row.id)}","eventId":"${webhookId(row.eventId, row.trigger)}"${plant}` +
      `,"trigger":"${row.trigger}","status":"${row.succeeded ? 'succeeded' : 'failed'}"${status}${error}` +
      `,"durationMs":${row.durationMs},"attemptedAt":"${row.attemptedAt}"}`
    );
  });
  return `[${items.join(',')}]`;
}
