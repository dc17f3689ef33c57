import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { migrateDatabase } from '../../src/db/migrate.js';

export interface ScratchDatabase {
  url: string;
  /** Runs SQL on this database with a short-lived connection. */
  query<T extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<T[]>;
  drop(): Promise<void>;
}

function withDatabase(url: string, name: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${name}`;
  return parsed.toString();
}

async function onServer(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: inject('databaseUrl') });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/**
 * Creates an empty database of its own on the test server, so each test file sees only its
 * own rows; `migrated` applies the project's migrations to it.
 */
export async function createScratchDatabase(
  { migrated }: { migrated: boolean } = { migrated: true },
): Promise<ScratchDatabase> {
  const name = `plant_store_test_${randomBytes(6).toString('hex')}`;
  await onServer(`create database ${name}`);
  const url = withDatabase(inject('databaseUrl'), name);
  if (migrated) await migrateDatabase({ url, connectTimeoutMs: 5000 });
  return {
    url,
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
