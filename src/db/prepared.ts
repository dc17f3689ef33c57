import type { PGlite } from '@electric-sql/pglite';
import { fillPlaceholders, type SQL } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import type pg from 'pg';
import type { Database } from './database.js';
import { StatementError } from './errors.js';

/** A statement written in SQL, prepared once; a run sends only its placeholders' values. */
export interface PreparedStatement<Row> {
  execute(values: Record<string, unknown>): Promise<Row[]>;
}

const dialect = new PgDialect();

/** Runs the statement with its placeholders' values. */
type Run = (values: Record<string, unknown>) => Promise<{ rows: unknown[] }>;

/**
 * `query` rendered once, then run by the engine's own driver, each row an object or (`arrays`)
 * the array of its columns: a pg Pool's `query({ name, ... })` (a pooler's client sends it
 * unnamed: see poolerSafeClient), or PGlite's `query`.
 */
function prepare(db: Database, name: string, query: SQL, arrays: boolean): Run {
  const { sql: text, params } = dialect.sqlToQuery(query);
  const client = db.$client;
  if (isPGlite(client)) {
    const options = arrays ? ({ rowMode: 'array' } as const) : undefined;
    return (values) => client.query(text, fillPlaceholders(params, values), options);
  }
  const pool = client as pg.Pool;
  const named = name === '' ? undefined : name;
  return arrays
    ? (values) =>
        pool.query({
          name: named,
          text,
          values: fillPlaceholders(params, values),
          rowMode: 'array',
        })
    : (values) => pool.query({ name: named, text, values: fillPlaceholders(params, values) });
}

const isPGlite = (client: Database['$client']): client is PGlite => 'waitReady' in client;

/**
 * Prepares `query` under `name` (unnamed when '', or through a pooler: see poolerSafeClient), for the
 * statements that Drizzle's builders cannot express, such as data-modifying CTEs. Rows come as
 * the driver reads them: cast in SQL to a type both engines' drivers read alike (text, int4,
 * float8, bool).
 */
export function prepareStatement<Row>(
  db: Database,
  name: string,
  query: SQL,
): PreparedStatement<Row> {
  const run = prepare(db, name, query, false);
  return {
    async execute(values) {
      try {
        return (await run(values)).rows as Row[];
      } catch (error) {
        throw new StatementError(name || 'an unnamed statement', error);
      }
    },
  };
}

/**
 * As prepareStatement, for many rows: each comes as the array of its columns' values, in the
 * select's order, and `read` makes the result of them all, so that no object is made per row.
 */
export function prepareArrayStatement<Row extends unknown[], Result>(
  db: Database,
  name: string,
  query: SQL,
  read: (rows: Row[]) => Result,
): { execute(values: Record<string, unknown>): Promise<Result> } {
  const run = prepare(db, name, query, true);
  return {
    async execute(values) {
      let rows: unknown[];
      try {
        rows = (await run(values)).rows;
      } catch (error) {
        throw new StatementError(name || 'an unnamed statement', error);
      }
      return read(rows as Row[]);
    },
  };
}
