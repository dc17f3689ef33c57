import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AppDatabase } from '../../src/db/app-database.js';
import type { BatchQueueOptions } from '../../src/db/batch-queue.js';
import type { Database } from '../../src/db/database.js';
import { DatabaseUnavailableError, QueueFullError, RowRejectedError } from '../../src/db/errors.js';
import { type CreatePlantResult, createPlantRepository } from '../../src/plants/repository.js';
import type { NewPlant } from '../../src/plants/schemas.js';
import { batching, postPlant, startTestApp, storedPlant, type TestApp } from '../helpers/app.js';
import {
  createScratchDatabase,
  holdPlantsTable,
  type ScratchDatabase,
  testEngine,
} from '../helpers/database.js';

let database: ScratchDatabase;
let appDatabase: AppDatabase;
beforeAll(async () => {
  database = await createScratchDatabase();
  appDatabase = database.open();
});
afterAll(async () => {
  await appDatabase.close();
  await database.drop();
});

const oneBatch: BatchQueueOptions = {
  maxBatchSize: 1000,
  maxConcurrentBatches: 1,
  maxQueued: 1000,
};

/** A repository whose creates are batched as `writes` says. */
function repositoryWith(db: Database, writes: BatchQueueOptions) {
  return createPlantRepository(db, { ...batching, writes });
}

/** Sends every create in the same turn of the event loop and collects each answer. */
function createAll(options: BatchQueueOptions, plants: NewPlant[]) {
  const repository = repositoryWith(appDatabase.db, options);
  return Promise.allSettled(plants.map((plant) => repository.createPlant(plant)));
}

const answer = (result: PromiseSettledResult<CreatePlantResult>) =>
  result.status === 'fulfilled' ? result.value : result.reason;

