import type { SQL } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import type { Database } from './client.js';

/** A statement written in SQL, prepared once; a run sends only its placeholders' values. */
export interface PreparedStatement<Row> {
  execute(values: Record<string, unknown>): Promise<Row[]>;
}

const dialect = new PgDialect();

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
  const prepared = db._.session.prepareQuery(
    dialect.sqlToQuery(query),
    undefined,
    name === '' ? undefined : name,
    false,
  );
  return {
    async execute(values) {
      const result = (await prepared.execute(values)) as { rows: Row[] };
      return result.rows;
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
  const prepared = db._.session.prepareQuery(
    dialect.sqlToQuery(query),
    undefined,
    name === '' ? undefined : name,
    true,
    (rows) => read(rows as Row[]),
  );
  return { execute: (values) => prepared.execute(values) as Promise<Result> };
}
