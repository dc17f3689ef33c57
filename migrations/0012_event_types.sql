ALTER TABLE "webhook_attempts" ADD COLUMN "event_type" text DEFAULT 'newPlant' NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_attempts" ADD COLUMN "trigger" text DEFAULT 'delivery' NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_attempts" ADD COLUMN "body" text;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "event_type" text DEFAULT 'newPlant' NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "trigger" text DEFAULT 'delivery' NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "events" text[] DEFAULT '{newPlant}'::text[] NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "rate_limit" integer;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "paced_until" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "headers" text;--> statement-breakpoint
ALTER TABLE "webhook_events" ADD COLUMN "type" text DEFAULT 'newPlant' NOT NULL;