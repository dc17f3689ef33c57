import { sql } from 'drizzle-orm';
import { bigint, check, index, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { NAME_MAX_LENGTH, TAG_MAX_LENGTH } from './schemas.js';

/** The plants table, as drizzle-kit generates its migrations and the queries name it. */
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
    check(
      'plants_name_length',
      sql`char_length(${table.name}) between 1 and ${sql.raw(String(NAME_MAX_LENGTH))}`,
    ),
    check(
      'plants_tag_length',
      sql`char_length(${table.tag}) <= ${sql.raw(String(TAG_MAX_LENGTH))}`,
    ),
    // Pages filtered by tag are a range scan of this index: tag = $1 and id > $2 order by id.
    index('plants_tag_id_idx').on(table.tag, table.id),
  ],
);
