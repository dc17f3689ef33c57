import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  type Cluster,
  createCluster,
  createStandby,
  destroyCluster,
  queryUrl,
} from '../test/helpers/cluster.js';
import { type TreeCpu, treeCpu, treeCpuBetween } from './proc.js';

// The replicas suite's own servers: a primary made with initdb and two hot standbys of it made
// with pg_basebackup, streaming asynchronously with no apply delay, each in a temporary directory
// on a port of its own (as the fault and scale tests make theirs, run as `postgres` under root).

export interface Topology {
  primary: Cluster;
  standbys: Cluster[];
}

const STANDBYS = 2;

/** Resolves once the primary has `count` standbys streaming from it. */
async function waitForStreaming(primary: Cluster, count: number): Promise<void> {
  for (const deadline = Date.now() + 60_000; ; ) {
    const [row] = await queryUrl<{ n: number }>(
      primary.url,
      "select count(*)::int as n from pg_stat_replication where state = 'streaming'",
    );
    if ((row?.n ?? 0) >= count) return;
    if (Date.now() > deadline) throw new Error(`${row?.n ?? 0} of ${count} standbys stream`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Makes and starts the primary and its standbys; `made` learns of each server as it starts. */
export async function createTopology(made: (topology: Topology) => void): Promise<Topology> {
  const topology: Topology = { primary: await createCluster(), standbys: [] };
  made(topology);
  for (let i = 0; i < STANDBYS; i++) topology.standbys.push(await createStandby(topology.primary));
  await waitForStreaming(topology.primary, STANDBYS);
  return topology;
}

/** Stops every server at once and removes its directory, standbys first. */
export function destroyTopology(topology: Topology): void {
  for (const cluster of [...topology.standbys, topology.primary]) destroyCluster(cluster);
}

/** `url` with the database on `cluster` instead of its own. */
export function urlOn(cluster: Cluster, url: string): string {
  const moved = new URL(url);
  moved.port = String(cluster.port);
  return moved.toString();
}

/** The postmaster's pid, from the first line of postmaster.pid. */
const postmasterOf = (cluster: Cluster) =>
  Number(readFileSync(join(cluster.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);

/** CPU seconds each server's processes have used so far, every one of them, backends included. */
export interface ServersCpu {
  primary: TreeCpu | undefined;
  standbys: Array<TreeCpu | undefined>;
}

export const readServersCpu = (topology: Topology): ServersCpu => ({
  primary: treeCpu(postmasterOf(topology.primary)),
  standbys: topology.standbys.map((standby) => treeCpu(postmasterOf(standby))),
});

/** CPU seconds the primary, and the standbys together, used between two readings. */
export function serversCpuBetween(
  before: ServersCpu,
  after: ServersCpu,
): { primary?: number; standbys?: number } {
  const between = (from: TreeCpu | undefined, to: TreeCpu | undefined) =>
    from && to ? treeCpuBetween(from, to, new Set()) : undefined;
  const each = before.standbys.map((from, index) => between(from, after.standbys[index]));
  const primary = between(before.primary, after.primary);
  return {
    ...(primary !== undefined && { primary }),
    ...(each.every((seconds) => seconds !== undefined) && {
      standbys: each.reduce((sum: number, seconds) => sum + (seconds ?? 0), 0),
    }),
  };
}
