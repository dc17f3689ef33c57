import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Clock, MigrationGaveUpError } from '../../src/db/lock-waits.js';
import {
  type MigrationLog,
  OUTSIDE_TRANSACTION_MARKER,
  shippedMigrationNames,
} from '../../src/db/migrate.js';
import { migratePostgres } from '../../src/db/postgres.js';
import { createScratchDatabase, type ScratchDatabase, serverUrlOf } from '../helpers/database.js';
import { type AddedMigration, migrationsWith, packageWith } from '../helpers/migrations.js';

// The runner on a database that is serving: a step that cannot get its lock gives way and is
// tried again, a marked migration runs outside a transaction, and each is applied once.

const addNote: AddedMigration = {
  tag: '0100_plants_note',
  sql: 'CREATE TABLE "plant_notes" ("id" bigint PRIMARY KEY);--> statement-breakpoint\nALTER TABLE "plants" ADD COLUMN "note" text;',
};

const nameIndex: AddedMigration = {
  tag: '0100_plants_name_index',
  sql: `${OUTSIDE_TRANSACTION_MARKER}\nCREATE INDEX CONCURRENTLY IF NOT EXISTS "plants_name_idx" ON "plants" USING btree ("name");`,
};

/** A session that has read plants and keeps its transaction open: ALTER TABLE must wait for it. */
async function holdPlants(url: string): Promise<{ pid: number; release(): Promise<void> }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
  await client.query('begin');
  await client.query("select count(*) from plants where name <> 'secret-literal'");
  return {
    pid: Number(rows[0]?.pid),
    async release() {
      await client.query('commit');
      await client.end();
    },
  };
}

/** A default for new sessions on `database`, as a DBA sets one for a database. */
async function setForDatabase(database: ScratchDatabase, setting: string): Promise<void> {
  const [row] = await database.query<{ name: string }>('select current_database() as name');
  await database.query(`alter database "${row?.name}" set ${setting}`);
}

function collect(): MigrationLog & { lines: { fields: object; message: string }[] } {
  const lines: { fields: object; message: string }[] = [];
  return { lines, warn: (fields, message) => lines.push({ fields, message }) };
}

