import { ConfigError } from './config.js';

/** A command line the command cannot take: exit 2 with its usage. */
export class UsageError extends Error {}

/**
 * Ends an operator command that failed before its work began: a bad command line exits 2 with
 * `usage`, a bad configuration exits 1 with its one line; anything else is rethrown.
 */
export function endOnBadInput(error: unknown, usage: string): void {
  if (
    error instanceof UsageError ||
    (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')
  ) {
    process.stderr.write(`plant-store: ${(error as Error).message}\n${usage}\n`);
    process.exitCode = 2;
  } else if (error instanceof ConfigError) {
    process.stderr.write(`plant-store: invalid configuration: ${error.message}\n`);
    process.exitCode = 1;
  } else throw error;
}
