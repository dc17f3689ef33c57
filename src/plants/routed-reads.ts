import type { BatchHandler, Pending } from '../db/batch-queue.js';
import { classifyDatabaseError } from '../db/errors.js';
import type {
  PrimaryReason,
  ReadRoute,
  Replica,
  ReplicaSet,
  ServerReport,
} from '../db/replicas.js';
import { laterPosition, type WalPosition } from '../db/wal-position.js';
import type { PageRange, PlantPage, ReportingReads } from './queries.js';
import type { StoredPlant } from './schemas.js';

/**
 * What one request has seen, read and then written by the repository: the position its
 * Consistency-Token named when it came (none for a write), then the position its answer
 * covers, at least as late.
 */
export interface Consistency {
  position: WalPosition | undefined;
}

/** Where a read was answered: a replica, or the primary and why. */
export type ReadDestination = 'replica' | PrimaryReason;

/** A read by id, and what its request has seen. */
export interface RoutedRead {
  id: bigint;
  consistency: Consistency;
}

type ByIds = Awaited<ReturnType<ReportingReads['findByIds']>>;

// A failure this quick leaves time to try another replica before the primary.
const QUICK_FAILURE_MS = 250;

export interface RoutedReads {
  byIds: BatchHandler<RoutedRead, StoredPlant | undefined>;
  listPage(range: PageRange, consistency: Consistency): Promise<PlantPage>;
}

/**
 * The reads spread over the replicas (see ReplicaSet): each runs on the server its route names;
 * a replica that fails, restarted or is no longer a standby hands the read to another replica
 * that qualifies, or to the primary.
 */
export function createRoutedReads(
  replicaSet: ReplicaSet,
  reads: { primary: ReportingReads; replicas: readonly ReportingReads[] },
  onRead: (destination: ReadDestination, count: number) => void,
): RoutedReads {
  // A read tries each replica at most once before the primary.
  const attempts = replicaSet.replicas.length;

  /**
   * The read on the route's server: a replica's answer with the position it covers, or
   * undefined when the replica failed or its answer cannot be used (it restarted, or is no
   * longer a standby); then the replica's state is updated, and the read is routed again.
   */
  async function onRoute<T extends { report: ServerReport }>(
    route: ReadRoute,
    afterFault: boolean,
    read: (server: ReportingReads) => Promise<T>,
  ): Promise<{ answer: T; position: WalPosition; destination: ReadDestination } | undefined> {
    if ('replica' in route) {
      const { replica } = route;
      try {
        const answer = await read(reads.replicas[replica.index] as ReportingReads);
        const position = replicaSet.accept(route, answer.report);
        return position === undefined ? undefined : { answer, position, destination: 'replica' };
      } catch (error) {
        replicaSet.failed(replica, error);
        return undefined;
      }
    }
    const answer = await read(reads.primary);
    const position = replicaSet.primaryPosition(answer.report);
    return { answer, position, destination: afterFault ? 'fault' : route.primary };
  }

  /**
   * Where a read goes on its `attempt`th try, begun at `since`: another replica only after a
   * quick failure (refused, cancelled, restarted), so that the primary still has time to answer
   * after a slow one; the last try is the primary's.
   */
  const routeOf = (
    token: WalPosition | undefined,
    attempt: number,
    since: number,
    prefer?: Replica,
  ): ReadRoute =>
    attempt > 0 && (attempt >= attempts || performance.now() - since > QUICK_FAILURE_MS)
      ? { primary: 'fault' }
      : replicaSet.choose(token, prefer);

  async function readByIds(
    batch: Pending<RoutedRead, StoredPlant | undefined>[],
    attempt: number,
    since: number,
  ) {
    // One statement per destination: a batch's reads go where the first went, if they may.
    const groups = new Map<string, { route: ReadRoute; reads: typeof batch }>();
    let prefer: Replica | undefined;
    for (const pending of batch) {
      const route = routeOf(pending.item.consistency.position, attempt, since, prefer);
      if ('replica' in route) prefer ??= route.replica;
      const key = 'replica' in route ? route.replica.name : route.primary;
      const group = groups.get(key) ?? { route, reads: [] };
      group.reads.push(pending);
      groups.set(key, group);
    }
    // Each destination answers its own reads: a primary that cannot be reached fails only the
    // reads that needed it.
    await Promise.all(
      [...groups.values()].map(async ({ route, reads: pendings }) => {
        const ids = [...new Set(pendings.map(({ item }) => item.id))];
        let answered: Awaited<ReturnType<typeof onRoute<ByIds>>>;
        try {
          answered = await onRoute(route, attempt > 0, (server) => server.findByIds(ids));
        } catch (error) {
          const failure = classifyDatabaseError(error);
          for (const { reject } of pendings) reject(failure);
          return;
        }
        if (answered === undefined) return readByIds(pendings, attempt + 1, since);
        onRead(answered.destination, pendings.length);
        for (const { item, resolve } of pendings) {
          item.consistency.position = laterPosition(answered.position, item.consistency.position);
          resolve(answered.answer.found.get(item.id));
        }
      }),
    );
  }

  return {
    byIds: { run: (batch) => readByIds(batch, 0, performance.now()) },
    async listPage(range, consistency) {
      const since = performance.now();
      for (let attempt = 0; ; attempt++) {
        const route = routeOf(consistency.position, attempt, since);
        const answered = await onRoute(route, attempt > 0, (server) => server.listPage(range));
        if (answered === undefined) continue;
        onRead(answered.destination, 1);
        consistency.position = laterPosition(answered.position, consistency.position);
        return answered.answer.page;
      }
    },
  };
}
