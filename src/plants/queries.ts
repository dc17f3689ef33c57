import { type SQL, sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { prepareArrayStatement, prepareStatement } from '../db/prepared.js';
import {
  reportOfColumns,
  SERVER_REPORT_COLUMN_COUNT,
  SERVER_REPORT_COLUMNS,
  SERVER_REPORT_FROM,
  type ServerReport,
} from '../db/replicas.js';
import { rfc3339 } from '../db/rfc3339.js';
import type { NewPlant, StoredPlant } from './schemas.js';
import { plantJson, storedPlantJson } from './serialize.js';
import { plants } from './table.js';

/** A page of plants in ascending id order: ids from `fromId` on, with exactly `tag` if given. */
export interface PageRange {
  fromId: bigint;
  tag: string | undefined;
  limit: number;
}

/** A page of plants as the JSON array the API answers, and what the next page's link needs. */
export interface PlantPage {
  /** The plants in ascending id order, as a JSON array of the JSON of GET /plants/{id}. */
  json: string;
  count: number;
  /** The id of the last plant; undefined when the page is empty. */
  lastId: bigint | undefined;
}

export const emptyPage: PlantPage = { json: '[]', count: 0, lastId: undefined };

/** The statements of the plant store, one query each. */
export interface PlantQueries {
  /**
   * Inserts the rows whose ids are new; returns those ids, and how many created events were
   * recorded with them. `traceContext` (a W3C traceparent) goes with those events.
   */
  insertNew(
    rows: NewPlant[],
    traceContext?: string,
  ): Promise<{ ids: Set<bigint>; recorded: number }>;
  /**
   * Inserts the rows whose ids are new and locks the stored row of every other id until the
   * statement commits, so none can vanish before it is read; returns every row as stored.
   */
  insertOrLock(
    rows: NewPlant[],
    traceContext?: string,
  ): Promise<{ rows: Array<StoredPlant & { inserted: boolean }>; recorded: number }>;
  /** The stored plants among `ids`. */
  findByIds(ids: bigint[]): Promise<Map<bigint, StoredPlant>>;
  listPage(range: PageRange): Promise<PlantPage>;
  /**
   * Deletes the plants among `ids` (distinct): those there were, and how many deleted events
   * were recorded with them. `traceContext` (a W3C traceparent) goes with those events.
   */
  deleteByIds(
    ids: bigint[],
    traceContext?: string,
  ): Promise<{ deleted: Set<bigint>; recorded: number }>;
}

/**
 * The reads, each also reporting the server it ran on, from within its statement (see
 * SERVER_REPORT_COLUMNS): the position the answer covers, for a Consistency-Token.
 */
export interface ReportingReads {
  findByIds(ids: bigint[]): Promise<{ found: Map<bigint, StoredPlant>; report: ServerReport }>;
  listPage(range: PageRange): Promise<{ page: PlantPage; report: ServerReport }>;
}

export interface QueryOptions {
  /**
   * Read name and tag as their UTF-8 bytes. The embedded engine's driver decodes text with a
   * TextDecoder that drops a leading U+FEFF, which would change a plant as it is read;
   * node-postgres keeps it, and reading text is cheaper than decoding bytes here.
   */
  textAsBytes: boolean;
  /**
   * Record a created event for each plant a statement really inserts, and a deleted event for
   * each plant it deletes, in that statement, through the SQL function record_events (which
   * records them only while some subscriber receives their type). Without it, the statements
   * write plants only.
   */
  recordEvents?: boolean | undefined;
}

/** Decodes stored text exactly: a leading U+FEFF is part of the text, not a byte order mark. */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

const decode = (text: string | Uint8Array) => (typeof text === 'string' ? text : utf8.decode(text));

type StoredRow = { id: bigint; name: string | Uint8Array; tag: string | Uint8Array | null };

function toStoredPlant({ id, name, tag }: StoredRow): StoredPlant {
  return tag === null ? { id, name: decode(name) } : { id, name: decode(name), tag: decode(tag) };
}

/** A row of the reads: the id as its decimal text, which both engines' drivers read alike. */
type ReadRow = { id: string; name: string | Uint8Array; tag: string | Uint8Array | null };

const readPlant = ({ id, name, tag }: ReadRow): StoredPlant =>
  toStoredPlant({ id: BigInt(id), name, tag });

/** A row of a page: its id as decimal text, its name and tag, in the select's order. */
type PageRow = [id: string, name: string | Uint8Array, tag: string | Uint8Array | null];

/**
 * The page's JSON, written straight from the rows: no plant object, and no bigint made of each
 * id and written out again (the text PostgreSQL gives is the id's canonical decimal).
 */
function pageOf(rows: PageRow[]): PlantPage {
  if (rows.length === 0) return emptyPage;
  let json = '[';
  for (let i = 0; i < rows.length; i++) {
    const [id, name, tag] = rows[i] as PageRow;
    if (i > 0) json += ',';
    json += plantJson(id, decode(name), tag === null ? undefined : decode(tag));
  }
  return { json: `${json}]`, count: rows.length, lastId: BigInt((rows.at(-1) as PageRow)[0]) };
}

/** A text column as the driver should read it (see QueryOptions.textAsBytes). */
const textOf = (column: typeof plants.name | typeof plants.tag, textAsBytes: boolean): SQL =>
  textAsBytes ? sql`convert_to(${column}, 'UTF8')` : sql`${column}`;

/**
 * The reads' SQL. They return many rows: each is read as the driver gives it and made a plant
 * here, in one pass, rather than mapped field by field through Drizzle's column decoders (a
 * seventh of the service's CPU for a page of 100, most of it type checks repeated for every
 * row). A page goes further: its rows come as arrays and become the page's JSON (pageOf).
 */
function readStatements(textAsBytes: boolean) {
  const readColumns = sql`${plants.id}::text as id, ${textOf(plants.name, textAsBytes)} as name,
    ${textOf(plants.tag, textAsBytes)} as tag`;
  return {
    byIds: sql`select ${readColumns} from ${plants}
                where ${plants.id} = any(${sql.placeholder('ids')}::int8[])`,
    page: sql`select ${readColumns} from ${plants}
               where ${plants.id} >= ${sql.placeholder('fromId')}
               order by ${plants.id} limit ${sql.placeholder('limit')}`,
    // Written as a range of (tag, id) in that index's order, which only plants_tag_id_idx can
    // serve without a sort. As `tag = $1 order by id`, the planner may walk the primary key and
    // filter by tag, reading past every plant of the other tags, all of them for a rare tag.
    taggedPage: sql`select ${readColumns} from ${plants}
         where (${plants.tag}, ${plants.id}) >= (${sql.placeholder('tag')}::text, ${sql.placeholder('fromId')}::int8)
           and ${plants.tag} <= ${sql.placeholder('tag')}::text
         order by ${plants.tag}, ${plants.id} limit ${sql.placeholder('limit')}`,
  };
}

/** Every statement is built and prepared once: a query only sends its parameters. */
export function createPlantQueries(
  db: Database,
  { textAsBytes, recordEvents }: QueryOptions,
): PlantQueries {
  const text = <T>(column: typeof plants.name | typeof plants.tag) =>
    textOf(column, textAsBytes) as SQL<T>;
  const storedColumns = {
    id: plants.id,
    name: text<string | Uint8Array>(plants.name),
    tag: text<string | Uint8Array | null>(plants.tag),
  };
  const input = sql`unnest(
    ${sql.placeholder('ids')}::int8[],
    ${sql.placeholder('names')}::text[],
    ${sql.placeholder('tags')}::text[]) as input(id, name, tag)`;
  // A function: Drizzle's builders change in place, and two statements start from this one.
  const insertFromInput = () =>
    db.insert(plants).select((qb) =>
      qb
        .select({
          id: sql<bigint>`input.id`.as('id'),
          name: sql<string>`input.name`.as('name'),
          tag: sql<string | null>`input.tag`.as('tag'),
          // Drizzle inserts every column from a select: created_at takes the column's default.
          createdAt: sql<Date>`${plants.createdAt.default as SQL}`.as('created_at'),
        })
        .from(input),
    );
  // Its ids come back as text, made bigints in one pass (see the reads below).
  const insertNew = prepareStatement<{ id: string }>(
    db,
    'plants_insert_batch',
    sql`insert into ${plants} (id, name, tag) select input.id, input.name, input.tag from ${input}
         on conflict (id) do nothing returning id::text as id`,
  );
  // On a conflict, an update that changes no value: it locks the stored row, so no delete can
  // take it away before it is returned (at the price of a new row version). xmax is 0 only on a
  // row this statement inserted.
  const insertOrLock = insertFromInput()
    .onConflictDoUpdate({ target: plants.id, set: { name: sql`${plants.name}` } })
    .returning({ ...storedColumns, inserted: sql<boolean>`xmax = 0` })
    .prepare('plants_insert_or_lock');
  const reads = readStatements(textAsBytes);
  const findByIds = prepareStatement<ReadRow>(db, 'plants_select_batch', reads.byIds);
  const listPage = prepareArrayStatement(db, 'plants_page', reads.page, pageOf);
  const listTaggedPage = prepareArrayStatement(db, 'plants_tagged_page', reads.taggedPage, pageOf);
  const deleteByIds = prepareStatement<{ id: string }>(
    db,
    'plants_delete_batch',
    sql`delete from ${plants} where ${plants.id} = any(${sql.placeholder('ids')}::int8[])
        returning ${plants.id}::text as id`,
  );

  const arrays = (rows: NewPlant[]): PlantArrays => ({
    ids: `{${rows.map((row) => row.id).join(',')}}`,
    names: textArrayLiteral(rows.map((row) => row.name)),
    tags: textArrayLiteral(rows.map((row) => row.tag ?? null)),
  });
  const withEvents = recordEvents ? eventStatements(db, textAsBytes) : undefined;

  return {
    async insertNew(rows, traceContext) {
      const values = arrays(rows);
      if (withEvents) {
        const inserted = await withEvents.insertNew.execute(
          withEvents.parameters(rows, values, traceContext),
        );
        return {
          ids: new Set(inserted.map((row) => BigInt(row.id))),
          recorded: inserted[0]?.recorded ?? 0,
        };
      }
      const inserted = await insertNew.execute(values);
      return { ids: new Set(inserted.map((row) => BigInt(row.id))), recorded: 0 };
    },
    async insertOrLock(rows, traceContext) {
      const values = arrays(rows);
      if (withEvents) {
        const stored = await withEvents.insertOrLock.execute(
          withEvents.parameters(rows, values, traceContext),
        );
        return {
          rows: stored.map((row) => ({ ...readPlant(row), inserted: row.inserted })),
          recorded: stored[0]?.recorded ?? 0,
        };
      }
      const stored = await insertOrLock.execute(values);
      return {
        rows: stored.map((row) => ({ ...toStoredPlant(row), inserted: row.inserted })),
        recorded: 0,
      };
    },
    async findByIds(ids) {
      const found = new Map<bigint, StoredPlant>();
      for (const row of await findByIds.execute({ ids })) {
        const plant = readPlant(row);
        found.set(plant.id, plant);
      }
      return found;
    },
    listPage({ fromId, tag, limit }) {
      return tag === undefined
        ? listPage.execute({ fromId, limit })
        : listTaggedPage.execute({ fromId, tag, limit });
    },
    async deleteByIds(ids, traceContext) {
      const values = { ids: `{${ids.join(',')}}` };
      if (withEvents) {
        const rows = await withEvents.deleteByIds.execute({
          ...values,
          traceContext: traceContext ?? null,
        });
        return {
          deleted: new Set(rows.map((row) => BigInt(row.id))),
          recorded: rows[0]?.recorded ?? 0,
        };
      }
      const rows = await deleteByIds.execute(values);
      return { deleted: new Set(rows.map((row) => BigInt(row.id))), recorded: 0 };
    },
  };
}

/** The columns of a batch as PostgreSQL array literals, for the int8[] and text[] parameters. */
type PlantArrays = { ids: string; names: string; tags: string };

const quoteOrBackslash = /["\\]/;
const quotesAndBackslashes = /["\\]/g;

/**
 * A text[] literal, as node-postgres writes an array parameter (every element quoted, `"` and
 * `\` escaped, null as NULL) but in one pass: most names and tags have nothing to escape, and
 * node-postgres runs two regular-expression replacements over every element.
 */
export function textArrayLiteral(values: ReadonlyArray<string | null>): string {
  let literal = '{';
  for (let i = 0; i < values.length; i++) {
    const value = values[i];
    if (i > 0) literal += ',';
    if (value === null || value === undefined) literal += 'NULL';
    else if (quoteOrBackslash.test(value)) {
      literal += `"${value.replace(quotesAndBackslashes, '\\$&')}"`;
    } else literal += `"${value}"`;
  }
  return `${literal}}`;
}

/**
 * The two inserting statements, each recording a created event for exactly the rows it really
 * inserts, and the delete, recording a deleted event for the row it deletes (a replay or a conflict records none), in the same statement and so in the same
 * transaction. The payload of each event is the plant as stored, in the JSON of
 * GET /plants/{id}, made here once, so a later delete of the plant changes nothing about it.
 * PostgreSQL runs a SELECT in a WITH only as far as it is read: the final select reads
 * `recorded`, which calls the function once with every payload.
 */
function eventStatements(db: Database, textAsBytes: boolean) {
  const text = (column: string) =>
    sql.raw(textAsBytes ? `convert_to(written.${column}, 'UTF8')` : `written.${column}`);
  const input = sql`unnest(${sql.placeholder('ids')}::int8[], ${sql.placeholder('names')}::text[],
                           ${sql.placeholder('tags')}::text[]) as input(id, name, tag)`;
  const recorded = (where: SQL) => sql`recorded as (
    select record_events('newPlant', array(
             select offered.payload from written
               join unnest(${sql.placeholder('ids')}::int8[], ${sql.placeholder('payloads')}::text[])
                 as offered(id, payload) on offered.id = written.id
              where ${where}),
           ${sql.placeholder('traceContext')}::text) as count
  )`;
  const insertNew = prepareStatement<{ id: string; recorded: number }>(
    db,
    'plants_insert_batch_events',
    sql`with written as (
          insert into plants (id, name, tag) select input.id, input.name, input.tag from ${input}
          on conflict (id) do nothing
          returning id
        ),
        ${recorded(sql`true`)}
        select written.id::text as id, recorded.count as recorded from written, recorded`,
  );
  // As insertOrLock above; xmax is 0 only on a row this statement inserted.
  const insertOrLock = prepareStatement<ReadRow & { inserted: boolean; recorded: number }>(
    db,
    'plants_insert_or_lock_events',
    sql`with written as (
          insert into plants (id, name, tag) select input.id, input.name, input.tag from ${input}
          on conflict (id) do update set name = plants.name
          returning id, name, tag, xmax = 0 as inserted
        ),
        ${recorded(sql`written.inserted`)}
        select written.id::text as id, ${text('name')} as name, ${text('tag')} as tag,
               written.inserted, recorded.count as recorded
          from written, recorded`,
  );
  // The plant as it was, in the JSON of GET /plants/{id} (to_json escapes a string as
  // JSON.stringify does), in the envelope of the other event types, made in the statement.
  const deleteByIds = prepareStatement<{ id: string; recorded: number }>(
    db,
    'plants_delete_batch_events',
    sql`with deleted as (
          delete from plants where id = any(${sql.placeholder('ids')}::int8[])
          returning id, name, tag
        ),
        recorded as (
          select record_events('plantDeleted', array(
                   select '{"type":"plantDeleted","timestamp":"'
                          || ${rfc3339(sql`now()`)}
                          || '","data":{"id":' || deleted.id::text
                          || ',"name":' || to_json(deleted.name)::text
                          || coalesce(',"tag":' || to_json(deleted.tag)::text, '') || '}}'
                     from deleted),
                 ${sql.placeholder('traceContext')}::text) as count
        )
        select deleted.id::text as id, recorded.count as recorded from deleted, recorded`,
  );
  return {
    insertNew,
    insertOrLock,
    deleteByIds,
    parameters: (rows: NewPlant[], arrays: PlantArrays, traceContext: string | undefined) => ({
      ...arrays,
      payloads: textArrayLiteral(rows.map(storedPlantJson)),
      traceContext: traceContext ?? null,
    }),
  };
}

/** A reporting read's row: the server's report (see reportOfColumns), then a plant's columns. */
type ReportedRow = unknown[];

/** The plants of reported rows: none when the report's one row matched no plant. */
const plantRowsOf = (rows: ReportedRow[]): PageRow[] =>
  rows[0]?.[SERVER_REPORT_COLUMN_COUNT] == null
    ? []
    : rows.map((row) => row.slice(SERVER_REPORT_COLUMN_COUNT) as PageRow);

/**
 * The reads of createPlantQueries, each with the server's report: the report is one row, and
 * the plants are joined to it, so that an empty answer still reports.
 */
export function createReportingReads(db: Database, textAsBytes: boolean): ReportingReads {
  const reads = readStatements(textAsBytes);
  const reported = (name: string, plantsQuery: SQL, order: SQL) =>
    prepareArrayStatement(
      db,
      name,
      sql`select ${sql.raw(SERVER_REPORT_COLUMNS)}, found.id, found.name, found.tag
            from ${sql.raw(SERVER_REPORT_FROM)}
            left join lateral (${plantsQuery}) as found on true ${order}`,
      (rows: ReportedRow[]) => ({ report: reportOfColumns(rows[0] as ReportedRow), rows }),
    );
  const findByIds = reported('plants_select_batch_reported', reads.byIds, sql``);
  // In the page's order, which the join need not keep on its own.
  const byId = sql`order by found.id::int8`;
  const listPage = reported('plants_page_reported', reads.page, byId);
  const listTaggedPage = reported('plants_tagged_page_reported', reads.taggedPage, byId);
  return {
    async findByIds(ids) {
      const { report, rows } = await findByIds.execute({ ids });
      const found = new Map<bigint, StoredPlant>();
      for (const [id, name, tag] of plantRowsOf(rows)) {
        const plant = readPlant({ id, name, tag });
        found.set(plant.id, plant);
      }
      return { found, report };
    },
    async listPage({ fromId, tag, limit }) {
      const { report, rows } = await (tag === undefined
        ? listPage.execute({ fromId, limit })
        : listTaggedPage.execute({ fromId, tag, limit }));
      return { page: pageOf(plantRowsOf(rows)), report };
    },
  };
}
