import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import type { Database } from './database.js';
import { serverAddress } from './describe.js';
import { failureForLog, ServerReadOnlyError, sqlStateOf } from './errors.js';
import { type ServerOptions, serverPoolConfig } from './pool-config.js';
import {
  createReadRouting,
  type PrimaryReason,
  type Route,
  type ServerReport,
} from './read-routing.js';
import type { WalPosition } from './wal-position.js';

/**
 * A server's report on itself (see ServerReport), as columns of a select. Evaluated during the
 * statement, so after its snapshot: a standby's replay position then covers all the snapshot
 * shows, and so does a primary's insert position. `pg_is_in_recovery()` is read once, so the
 * columns agree even while the server is being promoted.
 */
export const SERVER_REPORT_COLUMNS = `server.standby,
  (case when server.standby then pg_last_wal_replay_lsn()
        else pg_current_wal_insert_lsn() end)::text as lsn,
  pg_postmaster_start_time()::text as started,
  case when server.standby then null
       else pg_walfile_name(pg_current_wal_insert_lsn()) end as wal_file`;

/** The report's one-row source: a statement joins its rows to it. */
export const SERVER_REPORT_FROM = '(select pg_is_in_recovery() as standby) as server';

/**
 * The report, and a standby's timeline: the WAL receiver's when the role may read it
 * (pg_read_all_stats), else that of the last restartpoint, which lags behind a timeline switch
 * until the next one (reads then go to the primary a little longer after a failover).
 */
const REPORT_SQL = `select ${SERVER_REPORT_COLUMNS},
  case when server.standby then coalesce((select received_tli from pg_stat_wal_receiver),
                                         (pg_control_checkpoint()).timeline_id) end as timeline
  from ${SERVER_REPORT_FROM}`;

type ReportRow = {
  standby: boolean;
  lsn: string | null;
  started: string;
  wal_file: string | null;
  timeline: number | null;
};

/** The report of SERVER_REPORT_COLUMNS, as the first columns of a row read as an array. */
export const reportOfColumns = (row: readonly unknown[]): ServerReport => ({
  standby: row[0] as boolean,
  lsn: row[1] as string | null,
  started: row[2] as string,
  walFile: row[3] as string | null,
});

/** How many columns SERVER_REPORT_COLUMNS are: a row's own columns follow them. */
export const SERVER_REPORT_COLUMN_COUNT = 4;

export interface Replica {
  /** host:port, as the log and the metrics name it. */
  name: string;
  db: Database;
  index: number;
}

export interface ReplicaSetOptions extends Omit<ServerOptions, 'url'> {
  urls: string[];
  onIdleError: (error: Error) => void;
  maxLagMs: number;
  /** How often each server is asked where it stands. */
  pollMs?: number;
  log: {
    info(fields: object, message: string): void;
    warn(fields: object, message: string): void;
  };
  now?: () => number;
}

/** A read's destination: a replica, or the primary and why. */
export type ReadRoute = Route<Replica>;

export interface ReplicaSet {
  replicas: readonly Replica[];
  /** Where a read that must see `token` goes, `prefer` first (see createReadRouting). */
  choose(token: WalPosition | undefined, prefer?: Replica): ReadRoute;
  /**
   * The report from a read's own statement on the route's replica: the position its answer
   * covers, or undefined when the answer must not be used (it came from another run of the
   * server than the one the route relied on, or from a server that is no longer a standby).
   */
  accept(
    route: Extract<ReadRoute, { replica: Replica }>,
    report: ServerReport,
  ): WalPosition | undefined;
  /** The read on the replica failed: it leaves the rotation until it answers again. */
  failed(replica: Replica, error: unknown): void;
  /** The primary's report from a statement: the position its answer covers. */
  primaryPosition(report: ServerReport): WalPosition;
  /** The primary's position now: every write committed before this call is covered. */
  writtenPosition(): Promise<WalPosition>;
  /** Each replica's lag in seconds (see lagSeconds); undefined when out of rotation. */
  lags(): Array<{ server: string; seconds: number | undefined }>;
  close(): Promise<void>;
}

const POLL_MS = 100;

// What a hot standby cancels a query with when it conflicts with the WAL it replays.
const RECOVERY_CONFLICT_SQL_STATES = new Set(['40001', '40P01']);

/**
 * The streaming replicas that serve reads, each with a pool of its own, and the primary's pool:
 * every `pollMs` each server reports where it stands, and every read's statement reports again.
 */
