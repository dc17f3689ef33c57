import type { TestProject } from 'vitest/node';
import { type Cluster, createCluster, destroyCluster } from '../helpers/cluster.js';
import {
  type PgBouncerAddress,
  type RunningPgBouncer,
  startPgBouncer,
} from '../helpers/pgbouncer.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The throwaway PostgreSQL cluster the scale tests may restart. */
    cluster: Cluster;
    /** PgBouncer in transaction mode in front of every database of the cluster. */
    pgbouncer: PgBouncerAddress;
  }
}

/**
 * Creates the cluster and PgBouncer in front of it, and removes both afterwards: in the
 * teardown vitest calls when the run ends, and, should vitest end without it, at exit.
 */
export default async function setup(project: TestProject) {
  const cluster = await createCluster();
  let pgbouncer: RunningPgBouncer | undefined;
  let destroyed = false;
  const destroy = () => {
    if (destroyed) return;
    destroyed = true;
    pgbouncer?.process.child.kill('SIGKILL');
    destroyCluster(cluster);
  };
  process.once('exit', destroy);
  try {
    pgbouncer = await startPgBouncer(cluster);
  } catch (error) {
    destroy();
    throw error;
  }
  project.provide('cluster', cluster);
  project.provide('pgbouncer', { port: pgbouncer.port, logFile: pgbouncer.logFile });
  return destroy;
}
