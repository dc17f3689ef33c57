import { createHash, randomBytes } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
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

const projectRoot = fileURLToPath(new URL('..', import.meta.url));

/** The files under `folder` (relative to the project), recursively. */
function filesUnder(folder: string): string[] {
  return readdirSync(join(projectRoot, folder), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(projectRoot, join(entry.parentPath, entry.name)));
}

/**
 * A digest of what the embedded engine's data is made from: the engine and the driver as
 * installed (package-lock.json), the code that opens and migrates it, the migrations, and this
 * file, which makes it.
 */
function embeddedDataKey(): string {
  const hash = createHash('sha256');
  const inputs = ['package-lock.json', 'test/global-setup.ts', ...filesUnder('src/db')];
  for (const file of [...inputs, ...filesUnder('migrations')]) {
    hash
      .update(`${file}\0`)
      .update(readFileSync(join(projectRoot, file)))
      .update('\0');
  }
  return hash.digest('hex').slice(0, 16);
}

/** Makes the embedded engine's data, new and migrated, into `folder`. */
async function makeEmbeddedData(folder: string): Promise<void> {
  const database = await openEmbedded({ dataDir: undefined, statementTimeoutMs: 0 });
  try {
    const { $client } = database.db as unknown as {
      $client: import('@electric-sql/pglite').PGlite;
    };
    const dump = async (file: string) =>
      writeFileSync(
        join(folder, file),
        Buffer.from(await (await $client.dumpDataDir('none')).arrayBuffer()),
      );
    await dump('blank.tar');
    await database.migrate();
    await dump('migrated.tar');
  } finally {
    await database.close();
  }
}

/**
 * The embedded engine's data, new and migrated: a fresh instance loads it instead of running
 * the engine's initdb (seconds in WebAssembly) each time. Made once for what it is made from
 * (embeddedDataKey) and kept in node_modules/.cache for the runs after, which it spares those
 * seconds before any test can start.
 */
async function embeddedData(): Promise<{ blank: string; migrated: string }> {
  const cache = join(projectRoot, 'node_modules', '.cache', 'plant-store-embedded-data');
  const key = embeddedDataKey();
  const folder = join(cache, key);
  if (!existsSync(folder)) {
    mkdirSync(cache, { recursive: true });
    const making = mkdtempSync(join(cache, 'making-'));
    try {
      await makeEmbeddedData(making);
      try {
        renameSync(making, folder);
      } catch (error) {
        // Another run made it meanwhile: theirs and this one's are the same.
        if (!existsSync(folder)) throw error;
      }
    } finally {
      rmSync(making, { recursive: true, force: true });
    }
    // Data made from older migrations or code is of no further use.
    for (const entry of readdirSync(cache)) {
      if (entry !== key && !entry.startsWith('making-')) {
        rmSync(join(cache, entry), { recursive: true, force: true });
      }
    }
  }
  return { blank: join(folder, 'blank.tar'), migrated: join(folder, 'migrated.tar') };
}

/**
 * Prepares what the project's tests share. The postgres project: the server (TEST_DATABASE_URL
 * when set, otherwise a throwaway container started with testcontainers; vitest.config.ts
 * includes this project only when one of the two is available) and a migrated template on it.
 * The embedded project: the engine's data, new and migrated.
 */
export default async function setup(project: TestProject) {
  if (project.config.provide?.engine === 'pglite') {
    project.provide('embeddedData', await embeddedData());
    return;
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
