import { type SQL, sql } from 'drizzle-orm';
import type { Database } from '../db/client.js';
import {
  classifyDatabaseError,
  isDatabaseUnavailable,
  isRowRejection,
  RowRejectedError,
  WriteQueueFullError,
} from '../db/errors.js';
import { plants } from '../db/schema.js';
import type { NewPlant, Plant } from './schemas.js';

export type CreatePlantResult =
  /** The plant was stored by this call. */
  | { outcome: 'created'; plant: Plant }
  /** A plant with this id and the same name and tag was already stored. */
  | { outcome: 'replayed'; plant: Plant }
  /** A plant with this id but another name or tag is stored; nothing changed. */
  | { outcome: 'conflict'; plant: Plant };

export interface PlantRepository {
  /** Stores the plant unless its id exists; resolves once the outcome is committed. */
  createPlant(plant: NewPlant): Promise<CreatePlantResult>;
  /** Resolves when every create accepted so far has its answer. */
  drain(): Promise<void>;
  /** Creates waiting for an INSERT, and INSERTs in flight. */
  stats(): { queued: number; inFlight: number };
}

export interface BatchingOptions {
  /** The most plants one INSERT carries. */
  maxBatchSize: number;
  /** INSERTs in flight at once, each on a connection of its own. */
  maxConcurrentBatches: number;
  /** Creates that may wait for a batch; beyond them a create fails with WriteQueueFullError. */
  maxQueued: number;
  /** Told the size of every batch sent. */
  onBatch?: (size: number) => void;
}

/** Decodes stored text exactly: a leading U+FEFF is part of the text, not a byte order mark. */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function toPlant(row: { name: string; tag?: string | null }): Plant {
  return row.tag == null ? { name: row.name } : { name: row.name, tag: row.tag };
}

function samePlant(stored: Plant, wanted: NewPlant): boolean {
  return stored.name === wanted.name && stored.tag === wanted.tag;
}

/** What the database holds for an id after a batch, or why it refused the row. */
type StoreOutcome = { created: boolean; stored: Plant } | { rejected: RowRejectedError };

/**
 * The plant store. Concurrent creates are coalesced: while INSERTs are in flight, new creates
 * queue, and each INSERT takes everything queued (up to maxBatchSize) as one multi-row
 * statement, so one round trip and one commit serve many requests. An idle service sends a
 * create at once: the queue is flushed on the next turn of the event loop, not after a delay.
 * When a batch finds the database unavailable, the creates queued behind it fail with it.
 */
