import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import type { AppDatabase } from './client.js';
import { migrationsFolder } from './migrate.js';
import * as schema from './schema.js';

export interface PostgresOptions {
  url: string;
  poolMax: number;
  connectTimeoutMs: number;
  statementTimeoutMs: number;
  onIdleError: (error: Error) => void;
}

// Any constant works as long as every replica uses the same one: "plants" in ASCII.
const migrationLockKey = 0x706c616e7473n;

/** host:port/database of a connection string, without user or password. */
export function describeServer(url: string): string {
  const { hostname, port, pathname } = new URL(url);
  return `${hostname || 'localhost'}:${port || '5432'}${pathname || '/'}`;
}

/**
 * Applies pending migrations to the server at `url`. Replicas that start together serialise on a
 * session-level advisory lock, so the schema is applied exactly once and the others find
 * nothing to do.
 */
export async function migratePostgres(url: string, connectTimeoutMs: number): Promise<void> {
  const client = new pg.Client({
    connectionString: url,
    connectionTimeoutMillis: connectTimeoutMs,
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

export function openPostgres(options: PostgresOptions): AppDatabase & { pool: pg.Pool } {
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.poolMax,
    connectionTimeoutMillis: options.connectTimeoutMs,
    // The server cancels a slow statement; the client-side timer covers a server that went silent.
    statement_timeout: options.statementTimeoutMs,
    query_timeout: options.statementTimeoutMs + 1000,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    application_name: 'plant-store',
  });
  // An idle connection that breaks (database restart) must not crash the process.
  pool.on('error', options.onIdleError);
  let closing: Promise<void> | undefined;
  return {
    db: drizzle({ client: pool, schema }),
    pool,
    engine: 'postgres',
    description: `the PostgreSQL server at ${describeServer(options.url)}`,
    migrate: () => migratePostgres(options.url, options.connectTimeoutMs),
    poolStats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
    close: () => {
      closing ??= pool.end();
      return closing;
    },
  };
}
