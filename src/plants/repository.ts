import { type BatchHandler, type BatchQueueOptions, createBatchQueue } from '../db/batch-queue.js';
import type { Database } from '../db/database.js';
import {
  classifyDatabaseError,
  isDatabaseUnavailable,
  isRowRejection,
  RowRejectedError,
} from '../db/errors.js';
import type { ReplicaSet } from '../db/replicas.js';
import { activeTraceparent, databaseSpanAttributes, statementSpan } from '../db/spans.js';
import type { WalPosition } from '../db/wal-position.js';
import { INT64_MAX, INT64_MIN } from '../kinds.js';
import {
  createPlantQueries,
  createReportingReads,
  emptyPage,
  type PlantPage,
  type PlantQueries,
  type QueryOptions,
} from './queries.js';
import {
  type Consistency,
  createRoutedReads,
  type ReadDestination,
  type RoutedRead,
} from './routed-reads.js';
import type { NewPlant, Plant, StoredPlant } from './schemas.js';

export type { Consistency } from './routed-reads.js';

export type CreatePlantResult =
  /** The plant was stored by this call. */
  | { outcome: 'created'; plant: Plant }
  /** A plant with this id and the same name and tag was already stored. */
  | { outcome: 'replayed'; plant: Plant }
  /** A plant with this id but another name or tag is stored; nothing changed. */
  | { outcome: 'conflict'; plant: Plant };

/** A page of plants in ascending id order. */
export interface PageRequest {
  limit: number;
  /** Only ids greater than this one. */
  after: bigint | undefined;
  /** Only plants with exactly this tag. */
  tag: string | undefined;
}

export type QueueStats = { queued: number; inFlight: number };

export type { PlantPage } from './queries.js';

/**
 * With replicas, each method takes what its request has seen (`consistency`): a read goes where
 * that is covered, and every answer leaves there the position it covers. Without, it is ignored.
 */
export interface PlantRepository {
  /** Stores the plant unless its id exists; resolves once the outcome is committed. */
  createPlant(plant: NewPlant, consistency?: Consistency): Promise<CreatePlantResult>;
  /** The stored plant, or undefined when there is none. */
  getPlant(id: bigint, consistency?: Consistency): Promise<StoredPlant | undefined>;
  listPlants(page: PageRequest, consistency?: Consistency): Promise<PlantPage>;
  /** Deletes the plant; false when there was none. */
  deletePlant(id: bigint, consistency?: Consistency): Promise<boolean>;
  /** Resolves when every create and read accepted so far has its answer. */
  drain(): Promise<void>;
  /** Requests waiting for a batch, and batches in flight, of creates and of reads by id. */
  stats(): { writes: QueueStats; reads: QueueStats; deletes: QueueStats };
}

export interface RepositoryOptions extends QueryOptions {
  /** Creates: each batch is one INSERT. */
  writes: BatchQueueOptions;
  /** Reads by id: each batch is one SELECT. */
  reads: BatchQueueOptions;
  /** Called once a statement that recorded events (of a create or a delete) has committed. */
  onRecorded?: () => void;
  /** The PostgreSQL server the statements go to, as their spans name it; absent when embedded. */
  databaseUrl?: string | undefined;
  /** The replicas that serve the reads, and the count of reads by where they went. */
  replicas?: { set: ReplicaSet; onRead: (destination: ReadDestination, count: number) => void };
}

/**
 * The plant store. Creates, reads by id and deletes are coalesced: the requests that arrive while the
 * database is busy leave together, one statement for many (see createBatchQueue). When a batch
 * finds the database unavailable, the requests queued behind it fail with it.
 */
