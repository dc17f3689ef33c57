import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { openEmbedded } from '../src/db/embedded.js';
import { migratePostgres } from '../src/db/postgres.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The engine the integration tests of this project run on. */
    engine: 'postgres' | 'pglite';
    /**
     * The postgres project runs this project's files too, in the same run: what does not
     * depend on the engine (the HTTP side) is proven there already.
     */
    secondEngine: boolean;
    /** A PostgreSQL server the tests may create databases on (the postgres project only). */
    databaseUrl: string;
    /** A migrated database on that server that each test's database is cloned from. */
    templateDatabase: string;
    /** The embedded engine's data, new and migrated, as dumped tar files (the embedded project). */
    embeddedData: { blank: string; migrated: string };
  }
}

/** The image the tests run against when no TEST_DATABASE_URL is given. */
export const POSTGRES_IMAGE = 'postgres:18-alpine';

async function onServer(url: string, text: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

/**
 * Migrates a database once for the whole run: each test's database is a copy of it
 * (`CREATE DATABASE ... TEMPLATE`), which costs a file copy instead of the migrations.
 */
async function migratedTemplate(
  serverUrl: string,
): Promise<{ name: string; drop(): Promise<void> }> {
  const name = `plant_store_test_template_${randomBytes(6).toString('hex')}`;
  await onServer(serverUrl, `create database ${name}`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  await migratePostgres(url.toString(), 5000);
  return { name, drop: () => onServer(serverUrl, `drop database if exists ${name} with (force)`) };
}

/**
 * Makes the embedded engine's data once for the whole run, new and migrated: a fresh instance
 * then loads it instead of running the engine's initdb (seconds in WebAssembly) each time.
 */
async function embeddedData(): Promise<{
  paths: { blank: string; migrated: string };
  remove(): void;
}> {
  const folder = mkdtempSync(join(tmpdir(), 'plant-store-test-'));
  const database = await openEmbedded({ dataDir: undefined, statementTimeoutMs: 0 });
  try {
    const { $client } = database.db as unknown as {
      $client: import('@electric-sql/pglite').PGlite;
    };
    const dump = async (file: string) => {
      const path = join(folder, file);
      writeFileSync(path, Buffer.from(await (await $client.dumpDataDir('none')).arrayBuffer()));
      return path;
    };
    const blank = await dump('blank.tar');
    await database.migrate();
    const migrated = await dump('migrated.tar');
    return {
      paths: { blank, migrated },
      remove: () => rmSync(folder, { recursive: true, force: true }),
    };
  } finally {
    await database.close();
  }
}

/**
 * Prepares what the project's tests share. The postgres project: the server (TEST_DATABASE_URL
 * when set, otherwise a throwaway container started with testcontainers; vitest.config.ts
 * includes this project only when one of the two is available) and a migrated template on it.
 * The embedded project: the engine's data, new and migrated.
 */
export default async function setup(project: TestProject) {
  if (project.config.provide?.engine === 'pglite') {
    const data = await embeddedData();
    project.provide('embeddedData', data.paths);
    return data.remove;
  }
  let serverUrl = process.env.TEST_DATABASE_URL;
  let stopContainer = async () => {};
  if (!serverUrl) {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer(POSTGRES_IMAGE).start();
    serverUrl = container.getConnectionUri();
    stopContainer = async () => {
      await container.stop();
    };
  }
  project.provide('databaseUrl', serverUrl);
  const template = await migratedTemplate(serverUrl);
  project.provide('templateDatabase', template.name);
  return async () => {
    await template.drop();
    await stopContainer();
  };
}
