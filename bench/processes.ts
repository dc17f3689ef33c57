import { type ChildProcess, execFileSync, type StdioOptions, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Child {
  name: string;
  process: ChildProcess;
  pid: number;
  /** Set once the process has exited. */
  exit: Exit | undefined;
  exited: Promise<Exit>;
}

/** Every child that has not exited yet, so that any way out of the harness can stop them. */
const running = new Set<Child>();

export interface SpawnOptions {
  cwd: string;
  env: Record<string, string>;
  stdio: StdioOptions;
}

export function spawnChild(
  name: string,
  command: string,
  args: string[],
  options: SpawnOptions,
): Child {
  const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: options.stdio });
  const failedToSpawn = once(child, 'error').then(([error]) => {
    throw new Error(`${name}: cannot start ${command}: ${(error as Error).message}`);
  });
  const exited = Promise.race([
    // 'close' rather than 'exit': by then piped output has been read to the end.
    once(child, 'close').then(([code, signal]) => ({ code, signal }) as Exit),
    failedToSpawn,
  ]);
  if (child.pid === undefined) {
    // spawn failed synchronously (no such file); 'error' follows on the next tick.
    exited.catch(() => {});
    throw new Error(`${name}: cannot start ${command}`);
  }
  const handle: Child = { name, process: child, pid: child.pid, exit: undefined, exited };
  running.add(handle);
  exited.then(
    (exit) => {
      handle.exit = exit;
      running.delete(handle);
    },
    () => running.delete(handle),
  );
  return handle;
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves with how the process ended. */
export async function stopChild(child: Child, graceMs = 10_000): Promise<Exit> {
  if (child.exit) return child.exit;
  child.process.kill('SIGTERM');
  const timer = setTimeout(() => child.process.kill('SIGKILL'), graceMs);
  try {
    return await child.exited;
  } finally {
    clearTimeout(timer);
  }
}

export async function stopAllChildren(graceMs = 5000): Promise<void> {
  await Promise.allSettled([...running].map((child) => stopChild(child, graceMs)));
}

export function killAllChildren(): void {
  for (const child of running) child.process.kill('SIGKILL');
}

export function describeExit(exit: Exit): string {
  return exit.signal ? `signal ${exit.signal}` : `code ${exit.code}`;
}

/** Runs a command to completion; rejects with its output when it exits non-zero. */
export async function runToCompletion(
  name: string,
  command: string,
  args: string[],
  options: Omit<SpawnOptions, 'stdio'>,
): Promise<{ stdout: string; stderr: string }> {
  const child = spawnChild(name, command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  child.process.stdout?.on('data', (chunk: Buffer) => stdout.push(chunk));
  child.process.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk));
  const exit = await child.exited;
  const output = {
    stdout: Buffer.concat(stdout).toString('utf8'),
    stderr: Buffer.concat(stderr).toString('utf8'),
  };
  if (exit.code !== 0) {
    throw new Error(
      `${name} exited with ${describeExit(exit)}\n${output.stderr.trim()}\n${output.stdout.trim()}`,
    );
  }
  return output;
}

