import pino, { type DestinationStream, type Logger } from 'pino';

/**
 * Lines collect in memory and reach stdout together once this many bytes wait, or every
 * FLUSH_INTERVAL_MS: one write for dozens of request lines instead of one each.
 */
const BUFFER_BYTES = 8192;
const FLUSH_INTERVAL_MS = 100;

/**
 * Standard output (or the file descriptor `fd`), written asynchronously and in batches: the
 * event loop never waits for it.
 * On exit (process.exit, the end of the event loop, an uncaught exception) pino writes what is
 * left synchronously, so the lines logged before a fatal error are never lost; a process killed
 * outright (SIGKILL, the OOM killer) loses at most the last FLUSH_INTERVAL_MS of lines.
 */
export function stdoutDestination(fd = 1): DestinationStream {
  return pino.destination({
    dest: fd,
    sync: false,
    minLength: BUFFER_BYTES,
    periodicFlush: FLUSH_INTERVAL_MS,
  });
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