export function createPlantRepository(db: Database, options: RepositoryOptions): PlantRepository {
  const queries = tracedQueries(createPlantQueries(db, options), options);
  const onRecorded = options.onRecorded ?? (() => {});
  const replicaSet = options.replicas?.set;
  // With replicas, a write's answer covers where the primary stood after its batch committed.
  const written = replicaSet && (() => replicaSet.writtenPosition());
  const writes = createBatchQueue(
    createPlantsInBatch(queries, onRecorded, written),
    options.writes,
  );
  const deletes = createBatchQueue(
    deletePlantsInBatch(queries, onRecorded, written),
    options.writes,
  );
  const pageRange = ({ limit, after, tag }: PageRequest) => ({
    fromId: after === undefined ? INT64_MIN : after + 1n,
    tag,
    limit,
  });
  const afterBatch = <T extends { position?: WalPosition }>(
    answer: Promise<T>,
    consistency: Consistency | undefined,
  ) =>
    consistency === undefined
      ? answer
      : answer.then((result) => {
          consistency.position = result.position;
          return result;
        });
  const writesAndDeletes = {
    createPlant: (plant: NewPlant, consistency?: Consistency) =>
      afterBatch(writes.add(plant), consistency),
    async deletePlant(id: bigint, consistency?: Consistency) {
      return (await afterBatch(deletes.add(id), consistency)).deleted;
    },
  };
  if (replicaSet === undefined || options.replicas === undefined) {
    const reads = createBatchQueue(readPlantsInBatch(queries), options.reads);
    return {
      ...writesAndDeletes,
      getPlant: (id) => reads.add(id),
      async listPlants(page) {
        if (page.after === INT64_MAX) return emptyPage;
        return queries.listPage(pageRange(page));
      },
      async drain() {
        await Promise.all([writes.drain(), reads.drain(), deletes.drain()]);
      },
      stats: () => ({ writes: writes.stats(), reads: reads.stats(), deletes: deletes.stats() }),
    };
  }
  const textAsBytes = options.textAsBytes;
  const routed = createRoutedReads(
    replicaSet,
    {
      primary: createReportingReads(db, textAsBytes),
      replicas: replicaSet.replicas.map((replica) => createReportingReads(replica.db, false)),
    },
    options.replicas.onRead,
  );
  // No failsQueued: the reads still queued may go to a replica that answers.
  const reads = createBatchQueue<RoutedRead, StoredPlant | undefined>(routed.byIds, options.reads);
  return {
    ...writesAndDeletes,
    getPlant: (id, consistency = { position: undefined }) => reads.add({ id, consistency }),
    async listPlants(page, consistency = { position: undefined }) {
      try {
        return await routed.listPage(pageRange(page), consistency);
      } catch (error) {
        throw classifyDatabaseError(error);
      }
    },
    async drain() {
      await Promise.all([writes.drain(), reads.drain(), deletes.drain()]);
    },
    stats: () => ({ writes: writes.stats(), reads: reads.stats(), deletes: deletes.stats() }),
  };
}

/**
 * Every statement in a span of its own. The events an insert records carry its span's context,
 * so that what is done with them later joins the trace of the request that made them.
 */
function tracedQueries(
  queries: PlantQueries,
  { recordEvents, databaseUrl }: Pick<RepositoryOptions, 'recordEvents' | 'databaseUrl'>,
): PlantQueries {
  const collection = 'plants';
  const database = databaseSpanAttributes(databaseUrl);
  const traceContext = () => (recordEvents ? activeTraceparent() : undefined);
  return {
    insertNew: (rows) =>
      statementSpan({ operation: 'INSERT', collection, batchSize: rows.length }, database, () =>
        queries.insertNew(rows, traceContext()),
      ),
    insertOrLock: (rows) =>
      statementSpan({ operation: 'INSERT', collection, batchSize: rows.length }, database, () =>
        queries.insertOrLock(rows, traceContext()),
      ),
    findByIds: (ids) =>
      statementSpan({ operation: 'SELECT', collection, batchSize: ids.length }, database, () =>
        queries.findByIds(ids),
      ),
    listPage: (range) =>
      statementSpan({ operation: 'SELECT', collection }, database, () => queries.listPage(range)),
    deleteByIds: (ids) =>
      statementSpan({ operation: 'DELETE', collection, batchSize: ids.length }, database, () =>
        queries.deleteByIds(ids, traceContext()),
      ),
  };
}

function readPlantsInBatch(queries: PlantQueries): BatchHandler<bigint, StoredPlant | undefined> {
  return {
    async run(batch) {
      let found: Map<bigint, StoredPlant>;
      try {
        found = await queries.findByIds([...new Set(batch.map(({ item }) => item))]);
      } catch (error) {
        throw classifyDatabaseError(error);
      }
      for (const { item, resolve } of batch) resolve(found.get(item));
    },
    failsQueued: isDatabaseUnavailable,
  };
}

/**
 * Deletes in one statement for the batch. Of two deletes of one id in a batch, the first finds
 * the plant and the second finds none, as if they had been sent one after the other.
 */
function deletePlantsInBatch(
  queries: PlantQueries,
  onRecorded: () => void,
  written: (() => Promise<WalPosition>) | undefined,
): BatchHandler<bigint, { deleted: boolean; position?: WalPosition }> {
  return {
    async run(batch) {
      // In id order, as creates lock theirs: batches that share ids cannot deadlock.
      const ids = [...new Set(batch.map(({ item }) => item))].sort((a, b) =>
        a < b ? -1 : a > b ? 1 : 0,
      );
      let deleted: Set<bigint>;
      let position: WalPosition | undefined;
      try {
        const result = await queries.deleteByIds(ids);
        if (result.recorded > 0) onRecorded();
        deleted = result.deleted;
        position = await written?.();
      } catch (error) {
        throw classifyDatabaseError(error);
      }
      for (const { item, resolve } of batch) resolve({ deleted: deleted.delete(item), position });
    },
    failsQueued: isDatabaseUnavailable,
  };
}

