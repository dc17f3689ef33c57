import { ConfigError } from './config.js';
import { describeDatabase } from './db/client.js';
import { sqlStateOf } from './db/errors.js';
import type { DatabaseSettings } from './db/settings.js';

/** A command line the command cannot take: exit 2 with its usage. */
export class UsageError extends Error {}

/**
 * Ends an operator command that failed before its work began: a bad command line exits 2 with
 * `usage`, a bad configuration exits 1 with its one line; anything else is rethrown.
 */
export function endOnBadInput(error: unknown, usage: string): void {
  if (
    error instanceof UsageError ||
    (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')
  ) {
    process.stderr.write(`plant-store: ${(error as Error).message}\n${usage}\n`);
    process.exitCode = 2;
  } else if (error instanceof ConfigError) {
    process.stderr.write(error.line);
    process.exitCode = 1;
  } else throw error;
}

/** `count` and the noun, singular for one: `1 failed delivery`, `2 failed deliveries`. */
export function counted(count: number, one: string, many: string): string {
  return `${count} ${count === 1 ? one : many}`;
}

/**
 * Which database a command works on, for each line it writes: without DATABASE_URL it is the
 * embedded engine's directory, which an operator who forgot the variable must not take for the
 * service's database. Never holds a password.
 */
export function commandDatabaseOf(config: DatabaseSettings): string {
  const { engine, description } = describeDatabase(config);
  return engine === 'pglite' ? `${description} (DATABASE_URL is not set)` : description;
}

/** SQLSTATE undefined_table: the schema the command works on is not there. */
const UNDEFINED_TABLE = '42P01';

/**
 * When `error` says the command's database has no schema, tells the operator so, with what to
 * run, and answers true; otherwise answers false and the caller reports `error` itself.
 */
export function reportNotMigrated(error: unknown, what: string, config: DatabaseSettings): boolean {
  if (sqlStateOf(error) !== UNDEFINED_TABLE) return false;
  const next = config.url
    ? 'run npm run db:migrate with the same DATABASE_URL first'
    : "set DATABASE_URL to the service's database, or run npm run db:migrate to migrate this one";
  process.stderr.write(
    `plant-store: ${what} failed: ${commandDatabaseOf(config)} is not migrated; ${next}\n`,
  );
  return true;
}
