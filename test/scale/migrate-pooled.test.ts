import pg from 'pg';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { OUTSIDE_TRANSACTION_MARKER, shippedMigrationNames } from '../../src/db/migrate.js';
import { migratePostgres } from '../../src/db/postgres.js';
import { createClusterDatabase, ensureClusterRunning, queryUrl } from '../helpers/cluster.js';
import { type AddedMigration, packageWith } from '../helpers/migrations.js';
import { throughPgBouncer } from '../helpers/pgbouncer.js';
import { lineContaining } from '../helpers/process.js';

// The runner's lock_timeout, its retries and a migration outside a transaction, through
// PgBouncer in transaction mode: every transaction may land on another server connection.

const cluster = inject('cluster');
const pgbouncer = inject('pgbouncer');

const nameIndex: AddedMigration = {
  tag: '0100_plants_name_index',
  sql: `${OUTSIDE_TRANSACTION_MARKER}\nCREATE INDEX CONCURRENTLY IF NOT EXISTS "plants_name_idx" ON "plants" USING btree ("name");`,
};
const addNote: AddedMigration = {
  tag: '0100_plants_note',
  sql: 'ALTER TABLE "plants" ADD COLUMN "note" text;',
};

async function migratedDatabase(): Promise<{ direct: string; pooled: string }> {
  await ensureClusterRunning(cluster);
  const direct = await createClusterDatabase(cluster);
  await migratePostgres(direct, 10_000);
  await queryUrl(
    direct,
    "insert into plants (id, name) select g, 'Plant ' || g from generate_series(1, 20000) g",
  );
  return { direct, pooled: throughPgBouncer(direct, pgbouncer) };
}

const removals: (() => void)[] = [];
afterEach(() => {
  for (const remove of removals.splice(0)) remove();
});

function packageCopy(added: AddedMigration[]) {
  const copy = packageWith(added);
  removals.push(copy.remove);
  return copy;
}

describe('migrations on a live database, through PgBouncer in transaction mode', () => {
  it('three migrate processes started together build an index concurrently once', async () => {
    const { direct, pooled } = await migratedDatabase();
    const copy = packageCopy([nameIndex]);
    const migrators = [1, 2, 3].map(() =>
      copy.migrate({ DATABASE_URL: pooled, DB_POOLER: 'true' }),
    );
    const codes = await Promise.all(migrators.map(({ exited }) => exited));
    expect(codes, migrators.flatMap(({ stdout }) => stdout).join('\n')).toStrictEqual([0, 0, 0]);
    const history = await queryUrl(
      direct,
      'select count(*)::int as count from drizzle.__drizzle_migrations',
    );
    expect(history).toStrictEqual([{ count: shippedMigrationNames().length + 1 }]);
    const index = await queryUrl(
      direct,
      "select indisvalid as valid from pg_index where indexrelid = 'plants_name_idx'::regclass",
    );
    expect(index).toStrictEqual([{ valid: true }]);
    const applied = migrators.filter(({ stdout }) =>
      stdout.some((line) => line.includes('applied the migration 0100_plants_name_index')),
    );
    expect(applied).toHaveLength(1);
  });

  it('gives way behind a session that holds plants, names it, and applies the migration after', async () => {
    const { direct, pooled } = await migratedDatabase();
    const blocker = new pg.Client({ connectionString: direct });
    await blocker.connect();
    try {
      const { rows } = await blocker.query<{ pid: number }>('select pg_backend_pid() as pid');
      await blocker.query('begin');
      await blocker.query('select count(*) from plants');
      const migrate = packageCopy([addNote]).migrate({
        DATABASE_URL: pooled,
        DB_POOLER: 'true',
        MIGRATION_LOCK_TIMEOUT_MS: '200',
      });
      const wait = JSON.parse(await lineContaining(migrate, 'gave way', 10_000));
      expect(wait.blockers).toStrictEqual([
        expect.objectContaining({ pid: rows[0]?.pid, query: 'select count(*) from plants' }),
      ]);
      // Between attempts a write through the pooler goes through.
      const started = performance.now();
      await queryUrl(pooled, "insert into plants (id, name) values (0, 'written meanwhile')");
      expect(performance.now() - started).toBeLessThan(1500);
      await blocker.query('commit');
      expect(await migrate.exited, migrate.stdout.join('\n')).toBe(0);
    } finally {
      await blocker.end();
    }
    const columns = await queryUrl(
      direct,
      "select column_name from information_schema.columns where table_name = 'plants' and column_name = 'note'",
    );
    expect(columns).toStrictEqual([{ column_name: 'note' }]);
  });
});
