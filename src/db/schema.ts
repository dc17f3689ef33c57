import { sql } from 'drizzle-orm';
import { bigint, check, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

export const plants = pgTable(
  'plants',
  {
    id: bigint('id', { mode: 'bigint' }).primaryKey(),
    name: text('name').notNull(),
    tag: text('tag'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    // The API validates these limits too; the database keeps them true for every writer.
    check('plants_name_length', sql`char_length(${table.name}) between 1 and 256`),
    check('plants_tag_length', sql`char_length(${table.tag}) <= 256`),
  ],
);
