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
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';

/**
 * Events recorded in the transaction of the write that made them, through the SQL function
 * record_events (see the migrations), one row per event however many subscribers there
 * are. A dispatcher takes each one after the commit, writes its deliveries and deletes it.
 */
export const webhookEvents = pgTable('webhook_events', {
  id: bigint('id', { mode: 'bigint' }).primaryKey().generatedAlwaysAsIdentity(),
  /** Sent as `webhook-id`: the same on every attempt and for every URL. */
  eventId: uuid('event_id').notNull().defaultRandom(),
  /** Its type (see catalog/event-types.ts): an endpoint receives the types it lists in `events`. */
  type: text('type').notNull().default('newPlant'),
  /** The exact bytes that are signed and sent. */
  body: text('body').notNull(),
  /** The W3C trace context of the statement that recorded it, when tracing was on. */
  traceparent: text('traceparent'),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});

/**
 * Every subscriber: made through the management API, or declared by WEBHOOK_URLS
 * (`configured`), each with its own signing key. The keys are stored sealed (see security/secrets.ts):
 * encrypted under WEBHOOK_ENCRYPTION_KEYS when it is set.
 */
export const webhookEndpoints = pgTable(
  'webhook_endpoints',
  {
    id: bigint('id', { mode: 'bigint' }).primaryKey().generatedAlwaysAsIdentity(),
    url: text('url').notNull(),
    /** Declared by WEBHOOK_URLS and signed with WEBHOOK_SECRET: read-only through the API. */
    configured: boolean('configured').notNull().default(false),
    /** A configured endpoint receives while some running replica declares it, until this. */
    declaredUntil: timestamp('declared_until', { withTimezone: true }),
    /**
     * It receives the events whose row key is above this: a value of the events' sequence taken
     * under the subscription lock (see record_events), so no event falls between.
     */
    sinceEvent: bigint('since_event', { mode: 'bigint' }).notNull().default(sql`0`),
    description: text('description').notNull().default(''),
    disabled: boolean('disabled').notNull().default(false),
    disabledReason: text('disabled_reason'),
    /** The event types it receives. */
    events: text('events').array().notNull().default(sql`'{newPlant}'::text[]`),
    /** Attempts started per second at most, by every replica together; null for no limit. */
    rateLimit: integer('rate_limit'),
    /**
     * With a rate limit: when the next attempt may start, the attempts already claimed spaced
     * 1/rate_limit apart before it. Each claim reads and moves it under the row's lock.
     */
    pacedUntil: timestamp('paced_until', { withTimezone: true }),
    /** Its custom headers, a JSON object of names and values, sealed as the secret is; null for none. */
    headers: text('headers'),
    /** The signing key, sealed. */
    secret: text('secret').notNull(),
    /** The key before the last rotation, sealed: it signs too until `previous_secret_until`. */
    previousSecret: text('previous_secret'),
    previousSecretUntil: timestamp('previous_secret_until', { withTimezone: true }),
    /** When the first of an unbroken run of failed attempts was made; null after a success. */
    failingSince: timestamp('failing_since', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    // One row per configured URL, which every replica declaring it refreshes.
    uniqueIndex('webhook_endpoints_configured_url_idx')
      .on(table.url)
      .where(sql`${table.configured}`),
  ],
);

/**
 * The webhooks' outbox: one row per event and endpoint, written when a dispatcher
 * takes the event. `url` is only on rows that releases before configured endpoints wrote for a
 * WEBHOOK_URLS subscriber; a starting replica moves them to that URL's endpoint. A row lives until its event is delivered (then it is deleted) or its last attempt fails
 * (then `failed_at` is set and it waits for a redelivery, or for the retention to end).
 */
export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    id: bigint('id', { mode: 'bigint' }).primaryKey().generatedAlwaysAsIdentity(),
    /** The event, sent as `webhook-id`: the same on every attempt and for every subscriber. */
    eventId: uuid('event_id').notNull(),
    /** A WEBHOOK_URLS subscriber, on rows written before configured endpoints. */
    url: text('url'),
    /** The endpoint; its deliveries go with it. */
    endpointId: bigint('endpoint_id', { mode: 'bigint' }).references(() => webhookEndpoints.id, {
      onDelete: 'cascade',
    }),
    /** The exact bytes that are signed and sent. */
    body: text('body').notNull(),
    eventType: text('event_type').notNull().default('newPlant'),
    /**
     * Why it exists: `delivery` (the fan-out), `recover`, `resend` or `test`. Its first attempt
     * is logged with it, later ones as `retry`.
     */
    trigger: text('trigger').notNull().default('delivery'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    /** Attempts started (each claim starts one). */
    attempts: integer('attempts').notNull().default(0),
    /** Claims made, never reset (a redelivery resets attempts): each outcome names its claim. */
    claims: bigint('claims', { mode: 'bigint' }).notNull().default(sql`0`),
    /** When the next attempt may start; while an attempt runs, when its claim expires. */
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }).notNull().defaultNow(),
    /** Set when the delivery was given up: after the last attempt, on a 410, or never sent. */
    failedAt: timestamp('failed_at', { withTimezone: true }),
    /** The last failed attempt: the receiver's status, or why there was none. */
    lastStatus: integer('last_status'),
    lastError: text('last_error'),
  },
  (table) => [
    check(
      'webhook_deliveries_one_subscriber',
      sql`(${table.url} is null) <> (${table.endpointId} is null)`,
    ),
    // Rows of a WEBHOOK_URLS subscriber not yet moved to its endpoint.
    index('webhook_deliveries_url_idx').on(table.url).where(sql`${table.url} is not null`),
    // The due work of one endpoint, oldest first: claims and the oldest-due metric are range scans.
    index('webhook_deliveries_endpoint_due_idx')
      .on(table.endpointId, table.nextAttemptAt)
      .where(sql`${table.failedAt} is null and ${table.endpointId} is not null`),
    // An endpoint's deliveries: its recover, and the delete that goes with it.
    index('webhook_deliveries_endpoint_idx')
      .on(table.endpointId, table.failedAt)
      .where(sql`${table.endpointId} is not null`),
    // Failed deliveries, for the retention's sweep.
    index('webhook_deliveries_failed_idx')
      .on(table.failedAt)
      .where(sql`${table.failedAt} is not null`),
  ],
);

