import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import type { Database } from './database.js';
import { READ_ONLY_SQL_STATE, StatementError, sqlStateOf } from './errors.js';
import {
  type Blocker,
  blockersQuery,
  type Clock,
  describeBlockers,
  firstWords,
  realClock,
  withLockRetries,
} from './lock-waits.js';

/** The nearest folder above this module with a package.json: src/db, dist/chunks or the image's. */
function packageRoot(): string {
  let folder = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(folder, 'package.json'))) {
    const parent = dirname(folder);
    if (parent === folder) throw new Error(`no package.json above ${import.meta.url}`);
    folder = parent;
  }
  return folder;
}

/** `migrations/` at the package root. */
export const migrationsFolder = join(packageRoot(), 'migrations');

// Any constant works as long as every process uses the same one: "plants" in ASCII.
const MIGRATION_LOCK_KEY = 0x706c616e7473n;

/** The names of the migrations in `folder` (their files' names), oldest first. */
function migrationNames(folder: string): string[] {
  const journal = JSON.parse(readFileSync(join(folder, 'meta', '_journal.json'), 'utf8'));
  return (journal.entries as { tag: string }[]).map(({ tag }) => tag);
}

/** The names of the migrations this build ships, oldest first. */
export function shippedMigrationNames(): string[] {
  return migrationNames(migrationsFolder);
}

/**
 * The first line of a migration that must run outside a transaction (`CREATE INDEX
 * CONCURRENTLY`, `DROP INDEX CONCURRENTLY`, `REINDEX CONCURRENTLY`...). Its statements run one
 * by one, each on its own, under no `lock_timeout`: none of them waits in a way that stops reads
 * or writes, and a pooler in transaction mode could not carry a session setting to them.
 */
export const OUTSIDE_TRANSACTION_MARKER = '-- migrate: outside a transaction';

interface Migration {
  name: string;
  hash: string;
  millis: number;
  statements: string[];
  outsideTransaction: boolean;
}

function readMigrations(folder: string): Migration[] {
  const names = migrationNames(folder);
  // drizzle's reader, so the hash and the split at `--> statement-breakpoint` are drizzle's own.
  return readMigrationFiles({ migrationsFolder: folder }).map((migration, index) => {
    const name = names[index] ?? String(migration.folderMillis);
    const text = readFileSync(join(folder, `${name}.sql`), 'utf8');
    return {
      name,
      hash: migration.hash,
      millis: migration.folderMillis,
      statements: migration.sql.filter((statement) => statement.trim() !== ''),
      outsideTransaction: text.split('\n', 1)[0]?.trim() === OUTSIDE_TRANSACTION_MARKER,
    };
  });
}

/** A connection to the database being migrated. */
export interface MigrationSession {
  /** One statement, with its parameters, and its rows. */
  query<Row extends object>(text: string, values?: unknown[]): Promise<Row[]>;
  /** SQL as a migration file holds it: it may be several statements. */
  run(text: string): Promise<void>;
}

export interface MigrationConnections {
  main: MigrationSession;
  /**
   * A second connection where the engine has one (a server): it holds the advisory lock while a
   * migration runs outside a transaction, and asks who blocks a step that waits.
   */
  beside: MigrationSession | undefined;
}

/** Where MIGRATION_LOCK_TIMEOUT_MS and MIGRATION_RETRY_FOR_S start. */
export const MIGRATION_DEFAULTS = { lockTimeoutMs: 500, retryForS: 600 };

export interface MigrationOptions {
  /** How long one step may wait for a lock before it gives way and tries again. */
  lockTimeoutMs?: number;
  /** How long a step keeps trying before it gives up. */
  retryForMs?: number;
  /** Where the migrations are; `migrations/` of this build unless given. */
  folder?: string;
  /** Told what a waiting step waits for, and what the runner repairs. */
  log?: MigrationLog;
  clock?: Clock;
}

export interface MigrationLog {
  warn(fields: object, message: string): void;
}

const silent: MigrationLog = { warn: () => {} };

/**
 * Runs `work` in a READ COMMITTED transaction whatever the database's or role's default: under
 * REPEATABLE READ or SERIALIZABLE the lock holder would keep a snapshot, and the concurrent
 * build it waits for would wait for that snapshot in turn, for ever.
 */
async function inTransaction<T>(session: MigrationSession, work: () => Promise<T>): Promise<T> {
  await session.run('begin isolation level read committed');
  try {
    const result = await work();
    await session.run('commit');
    return result;
  } catch (error) {
    // A connection that is gone has rolled back already; the first error is the one to tell.
    await session.run('rollback').catch(() => {});
    throw error;
  }
}

/**
 * Runs `work` in a transaction that holds the migration lock, with this backend's pid. The lock
 * is asked for in a short transaction, ended and asked again while another process holds it,
 * never waited on: a concurrent index build of the process that holds the lock waits for every
 * transaction that had a snapshot when it began, so a transaction waiting for the lock meanwhile
 * would wait for ever.
 */
