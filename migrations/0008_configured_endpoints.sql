ALTER TABLE "webhook_endpoints" ADD COLUMN "configured" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "declared_until" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "since_event" bigint DEFAULT 0 NOT NULL;