/** What became of each attempt of a delivery to an endpoint, kept WEBHOOK_LOG_RETENTION_S. */
export const webhookAttempts = pgTable(
  'webhook_attempts',
  {
    id: bigint('id', { mode: 'bigint' }).primaryKey().generatedAlwaysAsIdentity(),
    endpointId: bigint('endpoint_id', { mode: 'bigint' })
      .notNull()
      .references(() => webhookEndpoints.id, { onDelete: 'cascade' }),
    eventId: uuid('event_id').notNull(),
    plantId: bigint('plant_id', { mode: 'bigint' }),
    eventType: text('event_type').notNull().default('newPlant'),
    /** `delivery`, `retry`, `recover`, `resend` or `test` (see webhookDeliveries.trigger). */
    trigger: text('trigger').notNull().default('delivery'),
    /** The bytes sent: what a resend of the event to the endpoint sends again. */
    body: text('body'),
    succeeded: boolean('succeeded').notNull(),
    responseStatus: integer('response_status'),
    error: text('error'),
    durationMs: integer('duration_ms').notNull(),
    attemptedAt: timestamp('attempted_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    // An endpoint's log, newest first, is a backward range scan.
    index('webhook_attempts_endpoint_idx').on(table.endpointId, table.id),
    // An event's attempts to an endpoint: what a resend sends.
    index('webhook_attempts_event_idx').on(table.endpointId, table.eventId),
    index('webhook_attempts_attempted_at_idx').on(table.attemptedAt),
  ],
);
