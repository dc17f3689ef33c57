/** The database could not be reached or did not answer in time; the caller may retry later. */
export class DatabaseUnavailableError extends Error {
  override name = 'DatabaseUnavailableError';
  constructor(cause: unknown) {
    super('the database is unavailable', { cause });
  }
}

// Network failures of the socket under node-postgres.
const networkErrorCodes = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNABORTED',
]);

// SQLSTATEs that mean "not now" rather than "never": connection exceptions (class 08),
// operator intervention (57: shutdown, crash recovery, statement_timeout), too many connections.
function isTransientSqlState(code: string): boolean {
  return (
    code.startsWith('08') ||
    code === '57014' ||
    code === '57P01' ||
    code === '57P02' ||
    code === '57P03' ||
    code === '53300'
  );
}

// node-postgres reports lost connections and its own timeouts with plain messages.
const transientMessages = [
  'Connection terminated',
  'timeout exceeded when trying to connect',
  'Query read timeout',
  'Client has encountered a connection error',
  'Client was closed and is not queryable',
  'Cannot use a pool after calling end',
];

/** True when `error`, or any error in its `cause` chain, means the database is unavailable. */
export function isDatabaseUnavailable(error: unknown): boolean {
  for (let current = error, depth = 0; current && depth < 8; depth++) {
    if (current instanceof DatabaseUnavailableError) return true;
    if (typeof current !== 'object') return false;
    const { code, message, cause } = current as {
      code?: unknown;
      message?: unknown;
      cause?: unknown;
    };
    if (typeof code === 'string' && (networkErrorCodes.has(code) || isTransientSqlState(code))) {
      return true;
    }
    if (typeof message === 'string' && transientMessages.some((m) => message.includes(m))) {
      return true;
    }
    current = cause;
  }
  return false;
}

/** A database failure that means "unavailable" as DatabaseUnavailableError, others unchanged. */
export function classifyDatabaseError(error: unknown): unknown {
  return isDatabaseUnavailable(error) && !(error instanceof DatabaseUnavailableError)
    ? new DatabaseUnavailableError(error)
    : error;
}

/** Too many requests are already waiting for the database; the caller may retry shortly. */
export class QueueFullError extends Error {
  override name = 'QueueFullError';
  constructor() {
    super('too many requests are waiting for the database');
  }
}

/** The database refused a row (a data exception or an integrity constraint). */
export class RowRejectedError extends Error {
  override name = 'RowRejectedError';
  constructor(cause: unknown) {
    super('the database refused the row', { cause });
  }
}

/** The SQLSTATE of `error` or of an error in its `cause` chain. */
export function sqlStateOf(error: unknown): string | undefined {
  for (let current = error, depth = 0; current && depth < 8; depth++) {
    const { code, cause } = current as { code?: unknown; cause?: unknown };
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
    current = cause;
  }
  return undefined;
}

/** True for SQLSTATE classes 22 (data exception) and 23 (integrity constraint violation). */
export function isRowRejection(error: unknown): boolean {
  const state = sqlStateOf(error);
  return state !== undefined && (state.startsWith('22') || state.startsWith('23'));
}

/** The embedded engine's data directory is held by another process (or this one). */
export class DataDirInUseError extends Error {
  override name = 'DataDirInUseError';
}
