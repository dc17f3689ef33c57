CREATE TABLE "webhook_attempts" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "webhook_attempts_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"endpoint_id" bigint NOT NULL,
	"event_id" uuid NOT NULL,
	"plant_id" bigint,
	"succeeded" boolean NOT NULL,
	"response_status" integer,
	"error" text,
	"duration_ms" integer NOT NULL,
	"attempted_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "webhook_endpoints" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "webhook_endpoints_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"url" text NOT NULL,
	"description" text DEFAULT '' NOT NULL,
	"disabled" boolean DEFAULT false NOT NULL,
	"disabled_reason" text,
	"secret" text NOT NULL,
	"previous_secret" text,
	"previous_secret_until" timestamp with time zone,
	"failing_since" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
-- squawk-ignore require-concurrent-index-deletion -- webhook_deliveries holds only deliveries still due or recently failed (delivered ones are deleted): a short scan, once per database
DROP INDEX "webhook_deliveries_due_idx";--> statement-breakpoint
-- squawk-ignore ban-drop-not-null -- the release that shipped it reads a null url as an endpoint delivery; no older release runs beside it
ALTER TABLE "webhook_deliveries" ALTER COLUMN "url" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "endpoint_id" bigint;--> statement-breakpoint
ALTER TABLE "webhook_attempts" ADD CONSTRAINT "webhook_attempts_endpoint_id_webhook_endpoints_id_fk" FOREIGN KEY ("endpoint_id") REFERENCES "public"."webhook_endpoints"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "webhook_attempts_endpoint_idx" ON "webhook_attempts" USING btree ("endpoint_id","id");--> statement-breakpoint
CREATE INDEX "webhook_attempts_attempted_at_idx" ON "webhook_attempts" USING btree ("attempted_at");--> statement-breakpoint
-- squawk-ignore constraint-missing-not-valid, adding-foreign-key-constraint -- webhook_deliveries holds only deliveries still due or recently failed (delivered ones are deleted): a short scan, once per database; webhook_endpoints is new in this file
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_endpoint_id_webhook_endpoints_id_fk" FOREIGN KEY ("endpoint_id") REFERENCES "public"."webhook_endpoints"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
-- squawk-ignore require-concurrent-index-creation -- webhook_deliveries holds only deliveries still due or recently failed (delivered ones are deleted): a short scan, once per database
CREATE INDEX "webhook_deliveries_endpoint_due_idx" ON "webhook_deliveries" USING btree ("endpoint_id","next_attempt_at") WHERE "webhook_deliveries"."failed_at" is null and "webhook_deliveries"."endpoint_id" is not null;--> statement-breakpoint
-- squawk-ignore require-concurrent-index-creation -- webhook_deliveries holds only deliveries still due or recently failed (delivered ones are deleted): a short scan, once per database
CREATE INDEX "webhook_deliveries_endpoint_idx" ON "webhook_deliveries" USING btree ("endpoint_id","failed_at") WHERE "webhook_deliveries"."endpoint_id" is not null;--> statement-breakpoint
-- squawk-ignore require-concurrent-index-creation -- webhook_deliveries holds only deliveries still due or recently failed (delivered ones are deleted): a short scan, once per database
CREATE INDEX "webhook_deliveries_failed_idx" ON "webhook_deliveries" USING btree ("failed_at") WHERE "webhook_deliveries"."failed_at" is not null;--> statement-breakpoint
-- squawk-ignore require-concurrent-index-creation -- webhook_deliveries holds only deliveries still due or recently failed (delivered ones are deleted): a short scan, once per database
CREATE INDEX "webhook_deliveries_due_idx" ON "webhook_deliveries" USING btree ("url","next_attempt_at") WHERE "webhook_deliveries"."failed_at" is null and "webhook_deliveries"."url" is not null;--> statement-breakpoint
-- squawk-ignore constraint-missing-not-valid -- webhook_deliveries holds only deliveries still due or recently failed (delivered ones are deleted): a short scan, once per database
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_one_subscriber" CHECK (("webhook_deliveries"."url" is null) <> ("webhook_deliveries"."endpoint_id" is null));