import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findOnPath, findPostgresBinaries, queryUrl, userIds } from './cluster.js';
import { requireHaproxy } from './haproxy.js';
import { freePort, type RunningProcess, run } from './process.js';

/** One node: Patroni and the PostgreSQL server it runs. */
export interface PatroniNode {
  name: string;
  /** PostgreSQL's own port on 127.0.0.1: this node, whatever its role. */
  pgPort: number;
  /** Patroni's REST API. */
  restPort: number;
  dataDir: string;
  process: RunningProcess;
}

/** A member as Patroni's GET /cluster lists it. */
export interface Member {
  name: string;
  /** leader, sync_standby or replica. */
  role: string;
  /** running once its PostgreSQL serves. */
  state: string;
}

/**
 * PostgreSQL run by Patroni (Debian's package) as production runs it: three nodes, one etcd as
 * the DCS, synchronous mode, and HAProxy in TCP mode in front that leads to whichever node
 * answers Patroni's GET /primary with 200. Everything lives in one temporary directory.
 */
export interface PatroniCluster {
  nodes: PatroniNode[];
  /** HAProxy's port: the leader's PostgreSQL, or nothing while there is none. */
  port: number;
  /** `database` through HAProxy. */
  url(database: string): string;
  /** `database` on `node` itself. */
  nodeUrl(node: PatroniNode, database: string): string;
  /** Patroni's view, from the first node whose REST API answers. */
  members(): Promise<Member[]>;
  /**
   * The leader, once Patroni has one (other than `except`) that HAProxy leads to, and with
   * `syncStandby` a synchronous standby too; rejects after `withinMs`.
   */
  waitForLeader(options: {
    except?: string;
    syncStandby?: boolean;
    withinMs: number;
  }): Promise<PatroniNode>;
  /** `count` replicas whose PostgreSQL runs, once there are; rejects after `withinMs`. */
  runningReplicas(count: number, withinMs: number): Promise<PatroniNode[]>;
  /** The leader, once it has a synchronous standby and every node runs. */
  settled(withinMs: number): Promise<PatroniNode>;
  /** Resolves once every other node has replayed what `leader` had written when it was called. */
  replayed(leader: PatroniNode, withinMs: number): Promise<void>;
  /** SIGKILL for Patroni and every process of its PostgreSQL at once: the node dies. */
  kill(node: PatroniNode): void;
  /**
   * HAProxy leads new connections to `node`, a replica, as a proxy with a stale view would; with
   * `dropConnections` it closes those open to the other nodes.
   */
  pin(node: PatroniNode, options: { dropConnections: boolean }): Promise<void>;
  /** New connections go to `leader` again; those open to `pinned` stay as they are. */
  unpinTo(leader: PatroniNode, pinned: PatroniNode): Promise<void>;
  /** Every node back under the health checks, `leader` the only one up. */
  restoreChecks(leader: PatroniNode): Promise<void>;
  /** Connections HAProxy holds open to `node` now. */
  sessions(node: PatroniNode): Promise<number>;
  /** Kills everything and removes the directory; synchronous, so that it can run at exit. */
  stop(): void;
}

const SERVER_USER = 'postgres';
const NODES = 3;
// Patroni 3.0 wants loop_wait + 2 * retry_timeout <= ttl: a leader cut off from etcd demotes
// itself before its key expires. At the bound, a dead leader's key expires within 7 s (Patroni
// 3.1 and later raise a ttl under 20 to 20: the failover then takes longer, not differently).
const TTL_S = 7;
const LOOP_WAIT_S = 1;
const RETRY_TIMEOUT_S = 3;
// HAProxy asks each node's /primary this often; a new leader is up after one answer.
const CHECK_INTERVAL_MS = 500;
const BACKEND = 'leader';
const LEADER_WITHIN_MS = 90_000;

