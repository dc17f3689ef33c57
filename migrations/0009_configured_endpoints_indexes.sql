-- migrate: outside a transaction
-- The due index of deliveries by URL gives way to one that finds a URL's old rows, moved to its
-- configured endpoint at start; and one row per configured URL. Built concurrently: the outbox
-- is written by every create while this runs.
DROP INDEX CONCURRENTLY IF EXISTS "webhook_deliveries_due_idx";--> statement-breakpoint
CREATE INDEX CONCURRENTLY IF NOT EXISTS "webhook_deliveries_url_idx" ON "webhook_deliveries" USING btree ("url") WHERE "webhook_deliveries"."url" is not null;--> statement-breakpoint
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "webhook_endpoints_configured_url_idx" ON "webhook_endpoints" USING btree ("url") WHERE "webhook_endpoints"."configured";
