import type { PGlite } from '@electric-sql/pglite';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import type pg from 'pg';

/** Drizzle's PostgreSQL API, whichever engine runs underneath, and that engine's driver. */
export type Database = PgDatabase<PgQueryResultHKT> & {
  $client: pg.Pool | pg.Client | PGlite;
};
