import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import type * as schema from './schema.js';

/** Drizzle's PostgreSQL API, whichever engine runs underneath. */
export type Database = PgDatabase<PgQueryResultHKT, typeof schema>;

/** A PostgreSQL the service can use: a server, or the embedded engine. */
export interface AppDatabase {
  db: Database;
  engine: 'postgres' | 'pglite';
  /** Which database this is and where its data lives, for the log. Never holds a password. */
  description: string;
  /** Applies pending migrations; processes that race serialise, and the schema is applied once. */
  migrate(): Promise<void>;
  /** The connection pool's state; the embedded engine has no pool. */
  poolStats?: () => { total: number; idle: number; waiting: number };
  close(): Promise<void>;
}

export interface DatabaseOptions {
  /** A PostgreSQL server; when absent, the embedded engine with its data in `dataDir`. */
  url: string | undefined;
  dataDir: string;
  poolMax: number;
  connectTimeoutMs: number;
  statementTimeoutMs: number;
  /** Called when an idle server connection breaks (e.g. a database restart). */
  onIdleError: (error: Error) => void;
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
