import fs from 'node:fs';
import type { FastifyBaseLogger } from 'fastify';
import pino, {
  type Bindings,
  type ChildLoggerOptions,
  type DestinationStream,
  type Logger,
} from 'pino';

/**
 * Lines collect in memory and reach stdout together once this many bytes wait, or every
 * FLUSH_INTERVAL_MS: one write for dozens of request lines instead of one each.
 */
const BUFFER_BYTES = 8192;
const FLUSH_INTERVAL_MS = 100;
/** Room for a batch plus the longest line UTF-8 can make of a 16 KiB string. */
const CAPACITY = BUFFER_BYTES + 3 * 16384;

/** Blocks the thread for `ms`: a full pipe is waited out, not spun on. */
const sleep = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** Writes all of `bytes` to `fd`, waiting while a non-blocking pipe is full. */
function writeAll(fd: number, bytes: Uint8Array): void {
  let offset = 0;
  while (offset < bytes.length) {
    try {
      offset += fs.writeSync(fd, bytes, offset, bytes.length - offset);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') return; // e.g. EPIPE: nobody reads
      sleep(1);
    }
  }
}

export interface BatchedDestination extends DestinationStream {
  /** Writes what waits, now. */
  flushSync(): void;
}

/**
 * Standard output (or the file descriptor `fd`), written in batches: one write for dozens of
 * lines. Each line is encoded once, straight into a buffer that is reused, so a line costs no
 * string concatenation or copy of its own. The writes are synchronous, each of a whole batch, so
 * lines leave in order and whole (an asynchronous write still in flight at exit would interleave
 * with the last lines). What is left is written on exit (process.exit, an uncaught exception,
 * the end of the event loop) and at once after a fatal line (pino calls flushSync), so the lines
 * before a crash are not lost; a process killed outright (SIGKILL, the OOM killer) loses at most
 * its last FLUSH_INTERVAL_MS of lines. A write that fails for any reason but a full pipe (EPIPE:
 * the reader is gone) drops its lines: the service goes on without its log.
 */
export function stdoutDestination(fd = 1): BatchedDestination {
  const buffer = Buffer.allocUnsafe(CAPACITY);
  let length = 0;
  const flushSync = () => {
    if (length === 0) return;
    const batch = buffer.subarray(0, length);
    length = 0;
    writeAll(fd, batch);
  };
  const destination: BatchedDestination = {
    write(line: string) {
      // A string of n UTF-16 units takes at most 3n bytes in UTF-8.
      if (length + 3 * line.length > CAPACITY) {
        flushSync();
        if (3 * line.length > CAPACITY) {
          writeAll(fd, Buffer.from(line));
          return;
        }
      }
      length += buffer.write(line, length);
      if (length >= BUFFER_BYTES) flushSync();
    },
    flushSync,
  };
  setInterval(flushSync, FLUSH_INTERVAL_MS).unref();
  process.once('exit', flushSync);
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

/** Where each logger made by createLogger writes, for the lines written by infoLineOf. */
const destinations = new WeakMap<object, DestinationStream>();

/** JSON lines on stdout; credentials never reach them. */
export function createLogger(
  level: string,
  destination: DestinationStream = stdoutDestination(),
): Logger {
  const logger = pino(
    {
      level,
      redact: {
        paths: [
          'req.headers.authorization',
          'request.headers.authorization',
          'headers.authorization',
          'config.apiTokens',
          'config.webhooks.secret',
          'webhooks.secret',
        ],
        censor: '[redacted]',
      },
      // pino.stdTimeFunctions.isoTime's text, made as isoTimeNow makes it.
      timestamp: () => `,"time":"${isoTimeNow()}"`,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
  destinations.set(logger, destination);
  return logger;
}

/** Writes a line at level info: the object's members as JSON text, each after a comma. */
export type InfoLine = (members: string, message: string) => void;

/**
 * For a logger made by createLogger, a writer of lines at level info that skips pino's generic
 * path: the line is the one `logger.info(object, message)` writes, byte for byte (level, time,
 * the logger's bindings, the members, the message), but its members are JSON the caller wrote,
 * so nothing is walked, redacted or formatted. For a line written on every request, whose
 * fields are known; undefined for any other logger. It writes whatever the level: the caller
 * asks the logger in use whether info is enabled.
 */
export function infoLineOf(logger: FastifyBaseLogger): InfoLine | undefined {
  const destination = destinations.get(logger);
  if (!destination) return undefined;
  // The logger's own bindings (pid, hostname) as pino has serialized them: `,"pid":1,...`.
  const bindings = (logger as unknown as Record<symbol, string>)[pino.symbols.chindingsSym] ?? '';
  return (members, message) => {
    destination.write(
      `{"level":"info","time":"${isoTimeNow()}"${bindings}${members},"msg":${JSON.stringify(message)}}\n`,
    );
  };
}

type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/**
 * The logger of one request, for Fastify's childLoggerFactory: pino's child logger (bindings
 * serialized, a new object on the parent's prototype chain) is made when the request first
 * logs through it, not for every request. Most requests log only their request line, which
 * src/http/request-log.ts writes with infoLineOf and the request id.
 */
export class RequestLogger implements FastifyBaseLogger {
  private made: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
  ) {}

  private get logger(): FastifyBaseLogger {
    this.made ??= this.parent.child(this.bindings);
    return this.made;
  }

  private write(level: Level, args: unknown[]): void {
    const logger = this.logger;
    Reflect.apply(logger[level], logger, args);
  }

  get level(): string {
    return (this.made ?? this.parent).level;
  }

  set level(level: string) {
    this.logger.level = level;
  }

  /** Whether this request's lines at `level` are written (its level may differ from the app's). */
  isLevelEnabled(level: string): boolean {
    return ((this.made ?? this.parent) as Logger).isLevelEnabled(level);
  }

  fatal(...args: unknown[]): void {
    this.write('fatal', args);
  }
  error(...args: unknown[]): void {
    this.write('error', args);
  }
  warn(...args: unknown[]): void {
    this.write('warn', args);
  }
  info(...args: unknown[]): void {
    this.write('info', args);
  }
  debug(...args: unknown[]): void {
    this.write('debug', args);
  }
  trace(...args: unknown[]): void {
    this.write('trace', args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.logger.child(bindings, options);
  }
}

/** Fastify's childLoggerFactory: a RequestLogger, or pino's child when options are given. */
export function requestLoggerFactory(
  logger: FastifyBaseLogger,
  bindings: Bindings,
  options: ChildLoggerOptions,
): FastifyBaseLogger {
  for (const _option in options) return logger.child(bindings, options);
  return new RequestLogger(logger, bindings);
}