function requireBinary(name: string, debianPackage: string): string {
  const binary = findOnPath(name);
  if (!binary) {
    throw new Error(
      `the failover test needs ${name} (Debian package ${debianPackage}); install it, e.g. apt-get install patroni etcd-server haproxy, and run it again`,
    );
  }
  return binary;
}

/** The process group of the PostgreSQL on `dataDir`: Patroni starts it in a session of its own. */
function postgresGroup(dataDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // After the command's closing parenthesis: state, ppid, pgrp.
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
  } catch {
    return undefined;
  }
}

/** The id of the System V segment the postmaster holds: postmaster.pid's seventh line is key, id. */
function sharedMemoryId(dataDir: string): string | undefined {
  try {
    const line = readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[6] ?? '';
    return line.trim().split(/\s+/)[1];
  } catch {
    return undefined;
  }
}

function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {}
}

/** Patroni first, so that nothing is left to start its PostgreSQL again. */
function killNode(node: PatroniNode): void {
  const group = postgresGroup(node.dataDir);
  const segment = sharedMemoryId(node.dataDir);
  killGroup(node.process.child.pid);
  if (group === undefined) return;
  killGroup(group);
  // A postmaster killed leaves its segment behind; marked for removal, it goes with its last user.
  if (segment !== undefined) spawnSync('ipcrm', ['-m', segment], { stdio: 'ignore' });
}

interface NodeSettings {
  scope: string;
  name: string;
  nodeDir: string;
  dataDir: string;
  pgPort: number;
  restPort: number;
  etcdPort: number;
  binDir: string;
}

/** A node's Patroni configuration; JSON is YAML, which Patroni reads. */
function patroniConfig(node: NodeSettings): string {
  return JSON.stringify({
    scope: node.scope,
    namespace: '/plant-store/',
    name: node.name,
    log: { level: 'WARNING' },
    restapi: {
      listen: `127.0.0.1:${node.restPort}`,
      connect_address: `127.0.0.1:${node.restPort}`,
    },
    etcd3: { hosts: [`127.0.0.1:${node.etcdPort}`] },
    bootstrap: {
      dcs: {
        ttl: TTL_S,
        loop_wait: LOOP_WAIT_S,
        retry_timeout: RETRY_TIMEOUT_S,
        // Only a standby every commit waited for may be promoted: no acknowledged write is lost.
        synchronous_mode: true,
        postgresql: { use_pg_rewind: false, use_slots: true },
      },
      initdb: [{ encoding: 'UTF8' }, { locale: 'C' }],
    },
    postgresql: {
      listen: `127.0.0.1:${node.pgPort}`,
      connect_address: `127.0.0.1:${node.pgPort}`,
      data_dir: node.dataDir,
      bin_dir: node.binDir,
      pgpass: join(node.nodeDir, 'pgpass'),
      authentication: {
        superuser: { username: 'postgres', password: 'postgres' },
        replication: { username: 'replicator', password: 'replicator' },
      },
      pg_hba: [
        'local all all trust',
        'host all all 127.0.0.1/32 trust',
        'host replication all 127.0.0.1/32 trust',
      ],
      basebackup: [{ checkpoint: 'fast' }],
      parameters: {
        unix_socket_directories: node.nodeDir,
        // Its segments under the data directory, so that a node killed leaves none behind.
        dynamic_shared_memory_type: 'mmap',
        // What the test proves is that a 200 survives the leader's death: commits reach disk.
        fsync: 'on',
        synchronous_commit: 'on',
      },
    },
  });
}

