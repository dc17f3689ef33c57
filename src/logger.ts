import pino, { type DestinationStream, type Logger } from 'pino';

/**
 * Lines collect in memory and reach stdout together once this many bytes wait, or every
 * FLUSH_INTERVAL_MS: one write for dozens of request lines instead of one each.
 */
const BUFFER_BYTES = 8192;
const FLUSH_INTERVAL_MS = 100;

/**
 * Standard output (or the file descriptor `fd`), written in batches: one write for dozens of
 * lines. The writes are synchronous, each of a whole batch, so lines leave in order and whole
 * (an asynchronous write still in flight at exit would interleave with the last lines). What
 * is left is written on exit (process.exit, an uncaught exception, the end of the event loop)
 * and at once after a fatal line, so the lines before a crash are not lost; a process killed
 * outright (SIGKILL, the OOM killer) loses at most its last FLUSH_INTERVAL_MS of lines.
 */
export function stdoutDestination(fd = 1): DestinationStream & { flushSync(): void } {
  const destination = pino.destination({
    dest: fd,
    sync: true,
    minLength: BUFFER_BYTES,
    periodicFlush: FLUSH_INTERVAL_MS,
  });
  process.once('exit', () => destination.flushSync());
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
