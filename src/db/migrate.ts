import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import type { Database } from './client.js';

/** `migrations/` at the package root, from both `src/db` and `dist/db`. */
export const migrationsFolder = fileURLToPath(new URL('../../migrations/', import.meta.url));

// Any constant works as long as every replica uses the same one: "plants" in ASCII.
const migrationLockKey = 0x706c616e7473n;

export interface MigrateOptions {
  url: string;
  connectTimeoutMs: number;
}

/**
 * Applies pending migrations. Replicas that start together serialise on a session-level
 * advisory lock, so the schema is applied exactly once and the others find nothing to do.
 */
export async function migrateDatabase(options: MigrateOptions): Promise<void> {
  const client = new pg.Client({
    connectionString: options.url,
    connectionTimeoutMillis: options.connectTimeoutMs,
    application_name: 'plant-store-migrate',
  });
  await client.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [migrationLockKey]);
    try {
      await migrate(drizzle({ client }), { migrationsFolder });
    } finally {
      await client.query('select pg_advisory_unlock($1)', [migrationLockKey]);
    }
  } finally {
    await client.end();
  }
}

/** The `created_at` of the newest migration shipped with this build. */
export function latestMigrationMillis(): number {
  const migrations = readMigrationFiles({ migrationsFolder });
  return Math.max(0, ...migrations.map((m) => m.folderMillis));
}

/**
 * 'ready' when the database holds every migration of this build (`latestMillis`), otherwise
 * 'unmigrated'. Rejects when the database cannot be reached.
 */
export async function schemaStatus(
  db: Database,
  latestMillis: number,
): Promise<'ready' | 'unmigrated'> {
  try {
    const { rows } = await db.execute<{ applied: string | null }>(
      sql`select max(created_at)::text as applied from drizzle.__drizzle_migrations`,
    );
    const applied = rows[0]?.applied;
    return applied != null && Number(applied) >= latestMillis ? 'ready' : 'unmigrated';
  } catch (error) {
    // undefined_table or invalid_schema_name: nothing was ever migrated here.
    const { code } = ((error as { cause?: unknown }).cause ?? error) as { code?: string };
    if (code === '42P01' || code === '3F000') return 'unmigrated';
    throw error;
  }
}
