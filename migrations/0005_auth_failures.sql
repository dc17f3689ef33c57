-- UNLOGGED, which the Drizzle schema cannot say: the counts are a minute's worth of failed
-- authentications; a crash may lose them, and they are not worth WAL or replicas.
CREATE UNLOGGED TABLE "auth_failures" (
	"address" text PRIMARY KEY NOT NULL,
	"failures" integer NOT NULL,
	"window_ends" timestamp with time zone NOT NULL,
	"throttled" boolean NOT NULL
);
--> statement-breakpoint
CREATE INDEX "auth_failures_throttled_idx" ON "auth_failures" USING btree ("window_ends") WHERE "auth_failures"."throttled";