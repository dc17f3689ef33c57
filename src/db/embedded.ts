import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { drizzle } from 'drizzle-orm/pglite';
import type { AppDatabase } from './app-database.js';
import { describeEmbedded } from './describe.js';
import { DataDirInUseError } from './errors.js';
import { applyMigrations } from './migrate.js';

export interface EmbeddedOptions {
  /** Directory of the data; in memory (gone at exit) when undefined. */
  dataDir: string | undefined;
  statementTimeoutMs: number;
  /** A dump of another instance's data (dumpDataDir) to start from, instead of a new database. */
  loadDataDir?: Blob;
}

const lockedHere = new Set<string>();

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Claims `dataDir` for this process. The embedded engine is a single process's database: two
 * processes (or two instances in one) writing the same files would corrupt it.
 */
function lockDataDir(dataDir: string): () => void {
  if (lockedHere.has(dataDir))
    throw new DataDirInUseError(`${dataDir} is already open in this process`);
  mkdirSync(dataDir, { recursive: true });
  const lockFile = join(dataDir, 'plant-store.lock');
  for (;;) {
    try {
      const fd = openSync(lockFile, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      lockedHere.add(dataDir);
      return () => {
        lockedHere.delete(dataDir);
        unlinkSync(lockFile);
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = Number.parseInt(readFileSync(lockFile, 'utf8'), 10);
      // Our own pid in the file is a previous life of this process (a restarted container).
      if (holder !== process.pid && isRunning(holder)) {
        throw new DataDirInUseError(`${dataDir} is in use by process ${holder}`);
      }
      unlinkSync(lockFile);
    }
  }
}

/** PostgreSQL compiled to WebAssembly (PGlite), in this process: for local runs, demos, tests. */
export async function openEmbedded(options: EmbeddedOptions): Promise<AppDatabase> {
  const dataDir = options.dataDir === undefined ? undefined : resolve(options.dataDir);
  const unlock = dataDir === undefined ? () => {} : lockDataDir(dataDir);
  let client: PGlite;
  try {
    client = await PGlite.create({
      ...(dataDir !== undefined && { dataDir }),
      ...(options.loadDataDir && { loadDataDir: options.loadDataDir }),
    });
    await client.exec(`set statement_timeout = ${Math.trunc(options.statementTimeoutMs)}`);
  } catch (error) {
    unlock();
    throw error;
  }
  const db = drizzle({ client });
  let closing: Promise<void> | undefined;
  return {
    db,
    engine: 'pglite',
    description: describeEmbedded(dataDir),
    migrate: (migration) =>
      applyMigrations(
        {
          main: {
            query: async (text, values) => (await client.query<never>(text, values)).rows,
            run: async (text) => {
              await client.exec(text);
            },
          },
          beside: undefined,
        },
        migration,
      ),
    close: () => {
      closing ??= client.close().finally(unlock);
      return closing;
    },
  };
}
