import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  accessSync,
  appendFileSync,
  chownSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, delimiter, dirname, join } from 'node:path';
import pg from 'pg';
import { freePort, run } from './process.js';

/**
 * A throwaway PostgreSQL cluster that the fault tests own: made with initdb in a temporary
 * directory, on a port and a socket directory of its own, so it can be stopped, crashed and
 * restarted without touching any other server. Plain data, so vitest can hand it to workers.
 */
export interface Cluster {
  /** Where initdb, pg_ctl and postgres are. */
  binDir: string;
  /** The temporary directory that holds everything below; removed at the end. */
  dir: string;
  dataDir: string;
  socketDir: string;
  /** The server's log (pg_ctl -l). */
  logFile: string;
  port: number;
  /** The user the server runs as when this process is root (PostgreSQL refuses to run as root). */
  runAs: string | undefined;
  /** The cluster's `postgres` database. */
  url: string;
}

const SERVER_USER = 'postgres';
// pg_ctl waits at most this long for a start or a stop; the commands themselves get a little more.
const PG_CTL_WAIT_SECONDS = 60;

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The directory of initdb, pg_ctl and postgres: the first one on PATH (through its symlinks, since
 * pg_ctl looks for postgres beside itself), otherwise the newest /usr/lib/postgresql/<version>/bin.
 */
export function findPostgresBinaries(): string {
  const candidates: string[] = [];
  for (const entry of (process.env.PATH ?? '').split(delimiter)) {
    const initdb = join(entry, 'initdb');
    if (entry.startsWith('/') && isExecutable(initdb))
      candidates.push(dirname(realpathSync(initdb)));
  }
  const debian = '/usr/lib/postgresql';
  if (existsSync(debian)) {
    const versions = readdirSync(debian).sort((a, b) => Number(b) - Number(a));
    candidates.push(...versions.map((version) => join(debian, version, 'bin')));
  }
  const found = candidates.find((dir) =>
    ['initdb', 'pg_ctl', 'postgres'].every((binary) => isExecutable(join(dir, binary))),
  );
  if (!found) {
    throw new Error(
      'npm run test:faults needs the PostgreSQL server binaries initdb, pg_ctl and postgres, to run a throwaway cluster of its own: none were found on PATH or under /usr/lib/postgresql/<version>/bin. Install PostgreSQL (e.g. apt-get install postgresql) and run it again.',
    );
  }
  return found;
}

/** The executable `binary` on PATH, or in /usr/sbin or /sbin where Debian puts daemons. */
export function findOnPath(binary: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/sbin'];
  return dirs
    .filter((dir) => dir.startsWith('/'))
    .map((dir) => join(dir, binary))
    .find(isExecutable);
}

