import type { MigrationConfig } from 'drizzle-orm/migrator';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/client.js';
import { migrationsFolder } from '../../src/db/migrate.js';
import { createScratchDatabase, type ScratchDatabase } from '../helpers/database.js';

// The service applies migrations with a runner of its own (one transaction, a transaction-level
// lock); databases that drizzle's migrator or drizzle-kit prepared must keep working, and back.

/** Drizzle's own migrator for the engine under `db`. */
async function drizzleMigrate(database: ScratchDatabase, db: Database): Promise<void> {
  const config: MigrationConfig = { migrationsFolder };
  if (database.engine === 'postgres') {
    const { migrate } = await import('drizzle-orm/node-postgres/migrator');
    await migrate(db as Parameters<typeof migrate>[0], config);
  } else {
    const { migrate } = await import('drizzle-orm/pglite/migrator');
    await migrate(db as Parameters<typeof migrate>[0], config);
  }
}

const history = (database: ScratchDatabase) =>
  database.query<{ hash: string; created_at: string }>(
    'select hash, created_at::text from drizzle.__drizzle_migrations order by id',
  );

describe('the migration history', () => {
  let database: ScratchDatabase;
  beforeEach(async () => {
    database = await createScratchDatabase({ migrated: false });
  });
  afterEach(() => database.drop());

  it("is drizzle's: a database drizzle's migrator prepared is up to date for the service", async () => {
    const appDatabase = database.open();
    try {
      await drizzleMigrate(database, appDatabase.db);
      const before = await history(database);
      await appDatabase.migrate();
      expect(before.length).toBeGreaterThan(0);
      expect(await history(database)).toStrictEqual(before);
    } finally {
      await appDatabase.close();
    }
  });

  it("is drizzle's: after the service migrated, drizzle's migrator finds nothing to apply", async () => {
    const appDatabase = database.open();
    try {
      await appDatabase.migrate();
      const before = await history(database);
      // Drizzle would re-run CREATE TABLE plants, and fail, if it saw a migration missing.
      await drizzleMigrate(database, appDatabase.db);
      expect(await history(database)).toStrictEqual(before);
    } finally {
      await appDatabase.close();
    }
  });
});
