import pg from 'pg';

/** How the service reaches one PostgreSQL server. */
export interface ServerOptions {
  url: string;
  /** `url` leads to a connection pooler in transaction mode (PgBouncer, RDS Proxy, Supavisor). */
  pooler: boolean;
  poolMax: number;
  connectTimeoutMs: number;
  statementTimeoutMs: number;
}

type QueryCallback = (error: Error | null, result?: pg.QueryResult) => void;

const startsTransaction = /^\s*(begin|start\s+transaction)\b/i;

/**
 * A connection that keeps nothing between transactions, for a pooler in transaction mode that
 * hands each transaction to whichever server connection is free:
 * - statements are unnamed (a named prepared statement lives on one server connection only);
 * - the statement timeout is `SET LOCAL` inside each transaction, not a startup parameter
 *   (which poolers refuse): a statement outside a transaction is sent as
 *   `begin; set local ...`, the statement, `commit`, pipelined, so it still costs one round trip;
 *   an explicit `begin` gets the `set local` appended.
 */
export function poolerSafeClient(statementTimeoutMs: number): typeof pg.Client {
  const setTimeoutSql = `set local statement_timeout = ${Math.trunc(statementTimeoutMs)}`;
  return class PoolerSafeClient extends pg.Client {
    // biome-ignore lint/suspicious/noExplicitAny: the overloads of pg's Client.query
    override query(config: any, values?: any, callback?: any): any {
      if (typeof config?.submit === 'function') return super.query(config, values, callback);
      if (typeof values === 'function') {
        callback = values;
        values = undefined;
      }
      const { name: _, ...unnamed }: pg.QueryConfig =
        typeof config === 'string' ? { text: config } : config;
      // 'T' or 'E' inside a transaction; null before the connection's first ready-for-query.
      const status: string | null = this.getTransactionStatus();
      let result: Promise<pg.QueryResult>;
      if (status === 'T' || status === 'E') {
        result = super.query(unnamed, values);
      } else if (startsTransaction.test(unnamed.text) && !values && !unnamed.values) {
        result = super.query({ ...unnamed, text: `${unnamed.text}; ${setTimeoutSql}` });
      } else {
        result = this.inOwnTransaction(unnamed, values);
      }
      if (!callback) return result;
      result.then(
        (value) => (callback as QueryCallback)(null, value),
        (error) => (callback as QueryCallback)(error),
      );
      return undefined;
    }

    private async inOwnTransaction(
      config: pg.QueryConfig,
      values: unknown[] | undefined,
    ): Promise<pg.QueryResult> {
      // Pipelined, the three are written at once; corked, in one packet.
      const { stream } = this.connection;
      stream.cork();
      const sent = (() => {
        try {
          return [
            super.query(`begin; ${setTimeoutSql}`),
            super.query(config, values),
            // A failed statement leaves the transaction aborted; `commit` then rolls it back.
            super.query('commit'),
          ] as const;
        } finally {
          stream.uncork();
        }
      })();
      const [begin, statement, commit] = await Promise.allSettled(sent);
      if (begin.status === 'rejected') throw begin.reason;
      if (statement.status === 'rejected') throw statement.reason;
      if (commit.status === 'rejected') throw commit.reason;
      return statement.value;
    }
  };
}

/** A pool's settings for the server at `url`, directly or through a pooler. */
export function serverPoolConfig(options: ServerOptions): pg.PoolConfig {
  return {
    connectionString: options.url,
    max: options.poolMax,
    connectionTimeoutMillis: options.connectTimeoutMs,
    ...(options.pooler
      ? { Client: poolerSafeClient(options.statementTimeoutMs), pipeline: true }
      : // The server cancels a slow statement; a startup parameter costs nothing per statement.
        { statement_timeout: options.statementTimeoutMs }),
    // The client-side timer covers a server (or a pooler) that went silent.
    query_timeout: options.statementTimeoutMs + 1000,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    application_name: 'plant-store',
  };
}
