-- Fences a claim apart from the attempt count, which a recover or a redelivery resets to 0.
ALTER TABLE "webhook_deliveries" ADD COLUMN "claims" bigint DEFAULT 0 NOT NULL;