describe('a batch of creates', () => {
  it('answers new, replayed and conflicting creates each on their own, in one statement', async () => {
    await createAll(oneBatch, [
      { id: 10n, name: 'Stored', tag: 't' },
      { id: 11n, name: 'Untagged' },
    ]);
    const results = await createAll(oneBatch, [
      { id: 12n, name: 'New' },
      { id: 10n, name: 'Stored', tag: 't' },
      { id: 11n, name: 'Untagged', tag: 'now tagged' },
      { id: 13n, name: 'Twice' },
      { id: 13n, name: 'Twice' },
      { id: 14n, name: 'First wins', tag: 'a' },
      { id: 14n, name: 'Second loses', tag: 'b' },
      { id: 10n, name: 'Other' },
    ]);
    expect(results.map(answer)).toStrictEqual([
      { outcome: 'created', plant: { name: 'New' } },
      { outcome: 'replayed', plant: { name: 'Stored', tag: 't' } },
      { outcome: 'conflict', plant: { name: 'Untagged' } },
      { outcome: 'created', plant: { name: 'Twice' } },
      { outcome: 'replayed', plant: { name: 'Twice' } },
      { outcome: 'created', plant: { name: 'First wins', tag: 'a' } },
      { outcome: 'conflict', plant: { name: 'First wins', tag: 'a' } },
      { outcome: 'conflict', plant: { name: 'Stored', tag: 't' } },
    ]);
    expect(
      await database.query(
        'select id::text, name, tag from plants where id between 10 and 14 order by id',
      ),
    ).toStrictEqual([
      { id: '10', name: 'Stored', tag: 't' },
      { id: '11', name: 'Untagged', tag: null },
      { id: '12', name: 'New', tag: null },
      { id: '13', name: 'Twice', tag: null },
      { id: '14', name: 'First wins', tag: 'a' },
    ]);
  });

  it('stores every other row of a batch when the database refuses some', async () => {
    await database.query("alter table plants add constraint no_refused check (name <> 'refused')");
    try {
      const plants = Array.from({ length: 20 }, (_, i) => ({
        id: BigInt(100 + i),
        name: i % 7 === 3 ? 'refused' : `kept ${i}`,
      }));
      const results = await createAll(oneBatch, plants);
      results.forEach((result, i) => {
        if (plants[i]?.name === 'refused') {
          expect(answer(result)).toBeInstanceOf(RowRejectedError);
        } else {
          expect(answer(result)).toStrictEqual({
            outcome: 'created',
            plant: { name: `kept ${i}` },
          });
        }
      });
      const stored = await database.query<{ name: string }>(
        'select name from plants where id between 100 and 119 order by id',
      );
      expect(stored.map((row) => row.name)).toStrictEqual(
        plants.filter((plant) => plant.name !== 'refused').map((plant) => plant.name),
      );
    } finally {
      await database.query('alter table plants drop constraint no_refused');
    }
  });

  it('stores exactly one version when creates of one id race in separate statements', async () => {
    const versions = [{ name: 'A' }, { name: 'A', tag: 'x' }, { name: 'B' }];
    const plants = Array.from(
      { length: 48 },
      (_, i) => ({ id: 200n, ...versions[i % 3] }) as NewPlant,
    );
    const results = await createAll(
      { maxBatchSize: 1, maxConcurrentBatches: 8, maxQueued: 100 },
      plants,
    );
    const [stored] = await database.query<{ name: string; tag: string | null }>(
      'select name, tag from plants where id = 200',
    );
    const winner = { name: stored?.name, ...(stored?.tag != null && { tag: stored.tag }) };
    const outcomes = results.map(answer) as CreatePlantResult[];
    expect(outcomes.filter((result) => result.outcome === 'created')).toHaveLength(1);
    outcomes.forEach((result, i) => {
      const sent = plants[i] as NewPlant;
      const matches = sent.name === winner.name && sent.tag === winner.tag;
      expect(result.outcome === 'conflict').toBe(!matches);
      expect(result.plant).toStrictEqual(winner);
    });
  });
  // The embedded engine runs one statement at a time: two INSERTs never wait on each other.
  it.runIf(testEngine() === 'postgres')(
    'stores batches that share ids in opposite orders without a deadlock',
    async () => {
      const large = { maxBatchSize: 3000, maxConcurrentBatches: 1, maxQueued: 3000 };
      const forwards = repositoryWith(appDatabase.db, large);
      const backwards = repositoryWith(appDatabase.db, large);
      for (let round = 0; round < 3; round++) {
        const plants = Array.from({ length: 3000 }, (_, i) => ({
          id: BigInt(10000 + round * 3000 + i),
          name: 'shared',
        }));
        const results = await Promise.allSettled([
          ...plants.map((plant) => forwards.createPlant(plant)),
          ...plants.toReversed().map((plant) => backwards.createPlant(plant)),
        ]);
        expect(results.filter((result) => result.status === 'rejected')).toStrictEqual([]);
      }
    },
  );
});

