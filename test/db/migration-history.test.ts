import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MigrationConfig } from 'drizzle-orm/migrator';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/database.js';
import { migrationsFolder, OUTSIDE_TRANSACTION_MARKER } from '../../src/db/migrate.js';
import { createScratchDatabase, type ScratchDatabase } from '../helpers/database.js';

// The service applies migrations with a runner of its own (one transaction, a transaction-level
// lock); databases that drizzle's migrator or drizzle-kit prepared must keep working, and back.

/** Drizzle's own migrator for the engine under `db`, over `folder`. */
async function drizzleMigrate(
  database: ScratchDatabase,
  db: Database,
  folder = migrationsFolder,
): Promise<void> {
  const config: MigrationConfig = { migrationsFolder: folder };
  if (database.engine === 'postgres') {
    const { migrate } = await import('drizzle-orm/node-postgres/migrator');
    await migrate(db as Parameters<typeof migrate>[0], config);
  } else {
    const { migrate } = await import('drizzle-orm/pglite/migrator');
    await migrate(db as Parameters<typeof migrate>[0], config);
  }
}

/**
 * A copy of the migrations that ends before the first one drizzle's migrator cannot apply: it runs
 * every file in a transaction, so not one marked to run outside one (CREATE INDEX CONCURRENTLY).
 */
function migrationsBeforeTheFirstOutsideATransaction(): { folder: string; count: number } {
  const folder = join(mkdtempSync(join(tmpdir(), 'plant-store-drizzle-')), 'migrations');
  cpSync(migrationsFolder, folder, { recursive: true });
  const journalFile = join(folder, 'meta', '_journal.json');
  const journal: { entries: { tag: string }[] } = JSON.parse(readFileSync(journalFile, 'utf8'));
  const first = journal.entries.findIndex(
    ({ tag }) =>
      readFileSync(join(folder, `${tag}.sql`), 'utf8').split('\n', 1)[0] ===
      OUTSIDE_TRANSACTION_MARKER,
  );
  expect(first, 'a migration marked to run outside a transaction').toBeGreaterThan(0);
  journal.entries = journal.entries.slice(0, first);
  writeFileSync(journalFile, JSON.stringify(journal));
  return { folder, count: first };
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

  it("is drizzle's: a database drizzle's migrator prepared is brought up to date by the service", async () => {
    const appDatabase = database.open();
    const { folder, count } = migrationsBeforeTheFirstOutsideATransaction();
    try {
      await drizzleMigrate(database, appDatabase.db, folder);
      const before = await history(database);
      expect(before).toHaveLength(count);
      await appDatabase.migrate();
      const after = await history(database);
      const shipped = readdirSync(migrationsFolder).filter((file) => file.endsWith('.sql'));
      expect(after).toHaveLength(shipped.length);
      expect(after.slice(0, count)).toStrictEqual(before);
    } finally {
      rmSync(join(folder, '..'), { recursive: true, force: true });
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
