import { readdirSync, readFileSync } from 'node:fs';

// What Linux's /proc says of a process, a process tree and the machine. Readings are undefined
// where /proc cannot be read (another OS, or the process has gone).

/** Clock ticks per second: 100 on every Linux this runs on (getconf CLK_TCK). */
const TICKS = 100;

function read(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

/** The fields of /proc/<pid>/stat after the command name (which may hold spaces). */
function statFields(pid: number): string[] | undefined {
  const stat = read(`/proc/${pid}/stat`);
  return stat?.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** The command name of a process, e.g. `postgres`. */
export function processName(pid: number): string | undefined {
  const stat = read(`/proc/${pid}/stat`);
  return stat?.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
}

export function parentPid(pid: number): number | undefined {
  const fields = statFields(pid);
  return fields ? Number(fields[1]) : undefined;
}

/** User plus system CPU seconds so far; with `reaped`, those of its exited children too. */
export function cpuSeconds(pid: number, reaped = false): number | undefined {
  const fields = statFields(pid);
  if (!fields) return undefined;
  const own = Number(fields[11]) + Number(fields[12]);
  return (reaped ? own + Number(fields[13]) + Number(fields[14]) : own) / TICKS;
}

/** CPU seconds of a process (its reaped children included) and of each living child. */
export interface TreeCpu {
  root: number;
  children: Map<number, number>;
}

export function treeCpu(rootPid: number): TreeCpu | undefined {
  const root = cpuSeconds(rootPid, true);
  if (root === undefined) return undefined;
  const children = new Map<number, number>();
  for (const name of readdirSync('/proc').filter((entry) => /^\d+$/.test(entry))) {
    const pid = Number(name);
    const fields = statFields(pid);
    if (fields && Number(fields[1]) === rootPid) {
      children.set(pid, (Number(fields[11]) + Number(fields[12])) / TICKS);
    }
  }
  return { root, children };
}

/**
 * CPU seconds a tree used between two readings: a child that exited meanwhile is in the root's
 * reaped time; the pids in `excluded` that lived through are left out.
 */
export function treeCpuBetween(before: TreeCpu, after: TreeCpu, excluded: Set<number>): number {
  let seconds = after.root - before.root;
  for (const [pid, used] of after.children) {
    const earlier = before.children.get(pid);
    if (excluded.has(pid) && earlier !== undefined) continue;
    seconds += used - (earlier ?? 0);
  }
  for (const [pid, used] of before.children) if (!after.children.has(pid)) seconds -= used;
  return seconds;
}

/** CPU seconds the whole machine has spent busy (all cores, iowait counted idle). */
export function machineBusySeconds(): number | undefined {
  const line = read('/proc/stat')?.split('\n')[0];
  if (!line?.startsWith('cpu ')) return undefined;
  const ticks = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = ticks.reduce((sum, value) => sum + value, 0);
  return (total - (ticks[3] ?? 0) - (ticks[4] ?? 0)) / TICKS;
}

/** A line of /proc/<pid>/status such as VmRSS, in bytes. */
export function statusBytes(pid: number, field: 'VmRSS' | 'RssAnon'): number | undefined {
  const match = read(`/proc/${pid}/status`)?.match(new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm'));
  return match?.[1] ? Number(match[1]) * 1024 : undefined;
}
