import type { BatchHandler } from '../db/batch-queue.js';
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
 * What one request has seen: the position its Consistency-Token named when it came, then the
 * position its answer covers, at least as late.
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

export interface RoutedReads {
  byIds: BatchHandler<RoutedRead, StoredPlant | undefined>;
  listPage(range: PageRange, consistency: Consistency): Promise<PlantPage>;
}

/**
 * The reads spread over the replicas (see ReplicaSet): each runs on the server its route names,
 * and a replica that fails, restarted or is no longer a standby hands the read to the primary.
 */
export function createRoutedReads(
  replicaSet: ReplicaSet,
  reads: { primary: ReportingReads; replicas: readonly ReportingReads[] },
  onRead: (destination: ReadDestination, count: number) => void,
): RoutedReads {
  async function onRoute<T extends { report: ServerReport }>(
    route: ReadRoute,
    read: (server: ReportingReads) => Promise<T>,
  ): Promise<{ answer: T; position: WalPosition; destination: ReadDestination }> {
    let reason: PrimaryReason;
    if ('replica' in route) {
      const { replica } = route;
      try {
        const answer = await read(reads.replicas[replica.index] as ReportingReads);
        const position = replicaSet.accept(replica, answer.report);
        if (position !== undefined) return { answer, position, destination: 'replica' };
      } catch (error) {
        replicaSet.failed(replica, error);
      }
      reason = 'fault';
    } else reason = route.primary;
    const answer = await read(reads.primary);
    return { answer, position: replicaSet.primaryPosition(answer.report), destination: reason };
  }

  return {
    byIds: {
      async run(batch) {
        // One statement per destination: a batch's reads go where the first went, if they may.
        const groups = new Map<string, { route: ReadRoute; reads: typeof batch }>();
        let prefer: Replica | undefined;
        for (const pending of batch) {
          const route = replicaSet.choose(pending.item.consistency.position, prefer);
          if ('replica' in route) prefer ??= route.replica;
          const key = 'replica' in route ? route.replica.name : route.primary;
          const group = groups.get(key) ?? { route, reads: [] };
          group.reads.push(pending);
          groups.set(key, group);
        }
        // Each destination answers its own reads: a primary that cannot be reached fails only
        // the reads that needed it.
        await Promise.all(
          [...groups.values()].map(async ({ route, reads }) => {
            const ids = [...new Set(reads.map(({ item }) => item.id))];
            let answered: Awaited<ReturnType<typeof onRoute<ByIds>>>;
            try {
              answered = await onRoute(route, (server) => server.findByIds(ids));
            } catch (error) {
              const failure = classifyDatabaseError(error);
              for (const { reject } of reads) reject(failure);
              return;
            }
            onRead(answered.destination, reads.length);
            for (const { item, resolve } of reads) {
              item.consistency.position = laterPosition(
                answered.position,
                item.consistency.position,
              );
              resolve(answered.answer.found.get(item.id));
            }
          }),
        );
      },
    },
    async listPage(range, consistency) {
      const route = replicaSet.choose(consistency.position);
      const { answer, position, destination } = await onRoute(route, (server) =>
        server.listPage(range),
      );
      onRead(destination, 1);
      consistency.position = laterPosition(position, consistency.position);
      return answer.page;
    },
  };
}
