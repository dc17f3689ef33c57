import pino, { type DestinationStream, type Logger } from 'pino';

/** Lines reach stdout together once this many bytes wait, or every FLUSH_INTERVAL_MS. */
const BUFFER_BYTES = 4096;
const FLUSH_INTERVAL_MS = 100;
/** What a log that cannot be written (a full disk) keeps; later lines are dropped. */
const MAX_WAITING_BYTES = 16 * 1024 * 1024;

/** pino's destination, whose flushSync writes what waits, now. */
export type BatchedDestination = ReturnType<typeof pino.destination>;

/**
 * Standard output (or the file descriptor `fd`) through pino's own destination, written in
 * batches: one write for dozens of lines. The writes are synchronous, each of a whole batch, so
 * lines leave in order and whole (an asynchronous write still in flight at exit would interleave
 * with the last lines). What is left is written on exit (process.exit, an uncaught exception,
 * the end of the event loop) and at once after a fatal line (pino calls flushSync), so the lines
 * before a crash are not lost; a process killed outright (SIGKILL, the OOM killer) loses at most
 * its last FLUSH_INTERVAL_MS of lines. A log that cannot be written drops its lines (pino stops
 * writing once the reader is gone: EPIPE): the service goes on without its log.
 */
export function stdoutDestination(fd = 1): BatchedDestination {
  const destination = pino.destination({
    dest: fd,
    sync: true,
    minLength: BUFFER_BYTES,
    maxLength: MAX_WAITING_BYTES,
    periodicFlush: FLUSH_INTERVAL_MS,
  });
  destination.on('error', () => {});
  // sonic-boom's flushSync retries a failed write forever, EPIPE included, so a fatal line (pino
  // calls flushSync) would hang a process whose reader is gone; a synchronous flush gives up.
  destination.flushSync = () => destination.flush();
  // pino flushes only an asynchronous destination on exit.
  process.once('exit', () => destination.flushSync());
  return destination;
}

let currentSecond = Number.NaN;
let secondText = '';

/**
 * The time as `new Date().toISOString()` writes it, at a seventh of its cost: the text up to the
 * second is made once a second, the milliseconds appended.
 */
export function isoTimeNow(now = Date.now()): string {
  const second = Math.floor(now / 1000);
  if (second !== currentSecond) {
    currentSecond = second;
    secondText = new Date(second * 1000).toISOString().slice(0, -4);
  }
  const ms = now - second * 1000;
  return `${secondText}${ms < 10 ? '00' : ms < 100 ? '0' : ''}${ms}Z`;
}

const MESSAGE_MAX_LENGTH = 300;

/**
 * An error as the log shows it: its name, code (a SQLSTATE or a system error's), the first line
 * of its message, its stack and its causes. Never the fields a driver hangs on it: a pg
 * connection (with its cancel key) on an idle connection's error, a statement's values, a
 * server's detail quoting a row. Drizzle's message ends with the statement's parameters, so only
 * a message's first line is kept.
 */
export function errorForLog(error: unknown, depth = 0): unknown {
  if (!(error instanceof Error)) {
    return typeof error === 'string' ? error.slice(0, MESSAGE_MAX_LENGTH) : typeof error;
  }
  const { code, statement } = error as { code?: unknown; statement?: unknown };
  const [firstLine = ''] = error.message.split('\n', 1);
  return {
    type: error.name,
    message: firstLine.slice(0, MESSAGE_MAX_LENGTH),
    ...(typeof code === 'string' && { code }),
    ...(typeof statement === 'string' && { statement }),
    // The frames only: the stack's first lines repeat the whole message.
    stack: error.stack
      ?.split('\n')
      .filter((line) => line.startsWith('    at '))
      .slice(0, 8)
      .join('\n'),
    ...(error.cause !== undefined && depth < 3 && { cause: errorForLog(error.cause, depth + 1) }),
  };
}

/** JSON lines on stdout; credentials and driver objects never reach them. */
export function createLogger(
  level: string,
  destination: DestinationStream = stdoutDestination(),
): Logger {
  return pino(
    {
      level,
      redact: {
        paths: [
          'req.headers.authorization',
          'request.headers.authorization',
          'headers.authorization',
          'config.auth.tokens',
          'config.webhooks.secret',
          'webhooks.secret',
        ],
        censor: '[redacted]',
      },
      serializers: { err: errorForLog },
      // pino.stdTimeFunctions.isoTime's text, made as isoTimeNow makes it.
      timestamp: () => `,"time":"${isoTimeNow()}"`,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}
