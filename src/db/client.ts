import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import * as schema from './schema.js';

export type Database = NodePgDatabase<typeof schema>;

export interface PostgresOptions {
  url: string;
  poolMax: number;
  connectTimeoutMs: number;
  statementTimeoutMs: number;
  applicationName?: string;
}

export interface PostgresDatabase {
  db: Database;
  pool: pg.Pool;
  close(): Promise<void>;
}

export function createPostgresDatabase(
  options: PostgresOptions,
  onIdleError: (error: Error) => void,
): PostgresDatabase {
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.poolMax,
    connectionTimeoutMillis: options.connectTimeoutMs,
    // The server cancels a slow statement; the client-side timer covers a server that went silent.
    statement_timeout: options.statementTimeoutMs,
    query_timeout: options.statementTimeoutMs + 1000,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    application_name: options.applicationName ?? 'plant-store',
  });
  // An idle connection that breaks (database restart) must not crash the process.
  pool.on('error', onIdleError);
  let closing: Promise<void> | undefined;
  return {
    db: drizzle({ client: pool, schema }),
    pool,
    close: () => {
      closing ??= pool.end();
      return closing;
    },
  };
}
