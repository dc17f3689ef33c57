import { type SQL, sql } from 'drizzle-orm';

/**
 * `{"id":<digits>` opens every newPlant body, and a plantDeleted envelope's data: the plant's id,
 * exactly. The other types are about no plant. Read in TypeScript and in SQL from these.
 */
const PLANT_ID_PATTERNS = [
  String.raw`^\{"id":(-?\d{1,19})[,}]`,
  String.raw`^\{"type":"plantDeleted","timestamp":"[^"]*","data":\{"id":(-?\d{1,19})[,}]`,
];
const expressions = PLANT_ID_PATTERNS.map((pattern) => new RegExp(pattern));

/** The id of the plant an event's body is about, in decimal; undefined when it is about none. */
export const plantIdOf = (body: string) =>
  expressions.map((pattern) => pattern.exec(body)?.[1]).find((id) => id !== undefined);

/** plantIdOf in SQL, of the body `body`: an int8, or null. */
export const plantIdSql = (body: SQL) =>
  sql`coalesce(${sql.join(
    PLANT_ID_PATTERNS.map(
      (pattern) => sql`substring(${body} from ${sql.raw(`'${pattern.replaceAll("'", "''")}'`)})`,
    ),
    sql`, `,
  )})::int8`;
