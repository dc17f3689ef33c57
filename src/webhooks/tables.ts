import { sql } from 'drizzle-orm';
import { bigint, index, integer, pgTable, text, timestamp, uuid } from 'drizzle-orm/pg-core';

/**
 * Events recorded in the transaction of the write that made them, through the SQL function
 * record_created_events (see the migrations), one row per event however many subscribers there
 * are. A dispatcher takes each one after the commit, writes its deliveries and deletes it.
 */
export const webhookEvents = pgTable('webhook_events', {
  id: bigint('id', { mode: 'bigint' }).primaryKey().generatedAlwaysAsIdentity(),
  /** Sent as `webhook-id`: the same on every attempt and for every URL. */
  eventId: uuid('event_id').notNull().defaultRandom(),
  /** The exact bytes that are signed and sent. */
  body: text('body').notNull(),
  /** The W3C trace context of the statement that recorded it, when tracing was on. */
  traceparent: text('traceparent'),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});

/**
 * The newPlant webhook's outbox: one row per event and subscriber URL, written when a dispatcher
 * takes the event. A row lives until its event is delivered (then it is deleted) or its
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