async function underLock<T>(
  session: MigrationSession,
  work: (pid: number) => Promise<T>,
): Promise<T> {
  for (let pause = 20; ; pause = Math.min(pause * 2, 500)) {
    const outcome = await inTransaction(session, async () => {
      const [row] = await session.query<{ locked: boolean; pid: number }>(
        `select pg_try_advisory_xact_lock(${MIGRATION_LOCK_KEY}) as locked, pg_backend_pid() as pid`,
      );
      return row?.locked ? { value: await work(Number(row.pid)) } : undefined;
    });
    if (outcome) return outcome.value;
    await realClock.sleep(pause);
  }
}

/** The `created_at` of the newest migration the database records, as drizzle's migrator reads it. */
async function appliedThrough(session: MigrationSession): Promise<number> {
  const [last] = await session.query<{ created_at: string }>(
    'select created_at::text from drizzle.__drizzle_migrations order by drizzle.__drizzle_migrations.created_at desc limit 1',
  );
  return last ? Number(last.created_at) : Number.NEGATIVE_INFINITY;
}

function record(session: MigrationSession, migration: Migration): Promise<unknown> {
  return session.query(
    'insert into drizzle.__drizzle_migrations (hash, created_at) values ($1, $2)',
    [migration.hash, migration.millis],
  );
}

/**
 * Reads, `afterMs` into a step, who blocks the backend `pid` from another connection: by then
 * a step that waits for a lock is waiting. `stop()` resolves with what it found.
 */
function watchBlockers(beside: MigrationSession | undefined, pid: number, afterMs: number) {
  let reading: Promise<Blocker[]> = Promise.resolve([]);
  const timer = setTimeout(() => {
    reading = (beside?.query<Blocker>(blockersQuery, [pid]) ?? Promise.resolve([]))
      .then((rows) => rows.map((row) => ({ ...row, query: firstWords(row.query ?? '') })))
      .catch(() => []);
  }, afterMs);
  return {
    stop: async (): Promise<Blocker[]> => {
      clearTimeout(timer);
      return reading;
    },
  };
}

/** One statement of `migration`; a failure is named by the migration, for the log. */
async function runStep(
  session: MigrationSession,
  migration: Migration,
  statement: string,
): Promise<void> {
  try {
    await session.run(statement);
  } catch (error) {
    throw new StatementError(migration.name, error);
  }
}

/**
 * One migration, in its own transaction under the advisory lock and `lock_timeout`; resolves
 * false when another process applied it first.
 */
async function applyInTransaction(
  connections: MigrationConnections,
  migration: Migration,
  lockTimeoutMs: number,
  blockers: Blocker[],
): Promise<boolean> {
  const { main, beside } = connections;
  return underLock(main, async (pid) => {
    if ((await appliedThrough(main)) >= migration.millis) return false;
    await main.run(`set local lock_timeout = ${Math.trunc(lockTimeoutMs)}`);
    const watch = watchBlockers(beside, pid, lockTimeoutMs / 2);
    try {
      for (const statement of migration.statements) await runStep(main, migration, statement);
    } finally {
      blockers.push(...(await watch.stop()));
    }
    await record(main, migration);
    return true;
  });
}

const concurrentIndex =
  /^\s*create\s+(?:unique\s+)?index\s+concurrently\s+(?:if\s+not\s+exists\s+)?((?:"[^"]+"|[\w$]+)(?:\.(?:"[^"]+"|[\w$]+))?)/i;

/** The index a `CREATE INDEX CONCURRENTLY` statement builds, as written; else undefined. */
export function concurrentIndexName(statement: string): string | undefined {
  return concurrentIndex.exec(statement.replace(/^(\s*--[^\n]*\n)+/, ''))?.[1];
}

/** Drops `index` when an interrupted concurrent build left it INVALID, so it is built again. */
async function dropInvalidIndex(
  session: MigrationSession,
  index: string,
  log: MigrationLog,
): Promise<void> {
  const [found] = await session.query<{ valid: boolean }>(
    'select indisvalid as valid from pg_index where indexrelid = to_regclass($1)',
    [index],
  );
  if (found === undefined || found.valid) return;
  log.warn(
    { index },
    `the index ${index} is INVALID, left by an interrupted concurrent build: dropping it to build it again`,
  );
  await session.run(`drop index concurrently if exists ${index}`);
}

async function runOutside(
  session: MigrationSession,
  migration: Migration,
  log: MigrationLog,
): Promise<void> {
  for (const statement of migration.statements) {
    const index = concurrentIndexName(statement);
    if (index !== undefined) await dropInvalidIndex(session, index, log);
    await runStep(session, migration, statement);
  }
}

/**
 * One migration marked to run outside a transaction: its statements run one by one on the main
 * connection while the second one holds the advisory lock in an open READ COMMITTED transaction
 * (which takes no lock on any table and holds no snapshot, so a concurrent build does not wait
 * for it) and
 * records the migration before it commits. Resolves false when another process applied it.
 */
