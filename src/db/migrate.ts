import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { desc, sql } from 'drizzle-orm';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import type { Database } from './client.js';
import { READ_ONLY_SQL_STATE, sqlStateOf } from './errors.js';

/** The nearest folder above this module with a package.json: src/db, dist/chunks or the image's. */
function packageRoot(): string {
  let folder = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(folder, 'package.json'))) {
    const parent = dirname(folder);
    if (parent === folder) throw new Error(`no package.json above ${import.meta.url}`);
    folder = parent;
  }
  return folder;
}

/** `migrations/` at the package root. */
export const migrationsFolder = join(packageRoot(), 'migrations');

// Any constant works as long as every process uses the same one: "plants" in ASCII.
const MIGRATION_LOCK_KEY = 0x706c616e7473n;

// Drizzle's own bookkeeping table, so databases migrated by drizzle-kit or drizzle's migrator
// and by this service agree on what has been applied.
const migrationsTable = sql`drizzle.__drizzle_migrations`;

/** The names of the migrations (their files' names), by their `created_at`. */
function migrationNames(): Map<number, string> {
  const journal = JSON.parse(readFileSync(join(migrationsFolder, 'meta', '_journal.json'), 'utf8'));
  return new Map(
    (journal.entries as { when: number; tag: string }[]).map(({ when, tag }) => [when, tag]),
  );
}

/** The names of the migrations this build ships, oldest first. */
export function shippedMigrationNames(): string[] {
  return [...migrationNames().values()];
}

/**
 * Applies the migrations this build ships that the database lacks, in one transaction that
 * first takes a transaction-level advisory lock. Processes that start together serialise on the
 * lock, and each finds what the one before it committed: the schema is applied exactly once.
 * The lock is released by the commit, so it holds through a pooler in transaction mode too,
 * where a session-level lock and its unlock could land on different server connections.
 * Resolves with the names of the migrations it applied.
 */
export async function applyMigrations(db: Database): Promise<string[]> {
  const migrations = readMigrationFiles({ migrationsFolder });
  const names = migrationNames();
  return db.transaction(async (tx) => {
    await tx.execute(sql.raw(`select pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`));
    await tx.execute(sql`create schema if not exists drizzle`);
    await tx.execute(
      sql`create table if not exists ${migrationsTable} (id serial primary key, hash text not null, created_at bigint)`,
    );
    const [last] = await tx
      .select({ createdAt: sql<string>`created_at::text` })
      .from(migrationsTable)
      .orderBy(desc(sql`created_at`))
      .limit(1);
    const appliedUpTo = last ? Number(last.createdAt) : Number.NEGATIVE_INFINITY;
    const applied: string[] = [];
    for (const migration of migrations) {
      if (migration.folderMillis <= appliedUpTo) continue;
      for (const statement of migration.sql) await tx.execute(sql.raw(statement));
      await tx.execute(
        sql`insert into ${migrationsTable} (hash, created_at) values (${migration.hash}, ${migration.folderMillis})`,
      );
      applied.push(names.get(migration.folderMillis) ?? String(migration.folderMillis));
    }
    return applied;
  });
}

/** What a migrator did, in one sentence for the log. */
export function describeMigrations(applied: string[], database: string): string {
  return applied.length === 0
    ? `the schema of ${database} is up to date: no migration to apply`
    : `applied ${applied.length === 1 ? 'the migration' : `${applied.length} migrations`} ${applied.join(', ')} to ${database}: its schema is up to date`;
}

/** The `created_at` of the newest migration shipped with this build. */
export function latestMigrationMillis(): number {
  const migrations = readMigrationFiles({ migrationsFolder });
  return Math.max(0, ...migrations.map((m) => m.folderMillis));
}

/**
 * 'ready' when the database accepts writes and holds every migration of this build
 * (`latestMillis`), 'read-only' when it is a standby or a primary made read-only, otherwise
 * 'unmigrated'. Rejects when the database cannot be reached.
 */
export async function schemaStatus(
  db: Database,
  latestMillis: number,
): Promise<'ready' | 'unmigrated' | 'read-only'> {
  try {
    const [row] = await db
      .select({
        applied: sql<string | null>`max(created_at)::text`,
        readOnly: sql<boolean>`current_setting('transaction_read_only') = 'on'`,
      })
      .from(sql`drizzle.__drizzle_migrations`);
    if (row?.readOnly) return 'read-only';
    return row?.applied != null && Number(row.applied) >= latestMillis ? 'ready' : 'unmigrated';
  } catch (error) {
    if (sqlStateOf(error) === READ_ONLY_SQL_STATE) return 'read-only';
    // undefined_table or invalid_schema_name: nothing was ever migrated here.
    const code = sqlStateOf(error);
    if (code === '42P01' || code === '3F000') return 'unmigrated';
    throw error;
  }
}
