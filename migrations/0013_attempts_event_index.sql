-- migrate: outside a transaction
-- An event's attempts to one endpoint, for a resend of it. Built concurrently: every attempt
-- writes to the log while this runs.
CREATE INDEX CONCURRENTLY IF NOT EXISTS "webhook_attempts_event_idx" ON "webhook_attempts" USING btree ("endpoint_id","event_id");
