-- The one way a writer records its created events: one webhook_events row per payload, in the
-- writer's own transaction. Writers know this function by name and nothing of webhooks; the
-- table and the fan-out to subscribers behind it are the webhooks' own to change.
CREATE FUNCTION "record_created_events"("payloads" text[], "trace_context" text) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "webhook_events" ("body", "traceparent")
  SELECT "payload", "trace_context" FROM unnest("payloads") AS "payload";
  RETURN cardinality("payloads");
END $$;
