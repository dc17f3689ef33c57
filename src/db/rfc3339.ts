import { type SQL, sql } from 'drizzle-orm';

/** A timestamp as RFC 3339 text in UTC with milliseconds: what Date.prototype.toISOString writes. */
export const rfc3339 = (at: SQL) =>
  sql`to_char(${at} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
