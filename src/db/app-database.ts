import type { Database } from './database.js';
import type { MigrationOptions } from './migrate.js';
import type { ReplicaSet, ReplicaSetOptions } from './replicas.js';
import type { DatabaseSettings } from './settings.js';

/** A PostgreSQL the service can use: a server, or the embedded engine. */
export interface AppDatabase {
  db: Database;
  engine: 'postgres' | 'pglite';
  /** Which database this is and where its data lives, for the log. Never holds a password. */
  description: string;
  /**
   * Applies pending migrations and resolves with their names; processes that race serialise,
   * and each migration is applied once.
   */
  migrate(options?: MigrationOptions): Promise<string[]>;
  /** The connection pool's state; the embedded engine has no pool. */
  poolStats?: () => { total: number; idle: number; waiting: number };
  /** The streaming replicas that serve reads, when DATABASE_REPLICA_URLS names some. */
  replicas?: ReplicaSet;
  close(): Promise<void>;
}

export type DatabaseOptions = Omit<
  DatabaseSettings,
  'migrateOnStart' | 'migration' | 'replicaUrls' | 'replicaMaxLagMs'
> & {
  /** Called when an idle server connection breaks (e.g. a database restart). */
  onIdleError: (error: Error) => void;
  /** Replicas to read from, and where to say when one leaves or rejoins the rotation. */
  replicas?: Pick<ReplicaSetOptions, 'urls' | 'maxLagMs' | 'log'>;
};
