import { randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { Scratch } from './cleanup.js';
import { type BenchOptions, withDatabase } from './options.js';
import { distFolder, projectRoot } from './paths.js';
import {
  type Child,
  type Exit,
  type ProcessTreeCpu,
  readMachineCpuSeconds,
  readParentPid,
  readProcessCpuSeconds,
  readProcessName,
  readProcessTreeCpu,
  runToCompletion,
  sampleResidentMemory,
  spawnChild,
  stopChild,
  tailOf,
  treeCpuBetween,
  waitForListening,
} from './processes.js';

// What every suite shares: its database, the service started as shipped, and the CPU that a
// load costs each process.

export const PLANT_NAME = 'Monstera deliciosa';
export const PLANT_TAG = 'aroid';
const START_TIMEOUT_MS = 30_000;

export const say = (line: string) => process.stdout.write(`${line}\n`);

/** A target that could not be brought up: the harness exits non-zero. */
export class StartError extends Error {
  override name = 'StartError';
}

export interface Session {
  options: BenchOptions;
  admin: pg.Client;
  /** The suite's own database, dropped however the run ends. */
  database: string;
  databaseUrl: string;
  work: string;
  token: string;
  /** What the report should say about how the figures were taken. */
  notes: Set<string>;
  /** The PostgreSQL server's postmaster, when it runs on this machine. */
  postmasterPid: number | undefined;
  postgresVersion: string;
  signal: AbortSignal;
}

/** Ids never repeat: a random 62-bit base per run plus a counter, well inside int64. */
export function plantBodies(): () => string {
  const base = BigInt.asUintN(62, randomBytes(8).readBigUInt64BE());
  let counter = 0n;
  return () => `{"id":${base + counter++},"name":"${PLANT_NAME}","tag":"${PLANT_TAG}"}`;
}

/** The postmaster: the parent of this connection's backend, if /proc shows it here. */
async function findPostmaster(admin: pg.Client): Promise<number | undefined> {
  const { rows } = await admin.query<{ pid: number }>('select pg_backend_pid() as pid');
  const backend = rows[0]?.pid;
  // A server elsewhere has pids of its own: one that matches here must be PostgreSQL's too.
  if (backend === undefined || readProcessName(backend) !== 'postgres') return undefined;
  const parent = readParentPid(backend);
  return parent !== undefined && parent > 1 && readProcessName(parent) === 'postgres'
    ? parent
    : undefined;
}

/** Creates the suite's database (and migrates it with dist/migrate.js when asked). */
export async function openSession(
  options: BenchOptions,
  scratch: Scratch,
  signal: AbortSignal,
  migrate: boolean,
): Promise<Session> {
  scratch.adminUrl = options.databaseUrl;
  const database = `plant_store_bench_${randomBytes(4).toString('hex')}`;
  scratch.database = database;
  const work = mkdtempSync(join(tmpdir(), 'plant-store-bench-'));
  scratch.workFolder = work;
  const admin = new pg.Client({
    connectionString: options.databaseUrl,
    application_name: 'plant-store-bench',
  });
  await admin.connect();
  const version = await admin.query<{ v: string }>(`select current_setting('server_version') v`);
  await admin.query(`create database ${database}`);
  const databaseUrl = withDatabase(options.databaseUrl, database);
  if (migrate) {
    say(`created database ${database}; migrating it with dist/migrate.js`);
    await runToCompletion('migrate', process.execPath, [join(distFolder, 'migrate.js')], {
      cwd: projectRoot,
      env: { PATH: process.env.PATH ?? '', DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' },
    });
  }
  const session: Session = {
    options,
    admin,
    database,
    databaseUrl,
    work,
    token: randomBytes(32).toString('base64url'),
    notes: new Set(),
    postmasterPid: await findPostmaster(admin),
    postgresVersion: version.rows[0]?.v ?? 'unknown',
    signal,
  };
  session.notes.add(
    session.postmasterPid === undefined
      ? 'The PostgreSQL server does not run on this machine (or its processes cannot be read), so its CPU is not measured.'
      : "PostgreSQL's CPU is that of all the server's processes together (postmaster, background processes, every backend, and those that exited during the run), from /proc, without the client backends of other databases that lived through the whole run; connections of other databases that opened and closed during the run are counted, so on a shared server the figure can only be too high.",
  );
  return session;
}

export interface ServiceProcess {
  child: Child;
  baseUrl: string;
  /** Its stdout: the request log. */
  logFile: string;
  errorFile: string;
  /** Stops it (SIGTERM) and removes its log; resolves with how it ended. */
  stop(): Promise<Exit>;
}

/**
 * `node <entry>` (the service as shipped, dist/server.js, unless another entry is given) on the
 * session's database with a fresh token, listening on a free loopback port; `env` adds to or
 * overrides what it gets. Resolves once it answers /readyz 200.
 */
export async function startService(
  session: Session,
  name: string,
  env: Record<string, string> = {},
  entry = join(distFolder, 'server.js'),
): Promise<ServiceProcess> {
  const logFile = join(session.work, `${name}.log`);
  const errorFile = join(session.work, `${name}.stderr`);
  const stdout = openSync(logFile, 'w');
  const stderr = openSync(errorFile, 'w');
  let child: Child;
  try {
    child = spawnChild(name, process.execPath, [entry], {
      cwd: projectRoot,
      // Only what the service needs; everything else at the shipped defaults.
      env: {
        PATH: process.env.PATH ?? '',
        DATABASE_URL: session.databaseUrl,
        API_TOKENS: session.token,
        HOST: '127.0.0.1',
        PORT: '0',
        LOG_LEVEL: 'info',
        // Nothing load-balances here: stop at once.
        SHUTDOWN_DELAY_MS: '0',
        ...env,
      },
      // The request log goes to a file: the kernel drains it, not the load generator's core.
      stdio: ['ignore', stdout, stderr],
    });
  } catch (error) {
    throw new StartError((error as Error).message);
  } finally {
    closeSync(stdout);
    closeSync(stderr);
  }
  const stop = async () => {
    const exit = await stopChild(child);
    rmSync(logFile, { force: true });
    rmSync(errorFile, { force: true });
    return exit;
  };
  try {
    const baseUrl = await waitForListening(child, logFile, errorFile, {
      timeoutMs: START_TIMEOUT_MS,
      signal: session.signal,
    });
    return { child, baseUrl, logFile, errorFile, stop };
  } catch (error) {
    await stop();
    throw new StartError(`${name}: ${(error as Error).message}`);
  }
}

/** The tail of a service's stderr, when it exited during a load. */
export function exitedEarly(service: ServiceProcess): string | undefined {
  return service.child.exit && tailOf(service.errorFile);
}

/** A reading of the PostgreSQL server's CPU, and its client backends of other databases. */
interface PostgresCpuReading {
  tree: ProcessTreeCpu;
  otherDatabases: Set<number>;
}

/**
 * The CPU of every process of the PostgreSQL server so far, when it runs on this machine; the
 * pids of client backends of other databases are noted, so a shared server's other users can be
 * left out.
 */
async function readPostgresCpu(session: Session): Promise<PostgresCpuReading | undefined> {
  if (session.postmasterPid === undefined) return undefined;
  const { rows } = await session.admin.query<{ pid: number }>(
    `select pid from pg_stat_activity
      where backend_type = 'client backend' and datname is distinct from $1`,
    [session.database],
  );
  const tree = readProcessTreeCpu(session.postmasterPid);
  return tree && { tree, otherDatabases: new Set(rows.map((row) => row.pid)) };
}

/** CPU seconds between two readings, without the other databases' backends that lived through. */
function postgresCpuBetween(
  before: PostgresCpuReading | undefined,
  after: PostgresCpuReading | undefined,
): number | undefined {
  if (!before || !after) return undefined;
  const excluded = new Set(
    [...before.otherDatabases].filter((pid) => after.otherDatabases.has(pid)),
  );
  return treeCpuBetween(before.tree, after.tree, excluded);
}

/**
 * A VACUUM ANALYZE of the plants and a CHECKPOINT, so that no run pays for vacuuming or writing
 * out what an earlier one inserted.
 */
export async function checkpoint(session: Session): Promise<void> {
  const bench = new pg.Client({ connectionString: session.databaseUrl });
  await bench.connect();
  try {
    await bench.query('vacuum analyze plants');
  } finally {
    await bench.end();
  }
  try {
    await session.admin.query('checkpoint');
  } catch (error) {
    session.notes.add(
      `CHECKPOINT before each run was not allowed (${(error as Error).message}); runs may include checkpoints of earlier ones.`,
    );
  }
}

export interface CpuUse {
  /** Cores' worth of CPU used during the measurement (1.0 = one core busy all the time). */
  server?: number;
  loadGenerator?: number;
  /** The whole machine: load generator, server, PostgreSQL and anything else running. */
  machine?: number;
  /** Every process of the PostgreSQL server together (when it runs on this machine). */
  postgres?: number;
}

export interface Measured<R> {
  result: R;
  seconds: number;
  cpu: CpuUse;
  /** Cores' worth of CPU of each other process named. */
  others: Record<string, number>;
  /** The largest resident memory of the server sampled every 100 ms. */
  peakRssBytes: number | undefined;
}

/**
 * Runs `load` and measures what it cost: the CPU of the server process, of PostgreSQL, of the
 * machine, of this process (the load generator) and of the `others`, and the server's memory.
 */
export async function measureLoad<R>(
  session: Session,
  server: number | undefined,
  others: Record<string, number>,
  load: () => Promise<R>,
): Promise<Measured<R>> {
  const cpuOf = (pids: Record<string, number>) =>
    Object.fromEntries(
      Object.entries(pids).map(([name, pid]) => [name, readProcessCpuSeconds(pid)]),
    );
  const serverBefore = server === undefined ? undefined : readProcessCpuSeconds(server);
  const othersBefore = cpuOf(others);
  const postgresBefore = await readPostgresCpu(session);
  const machineBefore = readMachineCpuSeconds();
  const ownBefore = process.cpuUsage();
  const startedAt = performance.now();
  const memory = server === undefined ? undefined : sampleResidentMemory(server);
  const result = await load();
  const peakRssBytes = memory?.stop();
  const seconds = (performance.now() - startedAt) / 1000;
  const serverAfter = server === undefined ? undefined : readProcessCpuSeconds(server);
  const othersAfter = cpuOf(others);
  const machineAfter = readMachineCpuSeconds();
  const own = process.cpuUsage(ownBefore);
  const postgresAfter = await readPostgresCpu(session);

  const cpu: CpuUse = { loadGenerator: (own.user + own.system) / 1e6 / seconds };
  if (serverBefore !== undefined && serverAfter !== undefined) {
    cpu.server = (serverAfter - serverBefore) / seconds;
  }
  if (machineBefore && machineAfter)
    cpu.machine = (machineAfter.busy - machineBefore.busy) / seconds;
  const postgresSeconds = postgresCpuBetween(postgresBefore, postgresAfter);
  if (postgresSeconds !== undefined) cpu.postgres = postgresSeconds / seconds;
  const othersUse: Record<string, number> = {};
  for (const name of Object.keys(others)) {
    const before = othersBefore[name];
    const after = othersAfter[name];
    if (before !== undefined && after !== undefined) othersUse[name] = (after - before) / seconds;
  }
  return { result, seconds, cpu, others: othersUse, peakRssBytes };
}
