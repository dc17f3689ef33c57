import { type SQL, sql } from 'drizzle-orm';

/**
 * Held shared by every statement while it records events (see record_events), exclusively by
 * the changes that make an endpoint receive. The order of locks, for every statement that takes
 * more than one of these: an endpoint's row, then the subscription lock, then delivery rows;
 * taken in that order, no two statements deadlock.
 */
const SUBSCRIPTION_LOCK_KEY = 7308604714553418611n;
/** A one-row FROM item that takes the subscription lock, for the rest of the transaction. */
export const SUBSCRIPTION_LOCKED = sql.raw(
  `(select pg_advisory_xact_lock(${SUBSCRIPTION_LOCK_KEY})) as subscription_locked`,
);
/**
 * A one-row FROM item that takes the subscription lock when the query `rows` returns any: a
 * configured endpoint that lapsed comes back as a new endpoint is made.
 */
export const subscriptionLockedIf = (rows: SQL) =>
  sql`(select count(*) from (select pg_advisory_xact_lock(${sql.raw(`${SUBSCRIPTION_LOCK_KEY}`)})
                               from (${rows}) as rows limit 1) as locks) as subscription_locked`;
/**
 * A one-row FROM item that takes the subscription lock shared, as record_events does, when
 * `condition` holds: a statement that records events after it locks delivery rows takes it
 * before them (see the order of locks above).
 */
export const subscriptionSharedIf = (condition: SQL) =>
  sql`(select count(*) from (select pg_advisory_xact_lock_shared(${sql.raw(`${SUBSCRIPTION_LOCK_KEY}`)})
                              where ${condition}) as locks) as subscription_shared`;
/** Above every event recorded before the lock, below every one after it. */
export const NEXT_EVENT = sql.raw(`nextval(pg_get_serial_sequence('webhook_events', 'id'))`);
/** A new endpoint's row key, drawn before its insert: its secret is sealed for it. */
export const NEXT_ENDPOINT = sql.raw(`nextval(pg_get_serial_sequence('webhook_endpoints', 'id'))`);
