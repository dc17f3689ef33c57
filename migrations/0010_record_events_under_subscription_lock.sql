-- Events are recorded only while some endpoint receives them (a configured one only while a
-- running replica declares it), decided under a shared lock that making a subscription takes
-- exclusively: the check below runs with a snapshot taken after the lock (a new one for each
-- statement of a volatile function), so a create either committed before an endpoint was made
-- or sees it and records its events. `unconditionally` stays in the signature for the releases
-- that pass it while replicas of two releases run side by side.
CREATE OR REPLACE FUNCTION "record_created_events"("payloads" text[], "trace_context" text, "unconditionally" boolean) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(7308604714553418611);
  IF NOT "unconditionally" AND NOT EXISTS (
    SELECT 1 FROM "webhook_endpoints"
     WHERE NOT "configured" OR "declared_until" > now()
  ) THEN
    RETURN 0;
  END IF;
  INSERT INTO "webhook_events" ("body", "traceparent")
  SELECT "payload", "trace_context" FROM unnest("payloads") AS "payload";
  RETURN cardinality("payloads");
END $$;
