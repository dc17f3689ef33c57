import fs from 'node:fs';
import pino, { type DestinationStream, type Logger } from 'pino';

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

/** JSON lines on stdout; credentials never reach them. */
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
          'config.apiTokens',
          'config.webhooks.secret',
          'webhooks.secret',
        ],
        censor: '[redacted]',
      },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}