function haproxyConfig(port: number, socketPath: string, nodes: PatroniNode[]): string {
  return [
    'global',
    `  stats socket ${socketPath} level admin`,
    'defaults',
    '  mode tcp',
    '  timeout connect 2s',
    // Longer than the service keeps an idle connection (30 s).
    '  timeout client 5m',
    '  timeout server 5m',
    '  timeout check 2s',
    'frontend postgres',
    `  bind 127.0.0.1:${port}`,
    `  default_backend ${BACKEND}`,
    `backend ${BACKEND}`,
    // Patroni answers 200 on /primary only on the node that holds the leader key.
    '  option httpchk GET /primary',
    '  http-check expect status 200',
    // A node that stops being the leader loses its sessions, as a demoted primary would.
    `  default-server inter ${CHECK_INTERVAL_MS} fall 2 rise 1 on-marked-down shutdown-sessions`,
    ...nodes.map(
      ({ name, pgPort, restPort }) => `  server ${name} 127.0.0.1:${pgPort} check port ${restPort}`,
    ),
    '',
  ].join('\n');
}

/** One line (commands separated by ';') on HAProxy's admin socket; its answer. */
function adminCommand(socketPath: string, line: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createConnection(socketPath);
    let answer = '';
    socket.setTimeout(5000, () => socket.destroy(new Error(`HAProxy did not answer ${line}`)));
    socket.on('connect', () => socket.end(`${line}\n`));
    socket.on('data', (chunk) => {
      answer += chunk.toString('utf8');
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(answer));
  });
}

async function pollUntil<T>(
  withinMs: number,
  attempt: () => Promise<T | undefined>,
  failure: () => string,
): Promise<T> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const found = await attempt();
    if (found !== undefined) return found;
    if (Date.now() > deadline) throw new Error(failure());
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Starts etcd, three Patroni nodes and HAProxy; resolves once HAProxy leads to a leader, while
 * the replicas may still be copying it (see `runningReplicas` and `settled`).
 */
