import type { TestProject } from 'vitest/node';
import { type Cluster, createCluster, destroyCluster } from '../helpers/cluster.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The throwaway PostgreSQL cluster the fault tests may stop, crash and restart. */
    cluster: Cluster;
  }
}

/**
 * Creates the cluster the fault tests own, and removes it afterwards: in the teardown vitest
 * calls when the run ends (whether tests failed or not), and, should vitest end without it
 * (an interrupt), when this process exits.
 */
export default async function setup(project: TestProject) {
  const cluster = await createCluster();
  let destroyed = false;
  const destroy = () => {
    if (destroyed) return;
    destroyed = true;
    destroyCluster(cluster);
  };
  process.once('exit', destroy);
  project.provide('cluster', cluster);
  return destroy;
}
