import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import type { Database } from './client.js';

/** `migrations/` at the package root, from both `src/db` and `dist/db`. */
export const migrationsFolder = fileURLToPath(new URL('../../migrations/', import.meta.url));

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
    const [row] = await db
      .select({ applied: sql<string | null>`max(created_at)::text` })
      .from(sql`drizzle.__drizzle_migrations`);
    return row?.applied != null && Number(row.applied) >= latestMillis ? 'ready' : 'unmigrated';
  } catch (error) {
    // undefined_table or invalid_schema_name: nothing was ever migrated here.
    const { code } = ((error as { cause?: unknown }).cause ?? error) as { code?: string };
    if (code === '42P01' || code === '3F000') return 'unmigrated';
    throw error;
  }
}