describe('the queue', () => {
  it('refuses creates beyond its limit while the database is busy, and answers the rest', async () => {
    const repository = repositoryWith(appDatabase.db, {
      maxBatchSize: 10,
      maxConcurrentBatches: 1,
      maxQueued: 5,
    });
    const release = await holdPlantsTable(database);
    const inFlight = repository.createPlant({ id: 300n, name: 'in flight' });
    const queued: Promise<CreatePlantResult>[] = [];
    try {
      await new Promise((resolve) => setTimeout(resolve, 50));
      for (let i = 0; i < 5; i++)
        queued.push(repository.createPlant({ id: BigInt(301 + i), name: 'queued' }));
      await expect(
        repository.createPlant({ id: 310n, name: 'one too many' }),
      ).rejects.toBeInstanceOf(QueueFullError);
    } finally {
      await release();
    }
    const answers = await Promise.all([inFlight, ...queued]);
    expect(answers.map((result) => result.outcome)).toStrictEqual(Array(6).fill('created'));
    expect(await storedPlant(database, 310)).toBeUndefined();
  });

  // The embedded engine runs one statement at a time in this process: nothing there times out
  // while another connection holds a lock.
  it.runIf(testEngine() === 'postgres')(
    'answers the creates queued behind a batch that found the database unavailable, without sending them',
    async () => {
      // Statements time out after 300 ms: the database counts as unavailable.
      const impatient = database.open({ statementTimeoutMs: 300 });
      const repository = repositoryWith(impatient.db, {
        maxBatchSize: 10,
        maxConcurrentBatches: 1,
        maxQueued: 10,
      });
      let release: (() => Promise<void>) | undefined = await holdPlantsTable(database);
      try {
        // Settled at once: both fail together, before the test looks at the second one.
        const settle = (plant: NewPlant) =>
          repository.createPlant(plant).catch((error: unknown) => error);
        const inFlight = settle({ id: 350n, name: 'in flight' });
        await new Promise((resolve) => setTimeout(resolve, 50));
        const queued = settle({ id: 351n, name: 'queued' });
        expect(await inFlight).toBeInstanceOf(DatabaseUnavailableError);
        // The database would take the queued create now; it must have had its answer already.
        await release();
        release = undefined;
        expect(await queued).toBeInstanceOf(DatabaseUnavailableError);
        await repository.drain();
      } finally {
        await release?.();
        await impatient.close();
      }
      expect(await storedPlant(database, 350)).toBeUndefined();
      expect(await storedPlant(database, 351)).toBeUndefined();
    },
  );

  it('drains: every create accepted before drain() has its answer when drain() resolves', async () => {
    const repository = repositoryWith(appDatabase.db, {
      maxBatchSize: 4,
      maxConcurrentBatches: 2,
      maxQueued: 100,
    });
    const release = await holdPlantsTable(database);
    const answered: bigint[] = [];
    const creates = Array.from({ length: 20 }, (_, i) =>
      repository.createPlant({ id: BigInt(400 + i), name: 'drained' }).then(() => {
        answered.push(BigInt(400 + i));
      }),
    );
    let drained = false;
    const drain = repository.drain().then(() => {
      drained = true;
    });
    try {
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(drained).toBe(false);
    } finally {
      await release();
    }
    await drain;
    expect(answered).toHaveLength(20);
    await Promise.all(creates);
    const [row] = await database.query<{ count: number }>(
      'select count(*)::int as count from plants where id between 400 and 419',
    );
    expect(row?.count).toBe(20);
  });
});

describe('over HTTP', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      repository: (d) =>
        repositoryWith(d.db, { maxBatchSize: 100, maxConcurrentBatches: 1, maxQueued: 2 }),
    });
  });
  afterAll(() => t.close());

  it('answers 503 with Retry-After when the queue is full', async () => {
    const release = await holdPlantsTable(t.database);
    const first = postPlant(t.app, { id: 1, name: 'in flight' });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const queued = [
      postPlant(t.app, { id: 2, name: 'queued' }),
      postPlant(t.app, { id: 3, name: 'queued' }),
    ];
    await new Promise((resolve) => setTimeout(resolve, 50));
    const refused = await postPlant(t.app, { id: 4, name: 'refused' });
    expect(refused.statusCode).toBe(503);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.json()).toStrictEqual({
      error: 503,
      message: 'the service is busy; retry later',
    });
    await release();
    expect((await Promise.all([first, ...queued])).map((r) => r.statusCode)).toStrictEqual([
      200, 200, 200,
    ]);
    expect(await storedPlant(t.database, 4)).toBeUndefined();
  });

  it('answers 400 to a plant the database refuses and 200 to the others of its batch', async () => {
    await t.database.query(
      "alter table plants add constraint no_refused check (name <> 'refused')",
    );
    const responses = await Promise.all([
      postPlant(t.app, { id: 20, name: 'fine' }),
      postPlant(t.app, { id: 21, name: 'refused' }),
    ]);
    expect(responses.map((r) => r.statusCode)).toStrictEqual([200, 400]);
    expect(responses[1]?.json()).toStrictEqual({
      error: 400,
      message: 'the database refused this plant',
    });
    expect(await storedPlant(t.database, 20)).toMatchObject({ name: 'fine' });
    expect(await storedPlant(t.database, 21)).toBeUndefined();
  });
});
