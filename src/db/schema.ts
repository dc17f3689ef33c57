import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
  check,
  index,
  integer,
  pgTable,
  text,
  timestamp,
  uuid,
} from 'drizzle-orm/pg-core';

export const plants = pgTable(
  'plants',
  {
    id: bigint('id', { mode: 'bigint' }).primaryKey(),
    name: text('name').notNull(),
    tag: text('tag'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    // The API validates these limits too; the database keeps them true for every writer.
    check('plants_name_length', sql`char_length(${table.name}) between 1 and 256`),
    check('plants_tag_length', sql`char_length(${table.tag}) <= 256`),
    // Pages filtered by tag are a range scan of this index: tag = $1 and id > $2 order by id.
    index('plants_tag_id_idx').on(table.tag, table.id),
  ],
);

/**
 * The newPlant webhook's outbox: one row per event and subscriber URL, written by the statement
 * that inserts the plant. A row lives until its event is delivered (then it is deleted) or its
 * last attempt fails (then `failed_at` is set and it waits for an operator's redelivery).
 */
export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    id: bigint('id', { mode: 'bigint' }).primaryKey().generatedAlwaysAsIdentity(),
    /** The event, sent as `webhook-id`: the same on every attempt and for every URL. */
    eventId: uuid('event_id').notNull(),
    url: text('url').notNull(),
    /** The exact bytes that are signed and sent. */
    body: text('body').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    /** Attempts started (each claim starts one). */
    attempts: integer('attempts').notNull().default(0),
    /** When the next attempt may start; while an attempt runs, when its claim expires. */
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }).notNull().defaultNow(),
    /** Set when the delivery was given up: after the last attempt, or at once on a 410. */
    failedAt: timestamp('failed_at', { withTimezone: true }),
    /** The last failed attempt: the receiver's status, or why there was none. */
    lastStatus: integer('last_status'),
    lastError: text('last_error'),
  },
  (table) => [
    // The due work of one URL, oldest first: claims and the oldest-due metric are range scans.
    index('webhook_deliveries_due_idx')
      .on(table.url, table.nextAttemptAt)
      .where(sql`${table.failedAt} is null`),
  ],
);

// ---- Failed authentications (migration auth_failures, a custom one: the table is UNLOGGED,
// which the schema cannot say). The count a crash loses is a minute's worth at most. ----

/**
 * Failed authentications per client address (see clientKeyOf), shared by every replica:
 * written only when an authentication fails, read once a second for the throttled addresses.
 */
export const authFailures = pgTable(
  'auth_failures',
  {
    address: text('address').primaryKey(),
    /** Failures within the window. */
    failures: integer('failures').notNull(),
    /** The window began at the first of them, and ends then. */
    windowEnds: timestamp('window_ends', { withTimezone: true }).notNull(),
    /** The failures reached the limit: the address is refused until `window_ends`. */
    throttled: boolean('throttled').notNull(),
  },
  (table) => [
    // What every replica reads once a second: a range scan of the throttled rows only.
    index('auth_failures_throttled_idx').on(table.windowEnds).where(sql`${table.throttled}`),
  ],
);