/** The numeric ids of `user`, to hand it files. */
export function userIds(user: string): { uid: number; gid: number } {
  const uid = spawnSync('id', ['-u', user], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', user], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) {
    throw new Error(
      `these tests run as root, and PostgreSQL and PgBouncer refuse to run as root: they run them as the user "${user}", which does not exist here`,
    );
  }
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** The command line that runs `file` as the cluster's owner: through runuser when we are root. */
function asOwner(runAs: string | undefined, file: string, args: string[]): [string, string[]] {
  if (runAs === undefined) return [file, args];
  const runuser = findOnPath('runuser');
  if (!runuser) throw new Error('running as root needs runuser (util-linux) to start PostgreSQL');
  return [runuser, ['-u', runAs, '--', file, ...args]];
}

function logTail(cluster: Pick<Cluster, 'logFile'>): string {
  try {
    return readFileSync(cluster.logFile, 'utf8').split('\n').slice(-20).join('\n');
  } catch {
    return '(no server log)';
  }
}

/** Runs one of the server binaries as the cluster's owner; rejects with its output on failure. */
async function runBinary(
  cluster: Pick<Cluster, 'binDir' | 'dir' | 'runAs' | 'logFile'>,
  binary: string,
  args: string[],
  { allowExit = [0] }: { allowExit?: number[] } = {},
): Promise<number> {
  const [command, commandArgs] = asOwner(cluster.runAs, join(cluster.binDir, binary), args);
  const child = run(command, commandArgs, { LC_ALL: 'C' }, { cwd: cluster.dir });
  const timer = setTimeout(() => child.child.kill('SIGKILL'), (PG_CTL_WAIT_SECONDS + 30) * 1000);
  const code = await child.exited.finally(() => clearTimeout(timer));
  if (typeof code !== 'number' || !allowExit.includes(code)) {
    const output = [...child.stderr, ...child.stdout].filter((line) => line !== '').join('\n');
    throw new Error(
      `${basename(binary)} ${args.join(' ')} failed (${code}):\n${output}\nserver log:\n${logTail(cluster)}`,
    );
  }
  return code;
}

// Appended to postgresql.conf: a server of its own on 127.0.0.1, with durability as in production.
function settings(port: number, socketDir: string): string {
  return [
    '',
    '# plant-store fault tests',
    "listen_addresses = '127.0.0.1'",
    `port = ${port}`,
    `unix_socket_directories = '${socketDir}'`,
    // What the tests prove is that a 200 survives crashes: commits must reach the disk.
    'fsync = on',
    'synchronous_commit = on',
    'full_page_writes = on',
    // A base backup streams WAL from its start on a connection of its own: a checkpoint in
    // between (another backup's, a promotion's) must not recycle it; nor a stopped standby's.
    "wal_keep_size = '64MB'",
    '',
  ].join('\n');
}

/** Makes, configures and starts a new cluster in a temporary directory. */
export async function createCluster(): Promise<Cluster> {
  const binDir = findPostgresBinaries();
  const runAs = process.getuid?.() === 0 ? SERVER_USER : undefined;
  const dir = mkdtempSync(join(tmpdir(), 'plant-store-faults-'));
  const cluster: Cluster = {
    binDir,
    dir,
    dataDir: join(dir, 'data'),
    socketDir: join(dir, 'socket'),
    logFile: join(dir, 'postgres.log'),
    port: 0,
    runAs,
    url: '',
  };
  try {
    mkdirSync(cluster.socketDir);
    if (runAs !== undefined) {
      const { uid, gid } = userIds(runAs);
      chownSync(dir, uid, gid);
      chownSync(cluster.socketDir, uid, gid);
    }
    await runBinary(cluster, 'initdb', [
      '--pgdata',
      cluster.dataDir,
      '--auth=trust',
      '--username=postgres',
      '--encoding=UTF8',
      '--locale=C',
    ]);
    cluster.port = await freePort();
    cluster.url = `postgres://postgres@127.0.0.1:${cluster.port}/postgres`;
    appendFileSync(
      join(cluster.dataDir, 'postgresql.conf'),
      settings(cluster.port, cluster.socketDir),
    );
    await startCluster(cluster);
    return cluster;
  } catch (error) {
    destroyCluster(cluster);
    throw error;
  }
}

/** Stops the cluster at once if it runs and removes its directory. Synchronous, for exit hooks. */
export function destroyCluster(cluster: Cluster): void {
  if (existsSync(join(cluster.dataDir, 'postmaster.pid'))) {
    const [command, args] = asOwner(cluster.runAs, join(cluster.binDir, 'pg_ctl'), [
      'stop',
      '--pgdata',
      cluster.dataDir,
      '--mode=immediate',
      '--wait',
      `--timeout=${PG_CTL_WAIT_SECONDS}`,
    ]);
    spawnSync(command, args, { cwd: cluster.dir, stdio: 'ignore', timeout: 90_000 });
  }
  rmSync(cluster.dir, { recursive: true, force: true });
}

export async function startCluster(cluster: Cluster): Promise<void> {
  await runBinary(cluster, 'pg_ctl', [
    'start',
    '--pgdata',
    cluster.dataDir,
    '--log',
    cluster.logFile,
    '--wait',
    `--timeout=${PG_CTL_WAIT_SECONDS}`,
  ]);
}

/**
 * `fast` disconnects every session and shuts down cleanly; `immediate` kills the server without a
 * checkpoint, as a crash does, so the next start replays the WAL.
 */
export type StopMode = 'fast' | 'immediate';

export async function stopCluster(cluster: Cluster, mode: StopMode): Promise<void> {
  await runBinary(cluster, 'pg_ctl', [
    'stop',
    '--pgdata',
    cluster.dataDir,
    `--mode=${mode}`,
    '--wait',
    `--timeout=${PG_CTL_WAIT_SECONDS}`,
  ]);
}

export async function restartCluster(cluster: Cluster, mode: StopMode): Promise<void> {
  await runBinary(cluster, 'pg_ctl', [
    'restart',
    '--pgdata',
    cluster.dataDir,
    '--log',
    cluster.logFile,
    `--mode=${mode}`,
    '--wait',
    `--timeout=${PG_CTL_WAIT_SECONDS}`,
  ]);
}

/** Starts the cluster unless it runs: a test that stopped it and failed must not break the next. */
export async function ensureClusterRunning(cluster: Cluster): Promise<void> {
  const status = await runBinary(cluster, 'pg_ctl', ['status', '--pgdata', cluster.dataDir], {
    allowExit: [0, 3],
  });
  if (status !== 0) await startCluster(cluster);
}

function withDatabase(url: string, name: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${name}`;
  return parsed.toString();
}

export async function queryUrl<T extends Record<string, unknown>>(
  url: string,
  text: string,
  values?: unknown[],
): Promise<T[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    return (await client.query<T>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/** A new, empty database on the cluster; its connection string. */
export async function createClusterDatabase(cluster: Cluster): Promise<string> {
  const name = `plant_store_faults_${randomBytes(6).toString('hex')}`;
  await queryUrl(cluster.url, `create database ${name}`);
  return withDatabase(cluster.url, name);
}

export interface StandbyOptions {
  /**
   * The name it streams under (its application_name, as pg_stat_replication and
   * synchronous_standby_names see it). Nothing here names one in synchronous_standby_names, so
   * every standby is asynchronous: a stopped one holds up no commit on the primary.
   */
  name?: string;
}

/**
 * A hot standby of `primary`, made with pg_basebackup (-R: it follows the primary by streaming
 * replication) in a temporary directory of its own, on its own port, and started.
 */
export async function createStandby(
  primary: Cluster,
  { name = 'standby' }: StandbyOptions = {},
): Promise<Cluster> {
  const dir = mkdtempSync(join(tmpdir(), 'plant-store-standby-'));
  const standby: Cluster = {
    ...primary,
    dir,
    dataDir: join(dir, 'data'),
    socketDir: join(dir, 'socket'),
    logFile: join(dir, 'postgres.log'),
    port: await freePort(),
  };
  standby.url = `postgres://postgres@127.0.0.1:${standby.port}/postgres`;
  try {
    mkdirSync(standby.socketDir);
    if (standby.runAs !== undefined) {
      const { uid, gid } = userIds(standby.runAs);
      chownSync(dir, uid, gid);
      chownSync(standby.socketDir, uid, gid);
    }
    await runBinary(standby, 'pg_basebackup', [
      '--pgdata',
      standby.dataDir,
      // -R copies the application_name into primary_conninfo: the standby streams under it.
      `--dbname=host=127.0.0.1 port=${primary.port} user=postgres application_name=${name}`,
      '--write-recovery-conf',
      '--wal-method=stream',
      '--checkpoint=fast',
    ]);
    appendFileSync(
      join(standby.dataDir, 'postgresql.conf'),
      // After its primary restarts, it streams again within 100 ms rather than 5 s.
      `${settings(standby.port, standby.socketDir)}wal_retrieve_retry_interval = '100ms'\n`,
    );
    await startCluster(standby);
    return standby;
  } catch (error) {
    destroyCluster(standby);
    throw error;
  }
}

/**
 * Moves `primary` to the next timeline, as a failover to it would: restarts it as a standby with
 * no primary to follow, then promotes it. Cheaper than a standby of a cluster made only for this.
 */
export async function switchTimeline(primary: Cluster): Promise<void> {
  await stopCluster(primary, 'fast');
  writeFileSync(join(primary.dataDir, 'standby.signal'), '');
  if (primary.runAs !== undefined) {
    const { uid, gid } = userIds(primary.runAs);
    chownSync(join(primary.dataDir, 'standby.signal'), uid, gid);
  }
  await startCluster(primary);
  await runBinary(primary, 'pg_ctl', [
    'promote',
    '--pgdata',
    primary.dataDir,
    '--wait',
    `--timeout=${PG_CTL_WAIT_SECONDS}`,
  ]);
}

/** Resolves once the standby named `name` streams from `primary`, e.g. after it restarted. */
export async function waitForStreaming(primary: Cluster, name: string): Promise<void> {
  const deadline = Date.now() + PG_CTL_WAIT_SECONDS * 1000;
  for (;;) {
    const rows = await queryUrl<{ state: string }>(
      primary.url,
      'select state from pg_stat_replication where application_name = $1',
      [name],
    );
    if (rows.some(({ state }) => state === 'streaming')) return;
    if (Date.now() > deadline) {
      throw new Error(`standby ${name} does not stream from the primary: ${JSON.stringify(rows)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * Makes the running `standby` apply each commit `delay` (a PostgreSQL interval, e.g. '3s') after
 * the primary made it (recovery_min_apply_delay), so that it lags on purpose by that much.
 * It still receives the WAL at once; only the replay waits. '0' ends the delay.
 */
export async function delayReplay(standby: Cluster, delay: string): Promise<void> {
  await queryUrl(standby.url, `alter system set recovery_min_apply_delay = '${delay}'`);
  await queryUrl(standby.url, 'select pg_reload_conf()');
  const deadline = Date.now() + PG_CTL_WAIT_SECONDS * 1000;
  // A reload is signalled, not awaited: the setting shows in new sessions once it has applied.
  for (;;) {
    const [row] = await queryUrl<{ applied: boolean }>(
      standby.url,
      "select current_setting('recovery_min_apply_delay')::interval = $1::interval as applied",
      [delay],
    );
    if (row?.applied) return;
    if (Date.now() > deadline) throw new Error(`recovery_min_apply_delay did not become ${delay}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