export async function startPatroniCluster(): Promise<PatroniCluster> {
  const patroni = requireBinary('patroni', 'patroni');
  const etcdBinary = requireBinary('etcd', 'etcd-server');
  const haproxy = requireHaproxy();
  const binDir = findPostgresBinaries();
  // PostgreSQL refuses to run as root, and Patroni runs it as the user Patroni runs as.
  const owner = process.getuid?.() === 0 ? userIds(SERVER_USER) : undefined;
  const dir = mkdtempSync(join(tmpdir(), 'plant-store-patroni-'));
  const hand = (path: string) => {
    if (owner) chownSync(path, owner.uid, owner.gid);
  };
  hand(dir);
  const nodes: PatroniNode[] = [];
  const killed = new Set<string>();
  let etcd: RunningProcess | undefined;
  let balancer: RunningProcess | undefined;
  let stopped = false;

  function stop(): void {
    if (stopped) return;
    stopped = true;
    for (const node of nodes) if (!killed.has(node.name)) killNode(node);
    etcd?.child.kill('SIGKILL');
    balancer?.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
  process.once('exit', stop);

  try {
    const etcdPort = await freePort();
    const peerUrl = `http://127.0.0.1:${await freePort()}`;
    etcd = run(
      etcdBinary,
      [
        '--name=dcs',
        `--data-dir=${join(dir, 'etcd')}`,
        `--listen-client-urls=http://127.0.0.1:${etcdPort}`,
        `--advertise-client-urls=http://127.0.0.1:${etcdPort}`,
        `--listen-peer-urls=${peerUrl}`,
        `--initial-advertise-peer-urls=${peerUrl}`,
        `--initial-cluster=dcs=${peerUrl}`,
        '--log-level=warn',
      ],
      {},
      { cwd: dir },
    );
    const scope = `plant-store-${randomBytes(4).toString('hex')}`;
    for (let index = 1; index <= NODES; index++) {
      const name = `node${index}`;
      const nodeDir = join(dir, name);
      mkdirSync(nodeDir);
      hand(nodeDir);
      const settings: NodeSettings = {
        scope,
        name,
        nodeDir,
        dataDir: join(nodeDir, 'data'),
        pgPort: await freePort(),
        restPort: await freePort(),
        etcdPort,
        binDir,
      };
      const configFile = join(nodeDir, 'patroni.yml');
      writeFileSync(configFile, patroniConfig(settings));
      hand(configFile);
      // A process group of its own, which `kill` ends with whatever Patroni runs (initdb, copies).
      const running = run(
        patroni,
        [configFile],
        { HOME: nodeDir, LC_ALL: 'C.UTF-8' },
        { cwd: nodeDir, user: owner, detached: true },
      );
      nodes.push({ ...settings, process: running });
    }

    const port = await freePort();
    const socketPath = join(dir, 'haproxy.sock');
    writeFileSync(join(dir, 'haproxy.cfg'), haproxyConfig(port, socketPath, nodes));
    balancer = run(haproxy, ['-db', '-f', join(dir, 'haproxy.cfg')], {}, { cwd: dir });

    /** HAProxy's view of each node: UP, DOWN, MAINT..., and its open connections. */
    async function servers(): Promise<Map<string, { status: string; sessions: number }>> {
      const [header = '', ...rows] = (await adminCommand(socketPath, 'show stat')).split('\n');
      const columns = header.replace(/^# /, '').split(',');
      const found = new Map<string, { status: string; sessions: number }>();
      for (const [proxy, server = '', ...rest] of rows.map((line) => line.split(','))) {
        if (proxy !== BACKEND || !nodes.some(({ name }) => name === server)) continue;
        const field = (name: string) => rest[columns.indexOf(name) - 2] ?? '';
        found.set(server, { status: field('status'), sessions: Number(field('scur')) });
      }
      return found;
    }

    async function runtime(commands: string[]): Promise<void> {
      const answer = await adminCommand(socketPath, commands.join('; '));
      if (answer.trim() !== '')
        throw new Error(`HAProxy refused ${commands.join('; ')}: ${answer}`);
    }

    async function members(): Promise<Member[]> {
      let lastError: unknown;
      for (const node of nodes) {
        if (killed.has(node.name)) continue;
        try {
          const response = await fetch(`http://127.0.0.1:${node.restPort}/cluster`, {
            signal: AbortSignal.timeout(2000),
          });
          return ((await response.json()) as { members?: Member[] }).members ?? [];
        } catch (error) {
          lastError = error;
        }
      }
      throw new Error(`no Patroni node answered GET /cluster: ${String(lastError)}`);
    }

    /** Patroni's view; throws when a node that was not killed has exited. */
    async function view(): Promise<Member[]> {
      for (const { name, process } of nodes) {
        const exited = process.child.exitCode ?? process.child.signalCode;
        if (exited !== null && !killed.has(name)) {
          const output = [...process.stderr, ...process.stdout].slice(-30).join('\n');
          throw new Error(`Patroni ${name} exited (${exited}):\n${output}`);
        }
      }
      return members().catch(() => []);
    }

    const cluster: PatroniCluster = {
      nodes,
      port,
      url: (database) => `postgres://postgres@127.0.0.1:${port}/${database}`,
      nodeUrl: (node, database) => `postgres://postgres@127.0.0.1:${node.pgPort}/${database}`,
      members,
      async waitForLeader({ except, syncStandby = false, withinMs }) {
        let last: Member[] = [];
        return pollUntil(
          withinMs,
          async () => {
            last = await view();
            const running = last.filter(({ state }) => state === 'running');
            const leader = running.find(({ name, role }) => role === 'leader' && name !== except);
            const node = nodes.find(({ name }) => name === leader?.name);
            if (!node || (syncStandby && !running.some(({ role }) => role === 'sync_standby'))) {
              return undefined;
            }
            return (await servers()).get(node.name)?.status === 'UP' ? node : undefined;
          },
          () =>
            `Patroni had no leader behind HAProxy within ${withinMs} ms: ${JSON.stringify(last)}`,
        );
      },
      async runningReplicas(count, withinMs) {
        let last: Member[] = [];
        return pollUntil(
          withinMs,
          async () => {
            last = await view();
            const replicas = last
              .filter(({ role, state }) => role !== 'leader' && state === 'running')
              .flatMap(({ name }) => nodes.filter((node) => node.name === name));
            return replicas.length >= count ? replicas : undefined;
          },
          () => `fewer than ${count} replicas ran within ${withinMs} ms: ${JSON.stringify(last)}`,
        );
      },
      async settled(withinMs) {
        const leader = await cluster.waitForLeader({ syncStandby: true, withinMs });
        await cluster.runningReplicas(nodes.length - killed.size - 1, withinMs);
        return leader;
      },
      async replayed(leader, withinMs) {
        const [written] = await queryUrl<{ lsn: string }>(
          cluster.nodeUrl(leader, 'postgres'),
          'select pg_current_wal_lsn()::text as lsn',
        );
        for (const node of nodes.filter((node) => node !== leader && !killed.has(node.name))) {
          await pollUntil(
            withinMs,
            async () => {
              const [row] = await queryUrl<{ done: boolean }>(
                cluster.nodeUrl(node, 'postgres'),
                'select pg_last_wal_replay_lsn() >= $1::pg_lsn as done',
                [written?.lsn],
              );
              return row?.done ? true : undefined;
            },
            () => `${node.name} did not replay ${written?.lsn} within ${withinMs} ms`,
          );
        }
      },
      kill(node) {
        killed.add(node.name);
        killNode(node);
      },
      async pin(node, { dropConnections }) {
        const others = nodes.filter(({ name }) => name !== node.name);
        // Unchecked and forced up, a server takes connections whatever Patroni answers.
        await runtime([
          `disable health ${BACKEND}/${node.name}`,
          `set server ${BACKEND}/${node.name} health up`,
          ...others.map(({ name }) => `set server ${BACKEND}/${name} state maint`),
          ...(dropConnections
            ? others.map(({ name }) => `shutdown sessions server ${BACKEND}/${name}`)
            : []),
        ]);
      },
      async unpinTo(leader, pinned) {
        // Out of maintenance a server is up at once; the leader passes its next check anyway.
        await runtime([
          `set server ${BACKEND}/${leader.name} state ready`,
          `set server ${BACKEND}/${pinned.name} state maint`,
        ]);
      },
      async restoreChecks(leader) {
        // Forced down as they leave maintenance, replicas never take a connection on the way.
        await runtime(
          nodes
            .filter(({ name }) => name !== leader.name)
            .flatMap(({ name }) => [
              `enable health ${BACKEND}/${name}`,
              `set server ${BACKEND}/${name} state ready`,
              `set server ${BACKEND}/${name} health down`,
            ]),
        );
        const up = [...(await servers())].filter(([, { status }]) => status === 'UP');
        if (up.length !== 1 || up[0]?.[0] !== leader.name) {
          throw new Error(`HAProxy's view is not ${leader.name} alone: ${JSON.stringify(up)}`);
        }
      },
      async sessions(node) {
        return (await servers()).get(node.name)?.sessions ?? 0;
      },
      stop,
    };
    await cluster.waitForLeader({ withinMs: LEADER_WITHIN_MS });
    return cluster;
  } catch (error) {
    const logs = nodes.map(
      ({ name, process }) =>
        `${name}:\n${[...process.stderr, ...process.stdout].slice(-20).join('\n')}`,
    );
    stop();
    throw new Error(
      `${(error as Error).message}\n${logs.join('\n')}\netcd:\n${etcd?.stderr.slice(-10).join('\n')}`,
    );
  }
}

/** A new, empty database on the leader (through HAProxy); its name. */
export async function createPatroniDatabase(cluster: PatroniCluster): Promise<string> {
  const name = `plant_store_failover_${randomBytes(6).toString('hex')}`;
  await queryUrl(cluster.url('postgres'), `create database ${name}`);
  return name;
}
