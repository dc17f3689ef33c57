import { rmSync } from 'node:fs';
import pg from 'pg';
import { OptionsError } from './options.js';
import { killAllChildren, stopAllChildren } from './processes.js';

/** What a bench tool made and must remove, however its run ends. */
export interface Scratch {
  /** The server the database was created on. */
  adminUrl?: string;
  database?: string;
  workFolder?: string;
}

export interface CleanUp {
  scratch: Scratch;
  /** Aborted on the first signal: loads stop early. */
  abort: AbortController;
  /**
   * Reads the options (an OptionsError exits 2), runs the tool, cleans up and exits with the
   * tool's code (1 on a failure); while a signal is handled, its handler exits instead.
   */
  runAndExit<O>(readOptions: () => O, tool: (options: O) => Promise<number>): Promise<void>;
}

/**
 * Installs the handlers that clean up after `tool` on SIGINT, SIGTERM, SIGHUP and an uncaught
 * exception (a second signal kills the children without waiting), and returns the clean-up
 * for the normal way out.
 */
export function cleanUpOnExit(tool: string, say: (line: string) => void): CleanUp {
  const scratch: Scratch = {};
  const abort = new AbortController();
  let cleaning: Promise<void> | undefined;

  const cleanUp = (): Promise<void> => {
    cleaning ??= (async () => {
      await stopAllChildren();
      const { adminUrl, database, workFolder } = scratch;
      if (adminUrl && database) {
        const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 5000 });
        try {
          await client.connect();
          await client.query(`drop database if exists ${database} with (force)`);
          say(`dropped database ${database}`);
        } catch (error) {
          process.stderr.write(
            `${tool}: could not drop database ${database}: ${(error as Error).message}\n`,
          );
        } finally {
          await client.end().catch(() => {});
        }
      }
      if (workFolder) rmSync(workFolder, { recursive: true, force: true });
    })();
    return cleaning;
  };

  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) {
      killAllChildren();
      process.exit(130);
    }
    interrupted = true;
    process.stderr.write(
      `\n${tool}: ${signal}: stopping its processes and dropping its database\n`,
    );
    abort.abort();
    cleanUp().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
  };
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, onSignal);
  process.on('uncaughtException', (error) => {
    process.stderr.write(`${tool}: ${error.stack ?? error}\n`);
    cleanUp().finally(() => process.exit(1));
  });
  const runAndExit = async <O>(readOptions: () => O, run: (options: O) => Promise<number>) => {
    let code: number;
    try {
      code = await run(readOptions());
    } catch (error) {
      if (error instanceof OptionsError) {
        process.stderr.write(`${tool}: ${error.message}\n`);
        code = 2;
      } else {
        if (!abort.signal.aborted)
          process.stderr.write(`${tool}: ${(error as Error).stack ?? error}\n`);
        code = 1;
      }
    } finally {
      await cleanUp();
    }
    if (!abort.signal.aborted) process.exit(code);
  };
  return { scratch, abort, runAndExit };
}
