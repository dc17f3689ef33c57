import { type SQL, sql } from 'drizzle-orm';

/**
 * The public ids of endpoints (`ep_`) and of attempts (`att_`): a prefix and the row's bigint
 * key as 16 hex digits, so that ids sort as text in the order of their rows and a page's
 * `after` names a row. They are counters: an id shows the order and rough count of creations.
 */
const HEX_DIGITS = 16;
const ENDPOINT = 'ep_';
const ATTEMPT = 'att_';

function format(prefix: string, key: bigint | string): string {
  return prefix + BigInt(key).toString(16).padStart(HEX_DIGITS, '0');
}

function parse(prefix: string, id: string): bigint | undefined {
  if (id.length !== prefix.length + HEX_DIGITS || !id.startsWith(prefix)) return undefined;
  const digits = id.slice(prefix.length);
  return /^[0-9a-f]+$/.test(digits) ? BigInt(`0x${digits}`) : undefined;
}

export const endpointIdOf = (key: bigint | string) => format(ENDPOINT, key);
export const attemptIdOf = (key: bigint | string) => format(ATTEMPT, key);
/** The row key of an endpoint id; undefined when it is not one. */
export const endpointKeyOf = (id: string) => parse(ENDPOINT, id);
export const attemptKeyOf = (id: string) => parse(ATTEMPT, id);

export const ENDPOINT_ID_PATTERN = `^${ENDPOINT}[0-9a-f]{${HEX_DIGITS}}$`;
/** An endpoint id's form, in words, with an example: for the messages that refuse another. */
export const ENDPOINT_ID_FORM = `${ENDPOINT} and ${HEX_DIGITS} hexadecimal digits, such as ${endpointIdOf(1n)}`;
export const ATTEMPT_ID_PATTERN = `^${ATTEMPT}[0-9a-f]{${HEX_DIGITS}}$`;

/** An endpoint's id from its row key, in SQL: what endpointIdOf writes. */
export const endpointIdSql = (key: SQL) =>
  sql`${sql.raw(`'${ENDPOINT}'`)} || lpad(to_hex(${key}), ${sql.raw(`${HEX_DIGITS}`)}, '0')`;

/**
 * `webhook-id` of an event: `msg_` and its UUID's hex digits; `msg_test_` and them for a test
 * event (`trigger` 'test'), which a receiver can tell from every real one.
 */
const EVENT = 'msg_';
const TEST_EVENT = 'msg_test_';

export function webhookId(eventId: string, trigger?: string): string {
  return `${trigger === 'test' ? TEST_EVENT : EVENT}${eventId.replaceAll('-', '')}`;
}

/** The UUID of an event's `webhook-id` (a test's is none); undefined for anything else. */
export function eventUuidOf(id: string): string | undefined {
  const digits = id.startsWith(EVENT) ? id.slice(EVENT.length) : '';
  const match = /^([0-9a-f]{8})([0-9a-f]{4})([0-9a-f]{4})([0-9a-f]{4})([0-9a-f]{12})$/.exec(digits);
  return match ? match.slice(1).join('-') : undefined;
}

/** The `webhook-id` of an event recorded for a change. */
export const EVENT_ID_PATTERN = `^${EVENT}[0-9a-f]{32}$`;
/** The `webhook-id` of a test event. */
export const TEST_EVENT_ID_PATTERN = `^${TEST_EVENT}[0-9a-f]{32}$`;
/** The `webhook-id` of any event, a test's included. */
export const ANY_EVENT_ID_PATTERN = `^${EVENT}(test_)?[0-9a-f]{32}$`;

/** An event's `webhook-id` from its UUID, in SQL: what webhookId writes. */
export const webhookIdSql = (eventId: SQL) =>
  sql`${sql.raw(`'${EVENT}'`)} || replace(${eventId}::text, '-', '')`;
