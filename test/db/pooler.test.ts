import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AppDatabase } from '../../src/db/app-database.js';
import { DatabaseUnavailableError, RowRejectedError } from '../../src/db/errors.js';
import { openPostgres } from '../../src/db/postgres.js';
import { createPlantRepository } from '../../src/plants/repository.js';
import { createDeclarations } from '../../src/webhooks/delivery/declare.js';
import { createOutbox } from '../../src/webhooks/delivery/outbox.js';
import { sealSecret } from '../../src/webhooks/security/secrets.js';
import {
  createScratchDatabase,
  holdPlantsTable,
  type ScratchDatabase,
  serverUrlOf,
} from '../helpers/database.js';
import { WEBHOOK_SECRET } from '../helpers/receiver.js';

// DB_POOLER=true, run here straight on the server: what it sends must need no session state.
// test:scale runs the same path through a real PgBouncer in transaction mode.

let database: ScratchDatabase;
beforeAll(async () => {
  database = await createScratchDatabase();
});
afterAll(() => database.drop());

/** The database opened as the service opens it, with one connection so state would show. */
function open(pooler: boolean, statementTimeoutMs = 5000) {
  return openPostgres({
    url: serverUrlOf(database),
    pooler,
    poolMax: 1,
    connectTimeoutMs: 2000,
    statementTimeoutMs,
    onIdleError: () => {},
  });
}

type Opened = ReturnType<typeof open>;

async function withDatabase<T>(opened: Opened, use: (db: Opened) => Promise<T>) {
  try {
    return await use(opened);
  } finally {
    await opened.close();
  }
}

const queue = { maxBatchSize: 100, maxConcurrentBatches: 1, maxQueued: 100 };
const batching = { textAsBytes: false, writes: queue, reads: queue };

async function createSome(db: AppDatabase, firstId: bigint) {
  const repository = createPlantRepository(db.db, batching);
  return Promise.allSettled(
    [0n, 1n, 2n].map((n) => repository.createPlant({ id: firstId + n, name: 'Pooled' })),
  );
}

// Through the pool, as every statement of the service goes.
const preparedStatements = (db: Opened) =>
  db.pool.query<{ count: string }>('select count(*)::text as count from pg_prepared_statements');

describe('with DB_POOLER=true', () => {
  it('leaves no prepared statement on the connection', async () => {
    const rows = await withDatabase(open(true), async (db) => {
      await createSome(db, 100n);
      await createSome(db, 100n);
      return (await preparedStatements(db)).rows;
    });
    expect(rows).toStrictEqual([{ count: '0' }]);
  });

  it('records events and fans them out leaving no prepared statement on the connection', async () => {
    const [fanOut, rows] = await withDatabase(open(true), async (db) => {
      const outbox = createOutbox(db.db, { leaseMs: 60_000 });
      await createDeclarations(db.db).declare(
        ['http://a/', 'http://b/'],
        (endpoint) => sealSecret(WEBHOOK_SECRET, [], { endpoint, field: 'secret' }),
        60_000,
      );
      const repository = createPlantRepository(db.db, { ...batching, recordEvents: true });
      await repository.createPlant({ id: 150n, name: 'Announced' });
      return [await outbox.fanOut(10, 0n), (await preparedStatements(db)).rows] as const;
    });
    expect(fanOut.events).toBe(1);
    expect(fanOut.deliveries.map((delivery) => delivery.endpoint.url).sort()).toStrictEqual([
      'http://a/',
      'http://b/',
    ]);
    expect(rows).toStrictEqual([{ count: '0' }]);
  });

  it('sets no statement timeout on the session, only within each transaction', async () => {
    const [row] = await withDatabase(open(true, 1234), async (db) => {
      const result = await db.pool.query<{ current: string; session: string }>(
        `select current_setting('statement_timeout') as current, reset_val as session
           from pg_settings where name = 'statement_timeout'`,
      );
      return result.rows;
    });
    // reset_val is what the session returns to after the transaction: the server's default.
    expect(row).toStrictEqual({ current: '1234ms', session: '0' });
  });

  it('bounds a statement outside a transaction by DB_STATEMENT_TIMEOUT_MS', async () => {
    const error = await withDatabase(open(true, 300), (db) =>
      db.db.execute(sql`select pg_sleep(3)`).catch((caught: unknown) => caught),
    );
    expect(error).toMatchObject({ cause: { code: '57014' } });
  });

  it('bounds the statements of an explicit transaction by DB_STATEMENT_TIMEOUT_MS', async () => {
    const error = await withDatabase(open(true, 300), (db) =>
      db.db
        .transaction((tx) => tx.execute(sql`select pg_sleep(3)`))
        .catch((caught: unknown) => caught),
    );
    expect(error).toMatchObject({ cause: { code: '57014' } });
  });

  it('answers creates, replays, conflicts and refused rows as the direct path does', async () => {
    const results = await withDatabase(open(true), async (db) => {
      const repository = createPlantRepository(db.db, batching);
      await repository.createPlant({ id: 200n, name: 'Stored' });
      return Promise.allSettled([
        repository.createPlant({ id: 201n, name: 'New' }),
        repository.createPlant({ id: 200n, name: 'Stored' }),
        repository.createPlant({ id: 200n, name: 'Other' }),
        repository.createPlant({ id: 202n, name: 'x'.repeat(257) }),
        repository.createPlant({ id: 203n, name: 'Beside a refused row' }),
      ]);
    });
    expect(results.map((r) => (r.status === 'fulfilled' ? r.value.outcome : r.reason))).toEqual([
      'created',
      'replayed',
      'conflict',
      expect.any(RowRejectedError),
      'created',
    ]);
    const stored = await database.query(
      'select id::text, name from plants where id >= 200 order by id',
    );
    expect(stored).toStrictEqual([
      { id: '200', name: 'Stored' },
      { id: '201', name: 'New' },
      { id: '203', name: 'Beside a refused row' },
    ]);
  });

  it('answers DatabaseUnavailableError when the statement times out during a create', async () => {
    const release = await holdPlantsTable(database);
    try {
      const [result] = await withDatabase(open(true, 300), (db) => createSome(db, 300n));
      expect(result).toMatchObject({
        status: 'rejected',
        reason: expect.any(DatabaseUnavailableError),
      });
    } finally {
      await release();
    }
  });
});

describe('without DB_POOLER (straight on the server)', () => {
  it('keeps its statements prepared on the connection', async () => {
    const rows = await withDatabase(open(false), async (db) => {
      await createSome(db, 400n);
      return (await preparedStatements(db)).rows;
    });
    expect(Number(rows[0]?.count)).toBeGreaterThan(0);
  });

  it('sets the statement timeout once, for the whole session', async () => {
    const [row] = await withDatabase(open(false, 1234), async (db) => {
      const result = await db.pool.query<{ session: string }>(
        `select reset_val as session from pg_settings where name = 'statement_timeout'`,
      );
      return result.rows;
    });
    expect(row).toStrictEqual({ session: '1234' });
  });
});
