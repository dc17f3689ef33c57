DROP INDEX "webhook_deliveries_due_idx";--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "configured" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "declared_until" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "since_event" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX "webhook_deliveries_url_idx" ON "webhook_deliveries" USING btree ("url") WHERE "webhook_deliveries"."url" is not null;--> statement-breakpoint
CREATE UNIQUE INDEX "webhook_endpoints_configured_url_idx" ON "webhook_endpoints" USING btree ("url") WHERE "webhook_endpoints"."configured";