async function until(condition: () => boolean, withinMs = 10_000): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`not within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A clock whose pauses pass at once: the give-up deadline arrives without waiting for it. */
function fastClock(): Clock {
  let now = 0;
  return {
    now: () => now,
    sleep: async (ms) => {
      now += ms;
    },
  };
}

describe('migrations on a live database', () => {
  let database: ScratchDatabase;
  let url: string;
  const cleanups: (() => void)[] = [];
  beforeEach(async () => {
    database = await createScratchDatabase();
    url = serverUrlOf(database);
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) cleanup();
    await database.drop();
  });
  const folderWith = (added: AddedMigration[]) => {
    const made = migrationsWith(added);
    cleanups.push(made.remove);
    return made.folder;
  };
  const columns = async () =>
    (
      await database.query<{ column_name: string }>(
        "select column_name from information_schema.columns where table_name = 'plants' order by ordinal_position",
      )
    ).map(({ column_name }) => column_name);

  it('gives way while a transaction holds plants, logs who holds it, and applies the migration once it ends', async () => {
    const folder = folderWith([addNote]);
    const blocker = await holdPlants(url);
    const log = collect();
    // Long enough that the blocker is read while the step waits, on a busy machine too.
    const migrating = migratePostgres(url, 5000, { folder, lockTimeoutMs: 400, log });
    await until(() => log.lines.length >= 2);
    // Meanwhile a write goes through: nothing waits in the lock queue for long.
    await database.query("insert into plants (id, name) values (1, 'written meanwhile')");
    expect(await columns()).not.toContain('note');
    await blocker.release();
    expect(await migrating).toStrictEqual(['0100_plants_note']);
    expect(await columns()).toContain('note');
    const [first] = log.lines;
    expect(first?.fields).toMatchObject({
      migration: '0100_plants_note',
      attempt: 1,
      blockers: [
        {
          pid: blocker.pid,
          state: 'idle in transaction',
          query: 'select count(*) from plants where name <>',
        },
      ],
    });
    expect(first?.message).toMatch(
      /^migration 0100_plants_note waited 400 ms for pid \d+ \(idle in transaction for \d+ s: select count\(\*\) from plants where name <>\) and gave way so that queries queued behind it go on; trying again in 250 ms$/,
    );
    expect(JSON.stringify(log.lines)).not.toContain('secret-literal');
  });

  it('gives up after the retry period with a message naming the blocker, and applies none of that migration', async () => {
    const folder = folderWith([addNote]);
    const blocker = await holdPlants(url);
    try {
      const failure = migratePostgres(url, 5000, {
        folder,
        lockTimeoutMs: 50,
        retryForMs: 3000,
        clock: fastClock(),
      });
      await expect(failure).rejects.toThrow(MigrationGaveUpError);
      await expect(failure).rejects.toThrow(
        new RegExp(
          `^migration 0100_plants_note gave up after 3 s and \\d+ attempts: each time it waited 50 ms \\(MIGRATION_LOCK_TIMEOUT_MS\\) for pid ${blocker.pid} \\(idle in transaction`,
        ),
      );
    } finally {
      await blocker.release();
    }
    const tables = await database.query("select to_regclass('plant_notes')::text as notes");
    expect(tables).toStrictEqual([{ notes: null }]);
    expect(await columns()).not.toContain('note');
    const recorded = await database.query(
      'select count(*)::int as count from drizzle.__drizzle_migrations',
    );
    expect(recorded).toStrictEqual([{ count: shippedMigrationNames().length }]);
  });

  it('exits 1 from the migrate command with that message when it gives up', async () => {
    const copy = packageWith([addNote]);
    cleanups.push(copy.remove);
    const blocker = await holdPlants(url);
    try {
      const migrate = copy.migrate({
        DATABASE_URL: url,
        MIGRATION_LOCK_TIMEOUT_MS: '50',
        MIGRATION_RETRY_FOR_S: '1',
      });
      expect(await migrate.exited).toBe(1);
      const last = JSON.parse(migrate.stdout.at(-1) ?? '{}');
      expect(last).toMatchObject({ level: 'fatal' });
      expect(last.msg).toMatch(
        new RegExp(`^migration 0100_plants_note gave up after 1 s .* for pid ${blocker.pid} `),
      );
      expect(migrate.stdout.some((line) => line.includes('"level":"warn"'))).toBe(true);
    } finally {
      await blocker.release();
    }
  });

  it('exits 1 from the start with that message when it gives up', async () => {
    const copy = packageWith([addNote]);
    cleanups.push(copy.remove);
    const blocker = await holdPlants(url);
    try {
      const start = copy.start({
        DATABASE_URL: url,
        API_TOKENS: 'token',
        PORT: '0',
        MIGRATION_LOCK_TIMEOUT_MS: '50',
        MIGRATION_RETRY_FOR_S: '1',
      });
      expect(await start.exited).toBe(1);
      const last = JSON.parse(start.stdout.at(-1) ?? '{}');
      expect(last).toMatchObject({ level: 'fatal' });
      expect(last.msg).toMatch(
        new RegExp(`^migration 0100_plants_note gave up after 1 s .* for pid ${blocker.pid} `),
      );
    } finally {
      await blocker.release();
    }
  });

  it('logs a failed migration by its SQLSTATE, never the rows the server quotes', async () => {
    const copy = packageWith([
      {
        tag: '0100_plants_name_number',
        sql: 'ALTER TABLE "plants" ADD CONSTRAINT "plants_name_number" CHECK ("name"::integer > 0);',
      },
    ]);
    cleanups.push(copy.remove);
    await database.query("insert into plants (id, name) values (1, 'row-secret')");
    const migrate = copy.migrate({ DATABASE_URL: url });
    expect(await migrate.exited).toBe(1);
    expect(migrate.stdout.join('\n')).not.toContain('row-secret');
    const last = JSON.parse(migrate.stdout.at(-1) ?? '{}');
    expect(last).toMatchObject({
      level: 'fatal',
      sqlState: '22P02',
      statement: '0100_plants_name_number',
      msg: 'migration failed',
    });
    const { hostname, port, pathname } = new URL(url);
    expect(last.database).toBe(`the PostgreSQL server at ${hostname}:${port || '5432'}${pathname}`);
  });

  it('runs a marked migration outside a transaction, once however many migrators start together', async () => {
    const folder = folderWith([nameIndex]);
    await database.query(
      "insert into plants (id, name) select g, 'Plant ' || g from generate_series(1, 20000) g",
    );
    const results = await Promise.allSettled(
      Array.from({ length: 6 }, () => migratePostgres(url, 5000, { folder })),
    );
    expect(results.map(({ status }) => status)).toStrictEqual(Array(6).fill('fulfilled'));
    const applied = results.flatMap((result) =>
      result.status === 'fulfilled' ? result.value : [],
    );
    expect(applied).toStrictEqual(['0100_plants_name_index']);
    const index = await database.query(
      "select indisvalid as valid from pg_index where indexrelid = 'plants_name_idx'::regclass",
    );
    expect(index).toStrictEqual([{ valid: true }]);
  });

  it('builds a marked index where transactions default to REPEATABLE READ', async () => {
    const folder = folderWith([nameIndex]);
    await setForDatabase(database, "default_transaction_isolation = 'repeatable read'");
    // A build that waits for the lock holder's snapshot fails here instead of hanging.
    await setForDatabase(database, "statement_timeout = '5s'");
    expect(await migratePostgres(url, 5000, { folder })).toStrictEqual(['0100_plants_name_index']);
  });

  it('keeps the advisory lock through a build longer than the database idle_in_transaction_session_timeout', async () => {
    const folder = folderWith([nameIndex]);
    await setForDatabase(database, "idle_in_transaction_session_timeout = '200ms'");
    // A write left open: the build waits for it, so the lock holder sits idle meanwhile.
    const writer = new pg.Client({ connectionString: url });
    await writer.connect();
    await writer.query('begin');
    await writer.query('set local idle_in_transaction_session_timeout = 0');
    await writer.query("insert into plants (id, name) values (1, 'open')");
    const migrating = migratePostgres(url, 5000, { folder });
    const building = async () =>
      (
        await database.query<{ n: number }>(
          "select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query ilike '%create index concurrently%'",
        )
      )[0]?.n === 1;
    while (!(await building())) await new Promise((resolve) => setTimeout(resolve, 20));
    await database.query('select pg_sleep(0.5)');
    await writer.query('commit');
    await writer.end();
    expect(await migrating).toStrictEqual(['0100_plants_name_index']);
  });

  it('drops an INVALID index that an interrupted concurrent build left, and builds it again', async () => {
    const folder = folderWith([nameIndex]);
    // A unique build over duplicate names fails halfway, as an interrupted build does.
    await database.query("insert into plants (id, name) values (1, 'twin'), (2, 'twin')");
    await expect(
      database.query('create unique index concurrently "plants_name_idx" on plants (name)'),
    ).rejects.toThrow(/could not create unique index/);
    const log = collect();
    expect(await migratePostgres(url, 5000, { folder, log })).toStrictEqual([
      '0100_plants_name_index',
    ]);
    const index = await database.query(
      "select indisvalid as valid, indisunique as unique from pg_index where indexrelid = 'plants_name_idx'::regclass",
    );
    expect(index).toStrictEqual([{ valid: true, unique: false }]);
    expect(log.lines.map(({ message }) => message)).toStrictEqual([
      'the index "plants_name_idx" is INVALID, left by an interrupted concurrent build: dropping it to build it again',
    ]);
  });
});
