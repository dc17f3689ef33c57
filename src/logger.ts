import type { FastifyBaseLogger } from 'fastify';
import pino, {
  type Bindings,
  type ChildLoggerOptions,
  type DestinationStream,
  type Logger,
} from 'pino';

/** Lines reach stdout together once this many bytes wait, or every FLUSH_INTERVAL_MS. */
const BUFFER_BYTES = 8192;
const FLUSH_INTERVAL_MS = 100;

/** pino's destination, whose flushSync writes what waits, now. */
export type BatchedDestination = ReturnType<typeof pino.destination>;

/**
 * Standard output (or the file descriptor `fd`) through pino's own destination, written in
 * batches: one write for dozens of lines. The writes are synchronous, each of a whole batch, so
 * lines leave in order and whole (an asynchronous write still in flight at exit would interleave
 * with the last lines). What is left is written on exit (process.exit, an uncaught exception,
 * the end of the event loop) and at once after a fatal line (pino calls flushSync), so the lines
 * before a crash are not lost; a process killed outright (SIGKILL, the OOM killer) loses at most
 * its last FLUSH_INTERVAL_MS of lines. When the reader is gone (EPIPE), pino drops the lines:
 * the service goes on without its log.
 */
export function stdoutDestination(fd = 1): BatchedDestination {
  const destination = pino.destination({
    dest: fd,
    sync: true,
    minLength: BUFFER_BYTES,
    periodicFlush: FLUSH_INTERVAL_MS,
  });
  // pino flushes a destination on exit only when its writes are asynchronous.
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
  return logger;
}

type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/**
 * The logger of one request, for Fastify's childLoggerFactory: pino's child logger (bindings
 * serialized, a new object on the parent's prototype chain) is made when the request first
 * logs through it, not for every request. Most requests log only their request line, which
 * src/http/request-log.ts writes with infoWithBindings.
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

  /**
   * `info(fields, message)`, the line byte for byte, but with the request's bindings written
   * among the fields by the app's logger while the request has no child logger of its own.
   */
  infoWithBindings(fields: object, message: string): void {
    if (this.made) this.made.info(fields, message);
    else this.parent.info({ ...this.bindings, ...fields }, message);
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
