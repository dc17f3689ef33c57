import { readMigrationFiles } from 'drizzle-orm/migrator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrationsFolder } from '../../src/db/migrate.js';
import { migratePostgres } from '../../src/db/postgres.js';
import { createScratchDatabase, type ScratchDatabase, serverUrlOf } from '../helpers/database.js';

/** Every migration this build ships, as the migrations table records it. */
const shipped = readMigrationFiles({ migrationsFolder }).map((migration) => ({
  created_at: String(migration.folderMillis),
}));

describe('migrateDatabase', () => {
  let database: ScratchDatabase;
  beforeAll(async () => {
    database = await createScratchDatabase({ migrated: false });
  });
  afterAll(() => database.drop());
  const serverUrl = () => serverUrlOf(database);

  it('lets several migrators start at once on an empty database and applies the schema once', async () => {
    const migrators = Array.from({ length: 8 }, () => migratePostgres(serverUrl(), 5000));
    const results = await Promise.allSettled(migrators);
    expect(results.map((r) => r.status)).toStrictEqual(Array(8).fill('fulfilled'));
    const applied = await database.query<{ created_at: string }>(
      'select created_at from drizzle.__drizzle_migrations order by id',
    );
    expect(applied).toStrictEqual(shipped);
  });

  it('creates the plants table with a bigint primary key', async () => {
    const columns = await database.query(
      `select column_name, data_type, is_nullable from information_schema.columns
       where table_name = 'plants' order by ordinal_position`,
    );
    expect(columns).toStrictEqual([
      { column_name: 'id', data_type: 'bigint', is_nullable: 'NO' },
      { column_name: 'name', data_type: 'text', is_nullable: 'NO' },
      { column_name: 'tag', data_type: 'text', is_nullable: 'YES' },
      { column_name: 'created_at', data_type: 'timestamp with time zone', is_nullable: 'NO' },
    ]);
    const [primaryKey] = await database.query(
      `select a.attname from pg_index i join pg_attribute a on a.attrelid = i.indrelid and a.attnum = any(i.indkey)
       where i.indrelid = 'plants'::regclass and i.indisprimary`,
    );
    expect(primaryKey).toStrictEqual({ attname: 'id' });
  });

  it('is a no-op when the schema is current', async () => {
    await migratePostgres(serverUrl(), 5000);
    const [{ count }] = (await database.query<{ count: string }>(
      'select count(*) from drizzle.__drizzle_migrations',
    )) as [{ count: string }];
    expect(count).toBe(String(shipped.length));
  });

  it('keeps the length limits in the table itself', async () => {
    await expect(database.query("insert into plants (id, name) values (1, '')")).rejects.toThrow(
      /plants_name_length/,
    );
    await expect(
      database.query('insert into plants (id, name, tag) values (1, $1, $2)', [
        'x',
        't'.repeat(257),
      ]),
    ).rejects.toThrow(/plants_tag_length/);
  });
});