/** The last `lines` lines of a file; '' when it cannot be read. */
export function tailOf(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/**
 * Resolves with the base URL once the service, started with PORT=0 and its stdout in `logFile`,
 * logs that it listens and answers /readyz with 200 (it listens before its database is open);
 * rejects when it exits first, the time is up, or `signal` aborts.
 */
export async function waitForListening(
  child: Child,
  logFile: string,
  errorFile: string,
  { timeoutMs, signal }: { timeoutMs: number; signal?: AbortSignal },
): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && !signal?.aborted) {
    const match = /"msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/.exec(
      readFileSync(logFile, 'utf8'),
    );
    const ready =
      match?.[1] &&
      (await fetch(`${match[1]}/readyz`).then(
        (response) => response.status === 200,
        () => false,
      ));
    if (match?.[1] && ready) return match[1];
    if (child.exit) {
      throw new Error(
        `exited with ${describeExit(child.exit)} before listening:\n${tailOf(errorFile)}\n${tailOf(logFile)}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`did not listen within ${timeoutMs / 1000} s:\n${tailOf(logFile)}`);
}

// ---- /proc readings (Linux) ----

function readProc(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined; // the process has gone, or this is not Linux
  }
}

/** A `VmRSS`-style line of /proc/<pid>/status, in bytes. */
export function readStatusBytes(
  pid: number,
  field: 'VmRSS' | 'VmHWM' | 'RssAnon' | 'RssFile',
): number | undefined {
  const status = readProc(`/proc/${pid}/status`);
  const match = status && new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(status);
  return match?.[1] ? Number(match[1]) * 1024 : undefined;
}

let clockTicksPerSecond: number | undefined;
function ticksPerSecond(): number {
  if (clockTicksPerSecond === undefined) {
    try {
      clockTicksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
    } catch {
      clockTicksPerSecond = Number.NaN;
    }
    if (!(clockTicksPerSecond > 0)) clockTicksPerSecond = 100;
  }
  return clockTicksPerSecond;
}

/** The fields of /proc/<pid>/stat after the command name; undefined when it cannot be read. */
function statFields(pid: number): string[] | undefined {
  const stat = readProc(`/proc/${pid}/stat`);
  // The command name may hold spaces and parentheses; the fields after its last ')' do not.
  return stat?.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** User plus system CPU seconds the process has used so far. */
export function readProcessCpuSeconds(pid: number): number | undefined {
  const fields = statFields(pid);
  if (!fields) return undefined;
  // After the name: state(3) ppid(4) ... utime(14) stime(15), so indexes 11 and 12 here.
  return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond();
}

/** The command name of a process (its comm), e.g. `postgres`; undefined when it cannot be read. */
export function readProcessName(pid: number): string | undefined {
  const stat = readProc(`/proc/${pid}/stat`);
  return stat?.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
}

/** The parent of a process; undefined when it cannot be read. */
export function readParentPid(pid: number): number | undefined {
  const fields = statFields(pid);
  return fields ? Number(fields[1]) : undefined;
}

/** CPU seconds of a process and of its direct children, each by pid. */
export interface ProcessTreeCpu {
  /** The root's own user + system time plus what its exited children used (cutime, cstime). */
  root: number;
  children: Map<number, number>;
}

/**
 * The CPU a process tree has used so far: the root's utime + stime + cutime + cstime (the
 * children it has reaped are in the last two), and every living direct child's utime + stime.
 * For a PostgreSQL server the root is the postmaster: backends and background processes are its
 * children. Undefined when the root cannot be read (another machine, or not Linux).
 */
export function readProcessTreeCpu(rootPid: number): ProcessTreeCpu | undefined {
  const fields = statFields(rootPid);
  if (!fields) return undefined;
  const ticks = ticksPerSecond();
  const root =
    (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) / ticks;
  const children = new Map<number, number>();
  let pids: string[] = [];
  try {
    pids = readdirSync('/proc').filter((name) => /^\d+$/.test(name));
  } catch {
    return { root, children };
  }
  for (const name of pids) {
    const child = statFields(Number(name));
    if (child && Number(child[1]) === rootPid) {
      children.set(Number(name), (Number(child[11]) + Number(child[12])) / ticks);
    }
  }
  return { root, children };
}

/**
 * CPU seconds the tree used between two readings: a child that exited in between is counted
 * through the root's cutime and cstime, one that started in between from zero. The pids in
 * `excluded` (alive at both readings) are left out.
 */
export function treeCpuBetween(
  before: ProcessTreeCpu,
  after: ProcessTreeCpu,
  excluded: ReadonlySet<number> = new Set(),
): number {
  let seconds = after.root - before.root;
  for (const [pid, used] of after.children) {
    const earlier = before.children.get(pid);
    if (excluded.has(pid) && earlier !== undefined) continue;
    seconds += used - (earlier ?? 0);
  }
  for (const [pid, used] of before.children) {
    // Exited: its whole life is in the root's cutime/cstime now, so take back what came before.
    if (!after.children.has(pid)) seconds -= used;
  }
  return seconds;
}

/** CPU seconds the whole machine has spent busy and in total (all cores), from /proc/stat. */
export function readMachineCpuSeconds(): { busy: number; total: number } | undefined {
  const line = readProc('/proc/stat')?.split('\n')[0];
  if (!line?.startsWith('cpu ')) return undefined;
  const ticks = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = ticks.reduce((sum, value) => sum + value, 0);
  const idle = (ticks[3] ?? 0) + (ticks[4] ?? 0); // idle + iowait
  return { busy: (total - idle) / ticksPerSecond(), total: total / ticksPerSecond() };
}

/** Samples a process's resident memory until stopped; `peak` is the largest sample. */
export function sampleResidentMemory(pid: number, everyMs = 100): { stop(): number | undefined } {
  let peak: number | undefined;
  const sample = () => {
    const rss = readStatusBytes(pid, 'VmRSS');
    if (rss !== undefined && (peak === undefined || rss > peak)) peak = rss;
  };
  sample();
  const timer = setInterval(sample, everyMs);
  return {
    stop() {
      clearInterval(timer);
      sample();
      return peak;
    },
  };
}
