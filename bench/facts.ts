import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { redactUrl } from './options.js';
import { benchBuildFolder, projectRoot } from './paths.js';

// Facts about a run that its report records: the revision, package versions, the command.

function tryCommand(command: string, args: string[]): string | undefined {
  try {
    return execFileSync(command, args, {
      cwd: projectRoot,
      encoding: 'utf8',
      stdio: 'pipe',
    }).trim();
  } catch {
    return undefined;
  }
}

export function gitRevision(): string {
  const head = tryCommand('git', ['rev-parse', '--short', 'HEAD']);
  if (!head) return 'unknown';
  const dirty = tryCommand('git', ['status', '--porcelain', '--untracked-files=no']);
  return dirty ? `${head} (with uncommitted changes)` : head;
}

export function packageVersion(name: string): string {
  try {
    const file = join(projectRoot, 'node_modules', name, 'package.json');
    return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/**
 * The command as typed: the `<prefix>*` variables that were set (a database URL's password
 * hidden), then the npm script `script` or, when run directly, `node <compiled file>`.
 */
export function commandLine(prefix: string, script: string, compiledFile: string): string {
  const quote = (value: string) => (/^[\w@%+=:,./-]+$/.test(value) ? value : `'${value}'`);
  const variables = Object.keys(process.env)
    .filter((name) => name.startsWith(prefix))
    .sort()
    .map((name) => {
      const value = process.env[name] ?? '';
      return `${name}=${quote(name.endsWith('_DATABASE_URL') ? redactUrl(value) : value)}`;
    });
  const command =
    process.env.npm_lifecycle_event === script
      ? `npm run ${script}`
      : `node ${relative(projectRoot, join(benchBuildFolder, compiledFile))}`;
  return [...variables, command].join(' ');
}
