import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import type pg from 'pg';
import type { DatabaseConfig } from '../config.js';
import { describeEmbedded, describeServer } from './describe.js';
import type { MigrationOptions } from './migrate.js';

/** Drizzle's PostgreSQL API, whichever engine runs underneath, and that engine's driver. */
export type Database = PgDatabase<PgQueryResultHKT> & {
  $client: pg.Pool | pg.Client | PGlite;
};

/** A PostgreSQL the service can use: a server, or the embedded engine. */
export interface AppDatabase {
  db: Database;
  engine: 'postgres' | 'pglite';
  /** Which database this is and where its data lives, for the log. Never holds a password. */
  description: string;
  /**
   * Applies pending migrations and resolves with their names; processes that race serialise,
   * and each migration is applied once.
   */
  migrate(options?: MigrationOptions): Promise<string[]>;
  /** The connection pool's state; the embedded engine has no pool. */
  poolStats?: () => { total: number; idle: number; waiting: number };
  close(): Promise<void>;
}

export type DatabaseOptions = Omit<DatabaseConfig, 'migrateOnStart' | 'migration'> & {
  /** Called when an idle server connection breaks (e.g. a database restart). */
  onIdleError: (error: Error) => void;
};

/** What openDatabase(options) opens, told before it does: opening can take seconds. */
export function describeDatabase(options: Pick<DatabaseOptions, 'url' | 'pooler' | 'dataDir'>): {
  engine: AppDatabase['engine'];
  description: string;
  /** The embedded engine has no database in `dataDir` yet, and creates one. */
  creating: boolean;
} {
  if (options.url) {
    return {
      engine: 'postgres',
      description: describeServer(options.url, options.pooler),
      creating: false,
    };
  }
  const dataDir = resolve(options.dataDir);
  return {
    engine: 'pglite',
    description: describeEmbedded(dataDir),
    creating: !existsSync(join(dataDir, 'PG_VERSION')),
  };
}

/** Opens the PostgreSQL server at `url`, or the embedded engine when there is none. */
export async function openDatabase(options: DatabaseOptions): Promise<AppDatabase> {
  if (options.url) {
    const { openPostgres } = await import('./postgres.js');
    return openPostgres({ ...options, url: options.url });
  }
  // Loaded only when used: the server path never pays for the WebAssembly engine.
  const { openEmbedded } = await import('./embedded.js');
  return openEmbedded(options);
}

/**
 * The database of a one-shot command (`db:migrate`, `webhooks:redeliver`): one connection, and
 * an idle connection's error is the command's own failure to report, not a process crash.
 */
export function openCommandDatabase(config: DatabaseConfig): Promise<AppDatabase> {
  return openDatabase({ ...config, poolMax: 1, onIdleError: () => {} });
}