export function createPlantRepository(db: Database, options: BatchingOptions): PlantRepository {
  type Pending = {
    plant: NewPlant;
    resolve: (result: CreatePlantResult) => void;
    reject: (error: unknown) => void;
  };
  let queue: Pending[] = [];
  let inFlight = 0;
  let flushScheduled = false;
  let drained: Array<() => void> = [];

  // Built and prepared once: each batch only sends three arrays.
  const input = sql`unnest(
    ${sql.placeholder('ids')}::int8[],
    ${sql.placeholder('names')}::text[],
    ${sql.placeholder('tags')}::text[]) as input(id, name, tag)`;
  const insertBatch = db
    .insert(plants)
    .select((qb) =>
      qb
        .select({
          id: sql<bigint>`input.id`.as('id'),
          name: sql<string>`input.name`.as('name'),
          tag: sql<string | null>`input.tag`.as('tag'),
          // Drizzle inserts every column from a select: created_at takes the column's default.
          createdAt: sql<Date>`${plants.createdAt.default as SQL}`.as('created_at'),
        })
        .from(input),
    )
    .onConflictDoNothing({ target: plants.id })
    .returning({ id: plants.id })
    .prepare('plants_insert_batch');
  // Name and tag come back as their UTF-8 bytes: the embedded engine's driver decodes text with
  // a TextDecoder that drops a leading U+FEFF, which would turn a replay of such a plant into a
  // 409 and let a name without the mark pass for a replay.
  const selectBatch = db
    .select({
      id: plants.id,
      name: sql<Uint8Array>`convert_to(${plants.name}, 'UTF8')`,
      tag: sql<Uint8Array | null>`convert_to(${plants.tag}, 'UTF8')`,
    })
    .from(plants)
    .where(sql`${plants.id} = any(${sql.placeholder('ids')}::int8[])`)
    .prepare('plants_select_batch');

  /** Inserts the rows whose ids are new; returns those ids. */
  async function insertNew(rows: NewPlant[]): Promise<Set<bigint>> {
    const inserted = await insertBatch.execute({
      ids: rows.map((row) => row.id),
      names: rows.map((row) => row.name),
      tags: rows.map((row) => row.tag ?? null),
    });
    return new Set(inserted.map((row) => row.id));
  }

  async function selectStored(ids: bigint[]): Promise<Map<bigint, Plant>> {
    const rows = await selectBatch.execute({ ids });
    return new Map(
      rows.map((row) => [
        row.id,
        toPlant({ name: utf8.decode(row.name), tag: row.tag && utf8.decode(row.tag) }),
      ]),
    );
  }

  /** Stores rows with distinct ids; a row the database refuses leaves the others unharmed. */
  async function store(rows: NewPlant[], attempt = 1): Promise<Map<bigint, StoreOutcome>> {
    let inserted: Set<bigint>;
    try {
      inserted = await insertNew(rows);
    } catch (error) {
      if (!isRowRejection(error)) throw error;
      const [only] = rows;
      if (rows.length === 1 && only) {
        return new Map([[only.id, { rejected: new RowRejectedError(error) }]]);
      }
      // Halve until the refused rows stand alone: the others are stored in a few statements.
      const half = Math.ceil(rows.length / 2);
      const first = await store(rows.slice(0, half), attempt);
      const second = await store(rows.slice(half), attempt);
      return new Map([...first, ...second]);
    }
    const outcomes = new Map<bigint, StoreOutcome>();
    const existing: bigint[] = [];
    for (const row of rows) {
      if (inserted.has(row.id)) outcomes.set(row.id, { created: true, stored: toPlant(row) });
      else existing.push(row.id);
    }
    if (existing.length > 0) {
      // A new statement, so it sees rows that concurrent inserts committed while this one waited.
      const stored = await selectStored(existing);
      const vanished: NewPlant[] = [];
      for (const row of rows) {
        const plant = stored.get(row.id);
        if (plant) outcomes.set(row.id, { created: false, stored: plant });
        else if (!outcomes.has(row.id)) vanished.push(row);
      }
      // Deleted between the two statements: store them afresh.
      if (vanished.length > 0) {
        // Only a concurrent delete makes a row vanish; one that keeps doing so is a fault.
        if (attempt >= 3) throw new Error(`plants vanished ${attempt} times while being stored`);
        for (const [id, outcome] of await store(vanished, attempt + 1)) outcomes.set(id, outcome);
      }
    }
    return outcomes;
  }

  async function runBatch(batch: Pending[]): Promise<void> {
    // The first create of an id in the batch is the one offered to the database.
    const offered = new Map<bigint, NewPlant>();
    for (const { plant } of batch) if (!offered.has(plant.id)) offered.set(plant.id, plant);
    let outcomes: Map<bigint, StoreOutcome>;
    try {
      outcomes = await store([...offered.values()]);
    } catch (error) {
      for (const pending of batch) pending.reject(error);
      if (isDatabaseUnavailable(error)) {
        // The creates still queued were never sent, so failing them is safe; sending them would
        // make each wait out another connect or statement timeout to learn the same thing, and
        // answer after twice the time the timeouts promise (e.g. while the network is silent).
        const waiting = queue;
        queue = [];
        for (const pending of waiting) pending.reject(error);
      }
      return;
    }
    for (const { plant, resolve, reject } of batch) {
      const outcome = outcomes.get(plant.id);
      if (!outcome) {
        reject(new Error(`no outcome for plant ${plant.id}`));
      } else if ('rejected' in outcome) {
        reject(outcome.rejected);
      } else if (outcome.created && offered.get(plant.id) === plant) {
        resolve({ outcome: 'created', plant: outcome.stored });
      } else {
        const matches = samePlant(outcome.stored, plant);
        resolve({ outcome: matches ? 'replayed' : 'conflict', plant: outcome.stored });
      }
    }
  }

  function flush(): void {
    flushScheduled = false;
    while (queue.length > 0 && inFlight < options.maxConcurrentBatches) {
      const batch =
        queue.length <= options.maxBatchSize ? queue : queue.slice(0, options.maxBatchSize);
      queue = batch === queue ? [] : queue.slice(batch.length);
      inFlight++;
      options.onBatch?.(batch.length);
      runBatch(batch).finally(() => {
        inFlight--;
        scheduleFlush();
        if (inFlight === 0 && queue.length === 0) {
          for (const resolve of drained) resolve();
          drained = [];
        }
      });
    }
  }

  function scheduleFlush(): void {
    if (flushScheduled || queue.length === 0 || inFlight >= options.maxConcurrentBatches) return;
    flushScheduled = true;
    // Creates that arrive in the same turn of the event loop leave in one batch.
    setImmediate(flush);
  }

  return {
    createPlant(plant) {
      if (queue.length >= options.maxQueued) return Promise.reject(new WriteQueueFullError());
      return new Promise<CreatePlantResult>((resolve, reject) => {
        queue.push({ plant, resolve, reject: (error) => reject(classifyDatabaseError(error)) });
        scheduleFlush();
      });
    },
    drain() {
      if (inFlight === 0 && queue.length === 0) return Promise.resolve();
      return new Promise<void>((resolve) => drained.push(resolve));
    },
    stats: () => ({ queued: queue.length, inFlight }),
  };
}
