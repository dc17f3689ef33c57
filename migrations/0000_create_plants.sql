CREATE TABLE "plants" (
	"id" bigint PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"tag" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "plants_name_length" CHECK (char_length("plants"."name") between 1 and 256),
	CONSTRAINT "plants_tag_length" CHECK (char_length("plants"."tag") <= 256)
);
