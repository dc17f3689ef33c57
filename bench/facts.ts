import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism, cpus, release, totalmem } from 'node:os';
import { join, relative } from 'node:path';
import { redactUrl } from './options.js';
import { benchBuildFolder, projectRoot } from './paths.js';

// Facts about a run that its report records: the machine, the revision, the command.

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

function gitRevision(): string {
  const head = tryCommand('git', ['rev-parse', '--short', 'HEAD']);
  if (!head) return 'unknown';
  const dirty = tryCommand('git', ['status', '--porcelain', '--untracked-files=no']);
  return dirty ? `${head} (with uncommitted changes)` : head;
}

function packageVersion(name: string): string {
  try {
    const file = join(projectRoot, 'node_modules', name, 'package.json');
    return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

export function machineFacts(postgres: string): Record<string, string | number> {
  return {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: availableParallelism(),
    memory: `${(totalmem() / 1024 ** 3).toFixed(1)} GiB`,
    kernel: release(),
    node: process.version,
    postgres,
    autocannon: packageVersion('autocannon'),
    pg: packageVersion('pg'),
    revision: gitRevision(),
  };
}

/**
 * The command as typed: the BENCH_* variables that were set (a database URL's password
 * hidden), then `npm run bench` or, when run directly, `node <compiled run.js>`, and the suite.
 */
export function commandLine(args: string[]): string {
  const quote = (value: string) => (/^[\w@%+=:,./-]+$/.test(value) ? value : `'${value}'`);
  const variables = Object.keys(process.env)
    .filter((name) => name.startsWith('BENCH_'))
    .sort()
    .map((name) => {
      const value = process.env[name] ?? '';
      return `${name}=${quote(name.endsWith('_DATABASE_URL') ? redactUrl(value) : value)}`;
    });
  const viaNpm = process.env.npm_lifecycle_event === 'bench';
  const command = viaNpm
    ? `npm run bench${args.length > 0 ? ' --' : ''}`
    : `node ${relative(projectRoot, join(benchBuildFolder, 'run.js'))}`;
  return [...variables, command, ...args.map(quote)].join(' ');
}
