import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';

export const projectRoot = fileURLToPath(new URL('../../', import.meta.url));

export interface RunningProcess {
  child: ChildProcess;
  /** stdout, split into lines as they arrive. */
  stdout: string[];
  stderr: string[];
  /** Resolves with the exit code (or the signal name) once the process has exited. */
  exited: Promise<number | string>;
}

/**
 * The first line of `running`'s stdout that contains `text`, once it has arrived: the service
 * writes its log in batches, so a line reaches stdout up to 100 ms after it was logged.
 */
export async function lineContaining(
  running: Pick<RunningProcess, 'stdout'>,
  text: string,
  withinMs = 5000,
): Promise<string> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const line = running.stdout.find((candidate) => candidate.includes(text));
    if (line !== undefined) return line;
    if (Date.now() > deadline) throw new Error(`no line containing ${text} within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export interface RunOptions {
  /** Working directory; the project root unless given. */
  cwd?: string;
  /** Run in a process group of its own, which `process.kill(-pid)` signals as a whole. */
  detached?: boolean;
  /** Run as this user and group (only root may choose). */
  user?: { uid: number; gid: number };
}

// Children still running when this process exits (a run that is interrupted) die with it, and
// so do the process groups of detached ones.
const children = new Set<ChildProcess>();
const groupLeaders = new WeakSet<ChildProcess>();
process.on('exit', () => {
  for (const child of children) {
    if (!groupLeaders.has(child) || child.pid === undefined) child.kill('SIGKILL');
    else {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {}
    }
  }
});
// vitest ends its worker processes with SIGTERM, which would skip every 'exit' listener.
if (process.env.VITEST_WORKER_ID !== undefined) process.once('SIGTERM', () => process.exit(143));

/** Starts `command` in the project root (or `cwd`) with exactly `env` (plus PATH). */
export function run(
  command: string,
  args: string[],
  env: Record<string, string>,
  { cwd = projectRoot, detached = false, user }: RunOptions = {},
): RunningProcess {
  const child = spawn(command, args, {
    cwd,
    ...user,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached,
  });
  if (detached) groupLeaders.add(child);
  const stdout: string[] = [];
  const stderr: string[] = [];
  const collect = (into: string[]) => {
    let partial = '';
    return (chunk: Buffer) => {
      const lines = (partial + chunk.toString('utf8')).split('\n');
      partial = lines.pop() ?? '';
      into.push(...lines);
    };
  };
  child.stdout?.on('data', collect(stdout));
  child.stderr?.on('data', collect(stderr));
  children.add(child);
  const exited = once(child, 'exit').then(([code, signal]) => {
    children.delete(child);
    return (code ?? signal) as number | string;
  });
  return { child, stdout, stderr, exited };
}

export interface RunningServer extends RunningProcess {
  baseUrl: string;
}

export interface StartServerOptions extends RunOptions {
  /** The program; this Node.js unless given. */
  command?: string;
  /** Its arguments; `dist/server.js` unless given. */
  args?: string[];
}

/**
 * Starts `node dist/server.js` and resolves once it listens and has opened (and migrated) its
 * database, which it does after it listens; rejects if it exits first. No shutdown delay unless
 * `env` sets one: nothing here load-balances, and SIGTERM stops at once.
 */
export async function startServer(
  env: Record<string, string>,
  { command = process.execPath, args = ['dist/server.js'], ...options }: StartServerOptions = {},
): Promise<RunningServer> {
  const server = run(
    command,
    args,
    { HOST: '127.0.0.1', PORT: '0', SHUTDOWN_DELAY_MS: '0', ...env },
    options,
  );
  const deadline = Date.now() + 60_000;
  let exitCode: number | string | undefined;
  server.exited.then((code) => {
    exitCode = code;
  });
  while (Date.now() < deadline) {
    const listening = server.stdout
      .map((line) => /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(line)?.[1])
      .find((url) => url !== undefined);
    const started = server.stdout.some((line) => line.includes('"msg":"started in '));
    if (listening && started) return { ...server, baseUrl: listening };
    if (exitCode !== undefined) {
      throw new Error(
        `server exited with ${exitCode}: ${server.stderr.join('\n')}${server.stdout.join('\n')}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  server.child.kill('SIGKILL');
  throw new Error(`server did not start: ${server.stdout.join('\n')}`);
}

/**
 * A TCP port on 127.0.0.1 that nothing listens on right now, for a process that must keep its
 * address across restarts (PORT=0 would give every start a new one).
 */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  await once(server, 'close');
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  return address.port;
}

/** Polls GET /readyz until it answers 200; rejects with the last answer after `withinMs`. */
export async function waitUntilReady(baseUrl: string, withinMs: number): Promise<void> {
  const deadline = Date.now() + withinMs;
  let last = 'no answer yet';
  while (Date.now() < deadline) {
    try {
      const response = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(5000) });
      if (response.status === 200) return;
      last = `${response.status} ${await response.text()}`;
    } catch (error) {
      last = String(error);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${baseUrl}/readyz did not answer 200 within ${withinMs} ms; last: ${last}`);
}

/** Kills the process unless it has exited already; for `finally` blocks. */
export async function killIfRunning(running: RunningProcess): Promise<void> {
  if (running.child.exitCode === null && running.child.signalCode === null) {
    running.child.kill('SIGKILL');
  }
  await running.exited;
}
