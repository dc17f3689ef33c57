import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../config-error.js';
import { integer } from '../environment.js';
import { MIGRATION_DEFAULTS } from './migrate.js';

/** The database's variables, with their defaults. */
export const DatabaseEnvironment = Type.Object({
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  DATA_DIR: Type.String({ minLength: 1, default: '.data' }),
  MIGRATE_ON_START: Type.Boolean({ default: true }),
  MIGRATION_LOCK_TIMEOUT_MS: integer(10, 600_000, MIGRATION_DEFAULTS.lockTimeoutMs),
  MIGRATION_RETRY_FOR_S: integer(0, 86_400, MIGRATION_DEFAULTS.retryForS),
  DB_POOLER: Type.Boolean({ default: false }),
  DB_POOL_MAX: integer(1, 1000, 10),
  DB_CONNECT_TIMEOUT_MS: integer(100, 600_000, 5000),
  DB_STATEMENT_TIMEOUT_MS: integer(100, 600_000, 5000),
  DATABASE_REPLICA_URLS: Type.Optional(Type.String()),
  DB_REPLICA_MAX_LAG_MS: integer(0, 3_600_000, 1000),
});

/** The comma-separated URLs of DATABASE_REPLICA_URLS, each a postgres:// URL. */
function readReplicaUrls(list: string | undefined, primary: string | undefined): string[] {
  const urls = (list ?? '')
    .split(',')
    .map((url) => url.trim())
    .filter((url) => url !== '');
  if (urls.length === 0) return [];
  if (primary === undefined) {
    throw new ConfigError(
      'DATABASE_REPLICA_URLS needs DATABASE_URL: the replicas follow a PostgreSQL server, and the embedded engine has none',
    );
  }
  for (const [index, url] of urls.entries()) {
    if (!/^postgres(ql)?:\/\//.test(url) || !URL.canParse(url)) {
      throw new ConfigError(
        `DATABASE_REPLICA_URLS must be comma-separated postgres:// or postgresql:// URLs; entry ${index + 1} is not one`,
      );
    }
  }
  return urls;
}

/** A PostgreSQL server at `url`; without one, the embedded engine in `dataDir`. */
export function readDatabaseSettings(environment: Static<typeof DatabaseEnvironment>) {
  const url = environment.DATABASE_URL;
  if (url !== undefined && !URL.canParse(url)) {
    throw new ConfigError('DATABASE_URL must be a postgres:// or postgresql:// URL');
  }
  if (environment.DB_POOLER && url === undefined) {
    throw new ConfigError('DB_POOLER needs DATABASE_URL: the embedded engine has no pooler');
  }
  return {
    url,
    /** `url` leads to a connection pooler in transaction mode; so do the replicas' URLs. */
    pooler: environment.DB_POOLER,
    /** Streaming replicas (or every node of an HA cluster) that serve the reads. */
    replicaUrls: readReplicaUrls(environment.DATABASE_REPLICA_URLS, url),
    /** How far behind a replica may be for a read that sends no Consistency-Token. */
    replicaMaxLagMs: environment.DB_REPLICA_MAX_LAG_MS,
    dataDir: environment.DATA_DIR,
    poolMax: environment.DB_POOL_MAX,
    connectTimeoutMs: environment.DB_CONNECT_TIMEOUT_MS,
    statementTimeoutMs: environment.DB_STATEMENT_TIMEOUT_MS,
    migrateOnStart: environment.MIGRATE_ON_START,
    migration: {
      /** How long one migration step waits for a lock before it gives way and tries again. */
      lockTimeoutMs: environment.MIGRATION_LOCK_TIMEOUT_MS,
      /** How long a migration step keeps trying before it gives up. */
      retryForMs: environment.MIGRATION_RETRY_FOR_S * 1000,
    },
  };
}

export type DatabaseSettings = ReturnType<typeof readDatabaseSettings>;
