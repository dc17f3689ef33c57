import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { inject } from 'vitest';
import type { AppDatabase } from '../../src/db/app-database.js';
import { openEmbedded } from '../../src/db/embedded.js';
import { openPostgres } from '../../src/db/postgres.js';

export type Engine = 'postgres' | 'pglite';

/** The engine this test project runs on. */
export function testEngine(): Engine {
  return inject('engine');
}

/**
 * True when a PostgreSQL server is there for the tests, so that the postgres project runs this
 * file too in a whole run (see vitest.config.ts); a run of the embedded project alone still says
 * so.
 */
export function onSecondEngine(): boolean {
  return inject('secondEngine');
}

export interface OpenOptions {
  /** Open it as through a pooler in transaction mode (DB_POOLER). */
  pooler?: boolean;
  poolMax?: number;
  connectTimeoutMs?: number;
  statementTimeoutMs?: number;
}

export interface ScratchDatabase {
  engine: Engine;
  /** The server's connection string; undefined on the embedded engine. */
  url: string | undefined;
  /** The app's handle on this database. The embedded engine has one; its close() keeps it open. */
  open(options?: OpenOptions): AppDatabase;
  /** Runs SQL on this database, beside the app. */
  query<T extends Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]>;
  drop(): Promise<void>;
}

function withDatabase(url: string, name: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${name}`;
  return parsed.toString();
}

/** Runs SQL on the test server's own database, as its administrator (beside any scratch one). */
export async function onServer(text: string): Promise<void> {
  const client = new pg.Client({ connectionString: inject('databaseUrl') });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

async function serverScratch(migrated: boolean): Promise<ScratchDatabase> {
  const name = `plant_store_test_${randomBytes(6).toString('hex')}`;
  await onServer(
    migrated
      ? `create database ${name} template ${inject('templateDatabase')}`
      : `create database ${name}`,
  );
  const url = withDatabase(inject('databaseUrl'), name);
  return {
    engine: 'postgres',
    url,
    open: (options = {}) =>
      openPostgres({
        url,
        pooler: options.pooler ?? false,
        poolMax: options.poolMax ?? 10,
        connectTimeoutMs: options.connectTimeoutMs ?? 2000,
        statementTimeoutMs: options.statementTimeoutMs ?? 5000,
        onIdleError: () => {},
      }),
    async query(text, values) {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        return (await client.query(text, values)).rows;
      } finally {
        await client.end();
      }
    },
    drop: () => onServer(`drop database if exists ${name} with (force)`),
  };
}

const embeddedDumps = new Map<string, Blob>();

/** The embedded engine's data as the global setup dumped it, read once per worker. */
function embeddedDump(migrated: boolean): Blob {
  const path = inject('embeddedData')[migrated ? 'migrated' : 'blank'];
  let dump = embeddedDumps.get(path);
  if (!dump) {
    dump = new Blob([readFileSync(path)]);
    embeddedDumps.set(path, dump);
  }
  return dump;
}

async function embeddedScratch(migrated: boolean): Promise<ScratchDatabase> {
  const database = await openEmbedded({
    dataDir: undefined,
    statementTimeoutMs: 5000,
    loadDataDir: embeddedDump(migrated),
  });
  return {
    engine: 'pglite',
    url: undefined,
    open: () => ({ ...database, close: async () => {} }),
    async query<T>(text: string, values?: unknown[]) {
      // Drizzle keeps the driver's client as $client: here, the PGlite instance.
      const { $client } = database.db as unknown as { $client: PGlite };
      return (await $client.query<T>(text, values)).rows;
    },
    drop: () => database.close(),
  };
}

/**
 * A database of its own for one test file, on the project's engine: a fresh database on the
 * test server, or a fresh in-memory embedded engine. `migrated`: with the migrations applied,
 * copied from what the global setup migrated once.
 */
export function createScratchDatabase(
  { migrated }: { migrated: boolean } = { migrated: true },
): Promise<ScratchDatabase> {
  return testEngine() === 'postgres' ? serverScratch(migrated) : embeddedScratch(migrated);
}

/** The connection string of a server scratch database, for tests that need a server. */
export function serverUrlOf(database: ScratchDatabase): string {
  if (!database.url) throw new Error('this test needs a PostgreSQL server');
  return database.url;
}

/**
 * Makes writes to `plants` wait until the returned function is called: a second connection
 * holds an exclusive lock on the table on a server; the embedded engine's single connection is
 * held by an open transaction.
 */
export async function holdPlantsTable(database: ScratchDatabase): Promise<() => Promise<void>> {
  if (database.engine === 'postgres') {
    const client = new pg.Client({ connectionString: serverUrlOf(database) });
    await client.connect();
    await client.query('begin');
    await client.query('lock table plants in exclusive mode');
    return async () => {
      await client.query('commit');
      await client.end();
    };
  }
  const { $client } = database.open().db as unknown as { $client: PGlite };
  let release = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let held = () => {};
  const holding = new Promise<void>((resolve) => {
    held = resolve;
  });
  const transaction = $client.transaction(async () => {
    held();
    await released;
  });
  await holding;
  return async () => {
    release();
    await transaction;
  };
}
