-- Events of every type are recorded as created events are (see 0010): under the shared
-- subscription lock, and only while some receiving endpoint lists the type in `events`, so a
-- change that no endpoint receives writes nothing. A statement with no event to record takes
-- no lock.
CREATE OR REPLACE FUNCTION "record_events"("event_type" text, "payloads" text[], "trace_context" text) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(cardinality("payloads"), 0) = 0 THEN
    RETURN 0;
  END IF;
  PERFORM pg_advisory_xact_lock_shared(7308604714553418611);
  IF NOT EXISTS (
    SELECT 1 FROM "webhook_endpoints"
     WHERE "event_type" = ANY ("events") AND (NOT "configured" OR "declared_until" > now())
  ) THEN
    RETURN 0;
  END IF;
  INSERT INTO "webhook_events" ("type", "body", "traceparent")
  SELECT "event_type", "payload", "trace_context" FROM unnest("payloads") AS "payload";
  RETURN cardinality("payloads");
END $$;
--> statement-breakpoint
-- Kept for replicas of earlier releases while a rollout runs: their creates record newPlant
-- events as this release's do.
CREATE OR REPLACE FUNCTION "record_created_events"("payloads" text[], "trace_context" text, "unconditionally" boolean) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT "unconditionally" THEN
    RETURN "record_events"('newPlant', "payloads", "trace_context");
  END IF;
  PERFORM pg_advisory_xact_lock_shared(7308604714553418611);
  INSERT INTO "webhook_events" ("body", "traceparent")
  SELECT "payload", "trace_context" FROM unnest("payloads") AS "payload";
  RETURN cardinality("payloads");
END $$;
