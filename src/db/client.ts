import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { AppDatabase, DatabaseOptions } from './app-database.js';
import { describeEmbedded, describeServer } from './describe.js';
import type { DatabaseSettings } from './settings.js';

/** What openDatabase(options) opens, told before it does: opening can take seconds. */
export function describeDatabase(options: Pick<DatabaseOptions, 'url' | 'pooler' | 'dataDir'>): {
  engine: AppDatabase['engine'];
  description: string;
  /** The embedded engine has no database in `dataDir` yet, and creates one. */
  creating: boolean;
} {
  if (options.url) {
    return {
      engine: 'postgres',
      description: describeServer(options.url, options.pooler),
      creating: false,
    };
  }
  const dataDir = resolve(options.dataDir);
  return {
    engine: 'pglite',
    description: describeEmbedded(dataDir),
    creating: !existsSync(join(dataDir, 'PG_VERSION')),
  };
}

/** Opens the PostgreSQL server at `url`, or the embedded engine when there is none. */
export async function openDatabase(options: DatabaseOptions): Promise<AppDatabase> {
  if (options.url) {
    const { openPostgres } = await import('./postgres.js');
    return openPostgres({ ...options, url: options.url });
  }
  // Loaded only when used: the server path never pays for the WebAssembly engine.
  const { openEmbedded } = await import('./embedded.js');
  return openEmbedded(options);
}

/**
 * The database of a one-shot command (`db:migrate`, `webhooks:redeliver`): one connection, and
 * an idle connection's error is the command's own failure to report, not a process crash.
 */
export function openCommandDatabase(config: DatabaseSettings): Promise<AppDatabase> {
  const { replicaUrls: _, ...server } = config;
  return openDatabase({ ...server, poolMax: 1, onIdleError: () => {} });
}