export function openReplicaSet(primary: pg.Pool, options: ReplicaSetOptions): ReplicaSet {
  const now = options.now ?? Date.now;
  // Half the statement timeout: after a replica's slow read, the primary still has time to answer.
  const replicaTimeoutMs = Math.max(50, Math.floor(options.statementTimeoutMs / 2));
  const pools = options.urls.map(
    (url) =>
      new pg.Pool({
        ...serverPoolConfig({ ...options, url, statementTimeoutMs: replicaTimeoutMs }),
        // A replica that does not answer soon is passed over: the primary can still answer
        // within the statement timeout.
        connectionTimeoutMillis: Math.min(options.connectTimeoutMs, 1000),
        query_timeout: replicaTimeoutMs + 250,
        application_name: 'plant-store-replica',
      }),
  );
  for (const pool of pools) pool.on('error', options.onIdleError);
  const replicas: Replica[] = options.urls.map((url, index) => ({
    name: serverAddress(url),
    db: drizzle({ client: pools[index] as pg.Pool }),
    index,
  }));
  const routing = createReadRouting(replicas.length, {
    maxLagMs: options.maxLagMs,
    now,
    onRotation: (index, inRotation, reason, first) => {
      const server = replicas[index]?.name;
      if (inRotation) {
        options.log.info(
          { server },
          `replica ${server} ${first ? 'joined' : 'rejoined'} the rotation: reads go to it`,
        );
      } else {
        options.log.warn(
          { server, reason },
          `replica ${server} ${first ? 'is not in' : 'left'} the rotation: ${reason}; no reads go to it`,
        );
      }
    },
  });

  async function report(pool: pg.Pool): Promise<ServerReport> {
    const { rows } = await pool.query<ReportRow>({ text: REPORT_SQL });
    const row = rows[0] as ReportRow;
    return {
      standby: row.standby,
      lsn: row.lsn,
      started: row.started,
      walFile: row.wal_file,
      timeline: row.timeline,
    };
  }

  // Each server on a loop of its own: one that does not answer holds up no other.
  let polling = true;
  const timers = new Set<NodeJS.Timeout>();
  function pollEvery(pollMs: number, poll: () => Promise<unknown>) {
    const again = () => {
      // Once closing, what the closed pools answer says nothing of the servers.
      if (!polling) return;
      // A report this process cannot read is a failed poll, never a crash.
      void poll()
        .catch(() => {})
        .finally(() => {
          if (!polling) return;
          const timer = setTimeout(() => {
            timers.delete(timer);
            again();
          }, pollMs).unref();
          timers.add(timer);
        });
    };
    again();
  }
  const pollMs = options.pollMs ?? POLL_MS;
  pollEvery(pollMs, () =>
    report(primary).then(
      (answer) => polling && routing.observePrimary(answer),
      () => {},
    ),
  );
  pools.forEach((pool, index) => {
    pollEvery(pollMs, () =>
      report(pool).then(
        (answer) => polling && routing.observeReplica(index, answer),
        (error) => polling && routing.replicaFailed(index, failureForLog(error).reason),
      ),
    );
  });

  const toReplica = (route: Route<number>): ReadRoute =>
    'replica' in route ? { ...route, replica: replicas[route.replica] as Replica } : route;

  return {
    replicas,
    choose: (token, prefer) => toReplica(routing.choose(token, prefer?.index)),
    accept: (route, answer) => routing.accept({ ...route, replica: route.replica.index }, answer),
    failed(replica, error) {
      // A query cancelled for a conflict with recovery says nothing against the replica.
      if (RECOVERY_CONFLICT_SQL_STATES.has(sqlStateOf(error) ?? '')) return;
      routing.replicaFailed(replica.index, failureForLog(error).reason);
    },
    primaryPosition(answer) {
      const position = routing.observePrimary(answer);
      if (position === undefined) throw new ServerReadOnlyError();
      return position;
    },
    async writtenPosition() {
      return this.primaryPosition(await report(primary));
    },
    lags: () =>
      replicas.map(({ name, index }) => ({ server: name, seconds: routing.lagSeconds(index) })),
    async close() {
      polling = false;
      for (const timer of timers) clearTimeout(timer);
      await Promise.all(pools.map((pool) => pool.end()));
    },
  };
}

export type { PrimaryReason, ServerReport };