async function applyOutsideTransaction(
  { main, beside }: MigrationConnections,
  migration: Migration,
  log: MigrationLog,
): Promise<boolean> {
  if (beside === undefined) {
    // The embedded engine: one connection in one process, so nothing else migrates meanwhile.
    if ((await appliedThrough(main)) >= migration.millis) return false;
    await runOutside(main, migration, log);
    await inTransaction(main, () => record(main, migration));
    return true;
  }
  return underLock(beside, async () => {
    // It is idle in its transaction for as long as the build takes: a timeout set for the
    // database or role would end it, and the lock with it, halfway through.
    await beside.run('set local idle_in_transaction_session_timeout = 0');
    if ((await appliedThrough(beside)) >= migration.millis) return false;
    await runOutside(main, migration, log);
    await record(beside, migration);
    return true;
  });
}

/**
 * Applies the migrations in the folder that the database lacks, oldest first, each in its own
 * transaction that first takes a transaction-level advisory lock (so processes that start
 * together serialise, and each finds what the one before it committed: every migration is
 * applied exactly once) and then sets `lock_timeout`. A step that cannot get its lock in time
 * gives way, so the reads and writes queued behind it go on, and the migration is tried again
 * with a backoff; it leaves nothing half-applied. The lock is released by each commit, so it
 * holds through a pooler in transaction mode too, where a session-level lock and its unlock
 * could land on different server connections. Bookkeeping is drizzle's own table, so databases
 * migrated by drizzle-kit or drizzle's migrator and by this runner agree. Resolves with the
 * names of the migrations it applied.
 */
export async function applyMigrations(
  connections: MigrationConnections,
  options: MigrationOptions = {},
): Promise<string[]> {
  const lockTimeoutMs = options.lockTimeoutMs ?? MIGRATION_DEFAULTS.lockTimeoutMs;
  const retryForMs = options.retryForMs ?? MIGRATION_DEFAULTS.retryForS * 1000;
  const log = options.log ?? silent;
  const clock = options.clock ?? realClock;
  const migrations = readMigrations(options.folder ?? migrationsFolder);
  const { main } = connections;
  const through = await underLock(main, async () => {
    await main.run('create schema if not exists drizzle');
    await main.run(
      'create table if not exists drizzle.__drizzle_migrations (id serial primary key, hash text not null, created_at bigint)',
    );
    return appliedThrough(main);
  });
  const applied: string[] = [];
  for (const migration of migrations.filter(({ millis }) => millis > through)) {
    const done = migration.outsideTransaction
      ? await applyOutsideTransaction(connections, migration, log)
      : await withLockRetries(
          {
            step: migration.name,
            lockTimeoutMs,
            retryForMs,
            clock,
            onWait: ({ attempt, blockers, retryInMs }) =>
              log.warn(
                { migration: migration.name, attempt, blockers, retryInMs },
                `migration ${migration.name} waited ${lockTimeoutMs} ms for ${describeBlockers(blockers)} and gave way so that queries queued behind it go on; trying again in ${retryInMs} ms`,
              ),
          },
          (blockers) => applyInTransaction(connections, migration, lockTimeoutMs, blockers),
        );
    if (done) applied.push(migration.name);
  }
  return applied;
}

/** What a migrator did, in one sentence for the log. */
export function describeMigrations(applied: string[], database: string): string {
  return applied.length === 0
    ? `the schema of ${database} is up to date: no migration to apply`
    : `applied ${applied.length === 1 ? 'the migration' : `${applied.length} migrations`} ${applied.join(', ')} to ${database}: its schema is up to date`;
}

/** The `created_at` of the newest migration shipped with this build. */
export function latestMigrationMillis(): number {
  const migrations = readMigrationFiles({ migrationsFolder });
  return Math.max(0, ...migrations.map((m) => m.folderMillis));
}

/**
 * 'ready' when the database accepts writes and holds every migration of this build
 * (`latestMillis`), 'read-only' when it is a standby or a primary made read-only, otherwise
 * 'unmigrated'. Rejects when the database cannot be reached.
 */
export async function schemaStatus(
  db: Database,
  latestMillis: number,
): Promise<'ready' | 'unmigrated' | 'read-only'> {
  try {
    const [row] = await db
      .select({
        applied: sql<string | null>`max(created_at)::text`,
        readOnly: sql<boolean>`current_setting('transaction_read_only') = 'on'`,
      })
      .from(sql`drizzle.__drizzle_migrations`);
    if (row?.readOnly) return 'read-only';
    return row?.applied != null && Number(row.applied) >= latestMillis ? 'ready' : 'unmigrated';
  } catch (error) {
    if (sqlStateOf(error) === READ_ONLY_SQL_STATE) return 'read-only';
    // undefined_table or invalid_schema_name: nothing was ever migrated here.
    const code = sqlStateOf(error);
    if (code === '42P01' || code === '3F000') return 'unmigrated';
    throw error;
  }
}
