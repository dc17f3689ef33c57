import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import type { AppDatabase } from './app-database.js';
import { describeServer } from './describe.js';
import { READ_ONLY_SQL_STATE, ServerReadOnlyError, sqlStateOf } from './errors.js';
import { applyMigrations, type MigrationOptions, type MigrationSession } from './migrate.js';
import { type ServerOptions, serverPoolConfig } from './pool-config.js';
import { openReplicaSet, type ReplicaSetOptions } from './replicas.js';

export interface PostgresOptions extends ServerOptions {
  onIdleError: (error: Error) => void;
  /** Streaming replicas that serve reads (see openReplicaSet). */
  replicas?: Pick<ReplicaSetOptions, 'urls' | 'maxLagMs' | 'log'> | undefined;
}

/** A migration's connection on a pg client: simple queries for files, extended for parameters. */
function migrationSession(client: pg.Client): MigrationSession {
  return {
    query: async (text, values) => (await client.query(text, values)).rows,
    run: async (text) => {
      await client.query(text);
    },
  };
}

/**
 * Applies pending migrations to the server at `url`, directly or through a pooler, each in a
 * transaction under a transaction-level advisory lock (see applyMigrations): processes that
 * start together serialise, each migration is applied exactly once and the others find nothing
 * to do. Two connections: the migrations' own, and one beside it (see MigrationConnections).
 */
export async function migratePostgres(
  url: string,
  connectTimeoutMs: number,
  options: MigrationOptions = {},
): Promise<string[]> {
  // No statement timeout: a migration may rightly take longer than any request.
  const connect = async () => {
    const client = new pg.Client({
      connectionString: url,
      connectionTimeoutMillis: connectTimeoutMs,
      application_name: 'plant-store-migrate',
    });
    // A connection lost while idle is reported by the next query on it, not as a crash.
    client.on('error', () => {});
    await client.connect();
    return client;
  };
  const main = await connect();
  try {
    const beside = await connect();
    try {
      return await applyMigrations(
        { main: migrationSession(main), beside: migrationSession(beside) },
        options,
      );
    } finally {
      await beside.end();
    }
  } finally {
    await main.end();
  }
}

type ConnectCallback = (
  error: Error | undefined,
  client: pg.PoolClient | undefined,
  release: (release?: unknown) => void,
) => void;

/**
 * A pool that hands out only connections to a server that accepts writes. Behind one address a
 * failover can lead, for a while, to a standby or to a demoted primary (SQLSTATE 25006): a new
 * connection is asked whether it is read-only before its first use, and once any statement met a
 * read-only server, every connection is asked again before its next use. A read-only one is
 * dropped and the caller gets a ServerReadOnlyError (503), so nothing is written there and the
 * pool recovers by itself when the address leads to the primary again.
 */
export class WritablePool extends pg.Pool {
  /** Each connection that answered writable, and the generation at which it did. */
  readonly #writableAt = new WeakMap<pg.PoolClient, number>();
  #generation = 0;

  constructor(config: pg.PoolConfig) {
    super(config);
    this.on('release', (error) => {
      if (sqlStateOf(error) === READ_ONLY_SQL_STATE) this.#generation++;
    });
  }

  // biome-ignore lint/suspicious/noExplicitAny: the overloads of pg-pool's connect
  override connect(callback?: ConnectCallback): any {
    if (callback === undefined) {
      return new Promise<pg.PoolClient>((resolve, reject) => {
        this.connect((error, client) => (error || !client ? reject(error) : resolve(client)));
      });
    }
    super.connect((error, client, release) => {
      if (error || !client) {
        callback(error, client, release);
        return;
      }
      if (this.#writableAt.get(client) === this.#generation) {
        callback(undefined, client, release);
        return;
      }
      const generation = this.#generation;
      // Handed out without an 'error' listener: a loss mid-question must not crash the process.
      const ignoreLoss = () => {};
      client.on('error', ignoreLoss);
      client.query("select current_setting('transaction_read_only') = 'on' as read_only").then(
        ({ rows }) => {
          client.removeListener('error', ignoreLoss);
          if (rows[0]?.read_only !== true) {
            this.#writableAt.set(client, generation);
            callback(undefined, client, release);
            return;
          }
          const readOnly = new ServerReadOnlyError();
          release(readOnly);
          callback(readOnly, undefined, () => {});
        },
        (checkError: Error) => {
          client.removeListener('error', ignoreLoss);
          release(checkError);
          callback(checkError, undefined, () => {});
        },
      );
    });
    return undefined;
  }
}

export function openPostgres(options: PostgresOptions): AppDatabase & { pool: pg.Pool } {
  const pool = new WritablePool(serverPoolConfig(options));
  // An idle connection that breaks (database restart) must not crash the process.
  pool.on('error', options.onIdleError);
  const replicas =
    options.replicas && options.replicas.urls.length > 0
      ? openReplicaSet(pool, { ...options, ...options.replicas })
      : undefined;
  let closing: Promise<void> | undefined;
  return {
    db: drizzle({ client: pool }),
    pool,
    engine: 'postgres',
    description: describeServer(options.url, options.pooler),
    migrate: (migration) => migratePostgres(options.url, options.connectTimeoutMs, migration),
    poolStats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
    ...(replicas && { replicas }),
    close: () => {
      closing ??= Promise.all([replicas?.close(), pool.end()]).then(() => {});
      return closing;
    },
  };
}
