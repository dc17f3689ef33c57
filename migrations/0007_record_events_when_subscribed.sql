-- As record_created_events(payloads, trace_context), but when `unconditionally` is false the
-- events are recorded only while some webhook endpoint exists: with no subscriber at all,
-- nothing is written. A disabled endpoint still counts, since the events it misses are kept
-- (failed) for its recover. The two-argument form stays, for writers that always record.
CREATE FUNCTION "record_created_events"("payloads" text[], "trace_context" text, "unconditionally" boolean) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT "unconditionally" AND NOT EXISTS (SELECT 1 FROM "webhook_endpoints") THEN
    RETURN 0;
  END IF;
  INSERT INTO "webhook_events" ("body", "traceparent")
  SELECT "payload", "trace_context" FROM unnest("payloads") AS "payload";
  RETURN cardinality("payloads");
END $$;
