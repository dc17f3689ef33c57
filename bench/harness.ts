import { type ChildProcess, fork, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { closeSync, mkdtempSync, openSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { BenchOptions } from './options.js';
import {
  cpuSeconds,
  machineBusySeconds,
  parentPid,
  processName,
  statusBytes,
  type TreeCpu,
  treeCpu,
  treeCpuBetween,
} from './proc.js';

// What both suites share: their database, the service in a process of its own, and what a load
// costs each process.

export const PLANT_NAME = 'Monstera deliciosa';
export const PLANT_TAG = 'aroid';
export const say = (line: string) => process.stdout.write(`${line}\n`);

/** The package root, above dist-bench/bench/ where this runs compiled. */
export const projectRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const benchFolder = join(projectRoot, 'dist-bench', 'bench');

/** What a suite hands back: its title, its Markdown, and whether a check failed. */
export interface SuiteReport {
  title: string;
  body: string;
  failed: boolean;
}

export interface Session {
  options: BenchOptions;
  admin: pg.Client;
  database: string;
  databaseUrl: string;
  token: string;
  /** The PostgreSQL server's postmaster, when it runs on this machine. */
  postmaster: number | undefined;
  work: string;
  signal: AbortSignal;
  /** The checkout whose dist/ the service runs from: this one, or BENCH_BEFORE_BUILD. */
  root: string;
  /** The session of the @before targets, once opened (see openBeforeSession). */
  before?: Session;
}

/** A new database on the server, and its URL. */
async function createDatabase(admin: pg.Client, serverUrl: string) {
  const database = `plant_store_bench_${randomBytes(4).toString('hex')}`;
  await admin.query(`create database ${database}`);
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  return { database, databaseUrl: url.toString() };
}

/** Creates the run's database on the server. */
export async function openSession(options: BenchOptions, signal: AbortSignal): Promise<Session> {
  const admin = new pg.Client({ connectionString: options.databaseUrl });
  await admin.connect();
  const { database, databaseUrl } = await createDatabase(admin, options.databaseUrl);
  // A server elsewhere has pids of its own: the backend's parent must be a postgres here too.
  const { rows } = await admin.query<{ pid: number }>('select pg_backend_pid() as pid');
  const backend = rows[0]?.pid ?? 0;
  const parent = processName(backend) === 'postgres' ? parentPid(backend) : undefined;
  return {
    options,
    admin,
    database,
    databaseUrl,
    root: projectRoot,
    token: randomBytes(32).toString('base64url'),
    postmaster: parent && processName(parent) === 'postgres' ? parent : undefined,
    work: mkdtempSync(join(tmpdir(), 'plant-store-bench-')),
    signal,
  };
}

/**
 * The session of the build at `root`, on a database of its own: each build migrates its own, so
 * that the earlier one runs on its own schema, not on functions a later migration replaced.
 */
export async function openBeforeSession(session: Session, root: string): Promise<Session> {
  const database = await createDatabase(session.admin, session.options.databaseUrl);
  return { ...session, ...database, root, before: undefined };
}

/** Runs `work` with a client of the run's database. */
export async function withClient<T>(session: Session, work: (client: pg.Client) => Promise<T>) {
  const client = new pg.Client({ connectionString: session.databaseUrl });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** Ids never repeat: a random 62-bit base per run plus a counter, well inside int64. */
export function plantIds(): () => bigint {
  const base = BigInt.asUintN(62, randomBytes(8).readBigUInt64BE());
  let counter = 0n;
  return () => base + counter++;
}

export const plantBody = (id: bigint) => `{"id":${id},"name":"${PLANT_NAME}","tag":"${PLANT_TAG}"}`;

/** `count` plants, ids `first`, `first + step` and so on, with fresh statistics. */
export async function insertPlants(session: Session, count: number, first: bigint, step: bigint) {
  await withClient(session, async (client) => {
    await client.query(
      `insert into plants (id, name, tag)
         select $2::int8 + g * $3::int8, $4, $5 from generate_series(0, $1::int - 1) g`,
      [count, String(first), String(step), PLANT_NAME, PLANT_TAG],
    );
    await client.query('vacuum analyze plants');
  });
}

/** `count` plants stored for the reads, ids `step` apart over int64. */
export async function storePlants(session: Session, count: number) {
  const step = (2n ** 63n - 1n) / BigInt(count);
  await insertPlants(session, count, step, step);
  return { count, step };
}

/** Every service started and not yet stopped, so that an interrupted run stops them. */
export const running = new Set<ChildProcess>();

export interface Service {
  pid: number;
  baseUrl: string;
  /** Its stdout: the request log. */
  logFile: string;
  exited: () => boolean;
  /** SIGTERM (SIGKILL after 10 s); resolves with its exit code, or the signal that ended it. */
  stop(): Promise<number | string>;
}

/** The V8 flags the service ships with (the image's NODE_OPTIONS, which `npm start` matches). */
export const shippedNodeOptions =
  /NODE_OPTIONS="([^"]*)"/.exec(readFileSync(join(projectRoot, 'Dockerfile'), 'utf8'))?.[1] ?? '';

/**
 * `node <entry>` (the session's build's dist/server.js unless named), with the shipped V8 flags,
 * on the session's database with its token, on a free loopback port; `env` adds to that.
 * Resolves once it answers /readyz 200.
 */
export async function startService(
  session: Session,
  name: string,
  env: Record<string, string>,
  entry = join(session.root, 'dist', 'server.js'),
): Promise<Service> {
  const logFile = join(session.work, `${name}.log`);
  const log = openSync(logFile, 'w');
  const child = spawn(process.execPath, [entry], {
    cwd: session.root,
    env: {
      PATH: process.env.PATH ?? '',
      NODE_OPTIONS: shippedNodeOptions,
      DATABASE_URL: session.databaseUrl,
      API_TOKENS: session.token,
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'info',
      SHUTDOWN_DELAY_MS: '0',
      ...env,
    },
    // The request log goes to a file, which the kernel drains, not the load generator.
    stdio: ['ignore', log, 'inherit'],
  });
  closeSync(log);
  running.add(child);
  const exit = once(child, 'exit').then(([code, signal]) => {
    running.delete(child);
    return (code as number | null) ?? (signal as string);
  });
  const service: Service = {
    pid: child.pid ?? 0,
    baseUrl: '',
    logFile,
    exited: () => child.exitCode !== null || child.signalCode !== null,
    async stop() {
      if (!service.exited()) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      const how = await exit;
      clearTimeout(timer);
      return how;
    },
  };
  for (const deadline = Date.now() + 30_000; Date.now() < deadline && !service.exited(); ) {
    const url = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(
      readFileSync(logFile, 'utf8'),
    );
    const ready =
      url?.[1] &&
      (await fetch(`${url[1]}/readyz`).then(
        (r) => r.ok,
        () => false,
      ));
    if (url?.[1] && ready) return { ...service, baseUrl: url[1] };
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await service.stop();
  throw new Error(`${name} did not start: ${readFileSync(logFile, 'utf8').slice(-2000)}`);
}

/** What the receiver got: every request, by behaviour, and per plant id its first and count. */
export interface Received {
  requests: number;
  byBehaviour: Record<string, number>;
  arrivals: [string, number, number][];
}

/** receiver.ts in a process of its own, asked over IPC. */
export async function startReceiver() {
  const child = fork(join(benchFolder, 'receiver.js'), [], { stdio: 'inherit' });
  const [{ port }] = (await once(child, 'message')) as [{ port: number }];
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid ?? 0,
    async ask(message: 'count' | 'report' | { behaviours: string[]; slowMs: number }) {
      const answer = once(child, 'message');
      child.send(message);
      return (await answer)[0] as Received;
    },
    stop: () => child.kill(),
  };
}
export type Receiver = Awaited<ReturnType<typeof startReceiver>>;

/** Cores' worth of CPU each used while measured: 1.0 is one core busy all the time. */
export interface CpuUse {
  service?: number;
  postgres?: number;
  machine?: number;
  others: Record<string, number>;
}

/**
 * PostgreSQL's processes together (postmaster, background processes and backends, those that
 * exited included), without the client backends of other databases that lived through.
 */
async function postgresCpu(session: Session) {
  if (session.postmaster === undefined) return undefined;
  const { rows } = await session.admin.query<{ pid: number }>(
    `select pid from pg_stat_activity
      where backend_type = 'client backend' and datname is distinct from $1`,
    [session.database],
  );
  const tree: TreeCpu | undefined = treeCpu(session.postmaster);
  return tree && { tree, others: new Set(rows.map((row) => row.pid)) };
}

/** Runs `load`, measuring the CPU of the service, of PostgreSQL, of the machine, of `others`. */
export async function measure<R>(
  session: Session,
  service: number | undefined,
  others: Record<string, number>,
  load: () => Promise<R>,
): Promise<{ result: R; seconds: number; cpu: CpuUse; peakRssBytes?: number }> {
  const pids = { ...others, ...(service !== undefined && { service }) };
  const before = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, cpuSeconds(pid)]));
  const postgresBefore = await postgresCpu(session);
  const machineBefore = machineBusySeconds();
  let peakRssBytes: number | undefined;
  const sample = () => {
    const rss = service === undefined ? undefined : statusBytes(service, 'VmRSS');
    if (rss !== undefined) peakRssBytes = Math.max(peakRssBytes ?? 0, rss);
  };
  const sampler = setInterval(sample, 100);
  const startedAt = performance.now();
  const result = await load().finally(() => clearInterval(sampler));
  const seconds = (performance.now() - startedAt) / 1000;
  sample();
  const machineAfter = machineBusySeconds();
  const postgresAfter = await postgresCpu(session);
  const cpu: CpuUse = { others: {} };
  for (const [name, pid] of Object.entries(pids)) {
    const [from, to] = [before[name], cpuSeconds(pid)];
    if (from === undefined || to === undefined) continue;
    if (name === 'service') cpu.service = (to - from) / seconds;
    else cpu.others[name] = (to - from) / seconds;
  }
  if (machineBefore !== undefined && machineAfter !== undefined) {
    cpu.machine = (machineAfter - machineBefore) / seconds;
  }
  if (postgresBefore && postgresAfter) {
    const lived = [...postgresBefore.others].filter((pid) => postgresAfter.others.has(pid));
    cpu.postgres =
      treeCpuBetween(postgresBefore.tree, postgresAfter.tree, new Set(lived)) / seconds;
  }
  return { result, seconds, cpu, ...(peakRssBytes !== undefined && { peakRssBytes }) };
}

export const fixed = (value: number | null | undefined, digits: number) =>
  value === null || value === undefined || !Number.isFinite(value) ? '-' : value.toFixed(digits);

export const mebibytes = (bytes: number | undefined) =>
  bytes === undefined ? '-' : (bytes / 1024 / 1024).toFixed(1);

export function markdownTable(header: string[], rows: string[][]): string {
  return [
    `| ${header.join(' | ')} |`,
    `|${header.map((_, column) => (column === 0 ? '---' : '---:')).join('|')}|`,
    ...rows.map((row) => `| ${row.join(' | ')} |`),
  ].join('\n');
}