function plantOf(row: { name: string; tag?: string | undefined }): Plant {
  return row.tag === undefined ? { name: row.name } : { name: row.name, tag: row.tag };
}

function samePlant(stored: Plant, wanted: NewPlant): boolean {
  return stored.name === wanted.name && stored.tag === wanted.tag;
}

/** A create's answer, with the position it covers when replicas serve reads. */
const withPosition = (result: CreatePlantResult, position: WalPosition | undefined) =>
  position === undefined ? result : { ...result, position };

const byId = (a: NewPlant, b: NewPlant) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** What the database holds for an id after a batch, or why it refused the row. */
type StoreOutcome = { created: boolean; stored: Plant } | { rejected: RowRejectedError };

function createPlantsInBatch(
  queries: PlantQueries,
  onCreated: () => void,
  written: (() => Promise<WalPosition>) | undefined,
): BatchHandler<NewPlant, CreatePlantResult & { position?: WalPosition }> {
  /**
   * Stores rows with distinct ids, in id order; a row the database refuses leaves the others
   * unharmed. `lockExisting` reads the stored rows under a lock (see insertOrLock).
   */
  async function store(rows: NewPlant[], lockExisting = false): Promise<Map<bigint, StoreOutcome>> {
    try {
      return lockExisting ? await insertOrLock(rows) : await insertThenRead(rows);
    } catch (error) {
      if (!isRowRejection(error)) throw error;
      const [only] = rows;
      if (rows.length === 1 && only) {
        return new Map([[only.id, { rejected: new RowRejectedError(error) }]]);
      }
      // Halve until the refused rows stand alone: the others are stored in a few statements.
      const half = Math.ceil(rows.length / 2);
      const first = await store(rows.slice(0, half), lockExisting);
      const second = await store(rows.slice(half), lockExisting);
      return new Map([...first, ...second]);
    }
  }

  async function insertThenRead(rows: NewPlant[]): Promise<Map<bigint, StoreOutcome>> {
    const { ids: inserted, recorded } = await queries.insertNew(rows);
    if (recorded > 0) onCreated();
    const outcomes = new Map<bigint, StoreOutcome>();
    const existing: bigint[] = [];
    for (const row of rows) {
      if (inserted.has(row.id)) outcomes.set(row.id, { created: true, stored: plantOf(row) });
      else existing.push(row.id);
    }
    if (existing.length === 0) return outcomes;
    // A new statement, so it sees rows that concurrent inserts committed while this one waited.
    const stored = await queries.findByIds(existing);
    const vanished: NewPlant[] = [];
    for (const row of rows) {
      if (outcomes.has(row.id)) continue;
      const plant = stored.get(row.id);
      if (plant) outcomes.set(row.id, { created: false, stored: plantOf(plant) });
      else vanished.push(row);
    }
    // Deleted between the two statements: store them again, and this time hold on to what is
    // there, so that deletes and creates racing on an id cannot make this loop.
    if (vanished.length > 0) {
      for (const [id, outcome] of await store(vanished, true)) outcomes.set(id, outcome);
    }
    return outcomes;
  }

  async function insertOrLock(rows: NewPlant[]): Promise<Map<bigint, StoreOutcome>> {
    const { rows: stored, recorded } = await queries.insertOrLock(rows);
    if (recorded > 0) onCreated();
    return new Map(stored.map((row) => [row.id, { created: row.inserted, stored: plantOf(row) }]));
  }

  return {
    async run(batch) {
      // The first create of an id in the batch is the one offered to the database.
      const offered = new Map<bigint, NewPlant>();
      for (const { item } of batch) if (!offered.has(item.id)) offered.set(item.id, item);
      let outcomes: Map<bigint, StoreOutcome>;
      let position: WalPosition | undefined;
      try {
        // One lock order for every batch: two batches that share ids cannot deadlock.
        outcomes = await store([...offered.values()].sort(byId));
        // Read after the batch committed: it covers every row the answers below report.
        position = await written?.();
      } catch (error) {
        throw classifyDatabaseError(error);
      }
      for (const { item, resolve, reject } of batch) {
        const outcome = outcomes.get(item.id);
        if (!outcome) {
          reject(new Error(`no outcome for plant ${item.id}`));
        } else if ('rejected' in outcome) {
          reject(outcome.rejected);
        } else if (outcome.created && offered.get(item.id) === item) {
          resolve(withPosition({ outcome: 'created', plant: outcome.stored }, position));
        } else {
          const matches = samePlant(outcome.stored, item);
          const result = { outcome: matches ? 'replayed' : 'conflict', plant: outcome.stored };
          resolve(withPosition(result as CreatePlantResult, position));
        }
      }
    },
    // The creates still queued were never sent, so failing them is safe; sending them would
    // make each wait out another connect or statement timeout to learn the same thing, and
    // answer after twice the time the timeouts promise (e.g. while the network is silent).
    failsQueued: isDatabaseUnavailable,
  };
}
