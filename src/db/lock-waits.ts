import { failureForLog, isDatabaseUnavailable, sqlStateOf } from './errors.js';

/** SQLSTATE lock_not_available: a statement gave up waiting for a lock after `lock_timeout`. */
export const LOCK_NOT_AVAILABLE = '55P03';

/** SQLSTATE deadlock_detected: the server ended this transaction to break a lock cycle. */
export const DEADLOCK_DETECTED = '40P01';

// Both roll the step's transaction back whole, so trying it again is safe.
const givenWay = new Set([LOCK_NOT_AVAILABLE, DEADLOCK_DETECTED]);

/** A session that holds a lock a migration step waits for, as pg_stat_activity shows it. */
export interface Blocker {
  pid: number;
  /** `active`, `idle in transaction`... */
  state: string | null;
  /** How long its transaction has been open, in seconds. */
  transactionSeconds: number | null;
  /** The first words of its latest statement: never a literal, never a parameter. */
  query: string;
}

/** The sessions that hold what the backend `pid` waits for, read from another session. */
export const blockersQuery = `select pid, state,
  extract(epoch from clock_timestamp() - xact_start)::int as "transactionSeconds", query
  from pg_stat_activity where pid = any(pg_blocking_pids($1)) order by xact_start`;

const MAX_WORDS = 8;

/**
 * The leading words of `query`, cut before the first word that could carry data: a string
 * literal, a parameter (`$1`), a dollar-quoted body, a number.
 */
export function firstWords(query: string): string {
  const words: string[] = [];
  // Block comments first: a `--` inside one is not a line comment.
  for (const word of query
    .replace(/\/\*[\s\S]*?(\*\/|$)/g, ' ')
    .replace(/--[^\n]*/g, ' ')
    .trim()
    .split(/\s+/)) {
    if (words.length === MAX_WORDS || /['$]|(^|[^\w"])\d/.test(word)) break;
    words.push(word.slice(0, 63));
  }
  return words.join(' ');
}

/** "pid 4242 (idle in transaction for 8 s: select * from plants)", or a plain phrase. */
export function describeBlockers(blockers: readonly Blocker[]): string {
  if (blockers.length === 0) return 'a lock held by another session';
  return blockers
    .map(({ pid, state, transactionSeconds, query }) => {
      const since = transactionSeconds === null ? '' : ` for ${transactionSeconds} s`;
      return `pid ${pid} (${state ?? 'unknown state'}${since}: ${query || 'no statement yet'})`;
    })
    .join(', ');
}

export interface Clock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

export const realClock: Clock = {
  now: () => Date.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

/** The pause before attempt `attempt + 1`: 250 ms, doubling, at most 5 s. */
export function backoffMs(attempt: number): number {
  return Math.min(5000, 250 * 2 ** (attempt - 1));
}

/** A migration step that could not get its locks for the whole of MIGRATION_RETRY_FOR_S. */
export class MigrationGaveUpError extends Error {
  override name = 'MigrationGaveUpError';
}

/**
 * The fatal line of a migrator or a start that failed: a give-up in its own words; a database
 * failure by its SQLSTATE and statement, never the server's detail (an index build or VALIDATE
 * quotes rows); anything else as the error it is.
 */
export function fatalLineOf(error: unknown, otherwise: string): [object, string] {
  if (error instanceof MigrationGaveUpError) return [{}, error.message];
  if (sqlStateOf(error) !== undefined || isDatabaseUnavailable(error)) {
    return [failureForLog(error), otherwise];
  }
  return [{ err: error }, otherwise];
}

export interface LockWaitEvent {
  attempt: number;
  blockers: Blocker[];
  retryInMs: number;
}

export interface RetryOptions {
  /** The step's name, for the messages. */
  step: string;
  lockTimeoutMs: number;
  retryForMs: number;
  clock: Clock;
  /** Told each time the step gave way, before the pause. */
  onWait: (event: LockWaitEvent) => void;
}

/**
 * Runs `attempt` until it succeeds; when it gives way on `lock_timeout` (55P03), or the server
 * ends it to break a deadlock with other traffic (40P01), it is tried again after a backoff, for
 * up to `retryForMs` from the first attempt. `attempt` reports who blocked it through
 * `blockers`, read while it waited.
 */
export async function withLockRetries<T>(
  options: RetryOptions,
  attempt: (blockers: Blocker[]) => Promise<T>,
): Promise<T> {
  const started = options.clock.now();
  // A busy machine can read a wait too late to see it: the blockers last seen are still news.
  let lastSeen: Blocker[] = [];
  for (let tries = 1; ; tries++) {
    const blockers: Blocker[] = [];
    try {
      return await attempt(blockers);
    } catch (error) {
      if (!givenWay.has(sqlStateOf(error) ?? '')) throw error;
      if (blockers.length > 0) lastSeen = blockers;
      const left = options.retryForMs - (options.clock.now() - started);
      if (left <= 0) {
        throw new MigrationGaveUpError(
          `migration ${options.step} gave up after ${Math.round(options.retryForMs / 1000)} s and ${tries} attempts: each time it waited ${options.lockTimeoutMs} ms (MIGRATION_LOCK_TIMEOUT_MS) for ${describeBlockers(lastSeen)} and gave way; nothing of it was applied. End that transaction, or run the migration again when it is over; MIGRATION_RETRY_FOR_S sets how long it keeps trying`,
        );
      }
      const retryInMs = Math.min(backoffMs(tries), left);
      options.onWait({ attempt: tries, blockers, retryInMs });
      await options.clock.sleep(retryInMs);
    }
  }
}
