import { type Config, ConfigError, loadConfig } from './config.js';
import { describeDatabase } from './db/client.js';
import { DataDirInUseError } from './db/errors.js';
import { fatalLineOf } from './db/lock-waits.js';
import { createService } from './service.js';

function readConfig(): Config {
  try {
    return loadConfig(process.env);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(error.line);
    process.exit(1);
  }
}

/**
 * One line for a failure to start that the operator can put right (the port or the data
 * directory taken, a server that refuses the credentials); undefined for anything else.
 */
function refusalOf(error: unknown, config: Config): string | undefined {
  if (error instanceof DataDirInUseError) {
    return `${error.message}: one process at a time can use an embedded database; stop the other service or set another DATA_DIR`;
  }
  const { code, syscall, path, message, port } = error as NodeJS.ErrnoException & {
    port?: number;
  };
  if (syscall === 'listen' && code === 'EADDRINUSE') {
    const variable = port !== undefined && port === config.metricsPort ? 'METRICS_PORT' : 'PORT';
    return `port ${port ?? config.port} on ${config.host} is in use by another process; stop it or set ${variable}`;
  }
  if (syscall === 'listen' && code === 'EACCES') {
    return `this user may not listen on port ${config.port}; set PORT to 1024 or above`;
  }
  if (path !== undefined && (code === 'EACCES' || code === 'EPERM' || code === 'EROFS')) {
    return `the data directory ${config.database.dataDir} cannot be written (${code} on ${path}); mount a writable directory there, set DATA_DIR to one, or set DATABASE_URL`;
  }
  // Wrong credentials, no such database or role: the server answered, and will answer the same.
  if (code === '28P01' || code === '28000' || code === '3D000') {
    return `${describeDatabase(config.database).description} refused the connection: ${message}`;
  }
  return undefined;
}

const config = readConfig();
const service = await createService(config, { env: process.env });
const { logger } = service;

// Ctrl-C, or a kill of the process group, reaches npm too, which passes the signal on: a second
// delivery this soon is the same request to stop, not a second one.
const SAME_STOP_REQUEST_MS = 1000;
let stopSignalAt: number | undefined;

async function stop(signal: NodeJS.Signals): Promise<void> {
  if (stopSignalAt !== undefined) {
    if (performance.now() - stopSignalAt < SAME_STOP_REQUEST_MS) return;
    logger.warn({ signal }, 'second signal: exiting without waiting');
    process.exit(1);
  }
  stopSignalAt = performance.now();
  setTimeout(() => {
    logger.error({ graceMs: config.shutdown.timeoutMs }, 'grace period expired: exiting');
    process.exit(1);
  }, config.shutdown.delayMs + config.shutdown.timeoutMs).unref();
  try {
    await service.close({ notReadyMs: signal === 'SIGTERM' ? config.shutdown.delayMs : 0 });
  } catch (error) {
    logger.error({ err: error }, 'shutdown failed');
    process.exit(1);
  }
  logger.info('stopped');
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

try {
  // Listen first: probes get their answers while the database opens, which can take seconds.
  await service.listen();
  await service.open();
  if (stopSignalAt === undefined) {
    const startupMs = Math.round(process.uptime() * 1000);
    logger.info({ startupMs }, `started in ${startupMs} ms`);
  }
} catch (error) {
  // A signal during the start: stop() is shutting down, and decides the exit code.
  if (stopSignalAt === undefined) {
    const refusal = refusalOf(error, config);
    if (refusal) process.stderr.write(`plant-store: cannot start: ${refusal}\n`);
    else logger.fatal(...fatalLineOf(error, 'failed to start'));
    await service.database?.close().catch(() => {});
    process.exit(1);
  }
}
