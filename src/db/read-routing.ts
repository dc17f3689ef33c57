import { parseLsn, timelineOfWalFile, type WalPosition } from './wal-position.js';

/**
 * What a server said of itself, read in a statement after that statement's snapshot was taken:
 * whether it is a standby, how far it had replayed (a standby) or written (a primary), when its
 * postmaster started (a restart makes a new server), the primary's timeline from its WAL file
 * name, and a standby's timeline where the server tells it.
 */
export interface ServerReport {
  standby: boolean;
  lsn: string | null;
  started: string;
  walFile: string | null;
  timeline?: number | null;
}

/** Why a read went to the primary rather than to a replica. */
export type PrimaryReason = 'behind' | 'timeline' | 'fault' | 'none';

export type Route<Replica> = { replica: Replica } | { primary: PrimaryReason };

/** A replica's state as this process last saw it. */
interface ReplicaState {
  /** Undefined until the replica first answers or fails. */
  inRotation: boolean | undefined;
  /** The postmaster's start: replay positions compare only within one run of the server. */
  started: string | undefined;
  replayed: bigint;
  timeline: number | undefined;
  /** When the primary was first seen past what the replica has replayed; undefined: caught up. */
  behindSince: number | undefined;
}

/** The primary's position, sampled now and then, to tell how far behind a replica is. */
interface Sample {
  at: number;
  lsn: bigint;
}

export interface ReadRoutingOptions {
  /** How far behind a replica may be for a read that names no position. */
  maxLagMs: number;
  now: () => number;
  /** Told when a replica joins or leaves the rotation, and where it stands at first. */
  onRotation: (replica: number, inRotation: boolean, reason: string, first: boolean) => void;
}

/**
 * Decides where each read goes, from what this process last saw of each server: a replica that
 * has replayed the position the read needs (a Consistency-Token's, or, without one, where the
 * primary stood `maxLagMs` ago), else the primary. What a replica has replayed only grows while
 * its postmaster runs, so a position seen before a statement was sent holds for that statement's
 * snapshot if the statement reports the same postmaster start; accept() checks that.
 */
export function createReadRouting(replicaCount: number, options: ReadRoutingOptions) {
  const replicas: ReplicaState[] = Array.from({ length: replicaCount }, () => ({
    inRotation: undefined,
    started: undefined,
    replayed: 0n,
    timeline: undefined,
    behindSince: undefined,
  }));
  let samples: Sample[] = [];
  /** The timeline the primary answered on last: its samples are positions on it. */
  let sampledTimeline: number | undefined;
  /**
   * The cluster's newest timeline, the primary's or one a replica follows: after a failover a
   * replica may follow the new primary before this process reaches it.
   */
  let primaryTimeline: number | undefined;
  let next = 0;

  function setRotation(index: number, inRotation: boolean, reason: string) {
    const replica = replicas[index] as ReplicaState;
    if (replica.inRotation === inRotation) return;
    const first = replica.inRotation === undefined;
    replica.inRotation = inRotation;
    options.onRotation(index, inRotation, reason, first);
  }

  /** Kept apart from the samples, which go once older than the lag: a lag may last longer. */
  function updateBehind(replica: ReplicaState) {
    const ahead = samples.find((sample) => sample.lsn > replica.replayed);
    replica.behindSince =
      ahead === undefined ? undefined : Math.min(replica.behindSince ?? ahead.at, ahead.at);
  }

  /** The position a read without a token needs: where the primary stood `maxLagMs` ago. */
  function recentEnough(): bigint | undefined {
    const since = options.now() - options.maxLagMs;
    // The first sample taken since then: everything committed by `since` is at or before it.
    // When the primary has not answered since, the last position it gave.
    return (samples.find((sample) => sample.at >= since) ?? samples.at(-1))?.lsn;
  }

  /** Records a report of the primary: its timeline, and a sample of its position. */
  function observePrimary(report: ServerReport): WalPosition | undefined {
    if (report.standby || report.lsn === null || report.walFile === null) return undefined;
    const position = { timeline: timelineOfWalFile(report.walFile), lsn: parseLsn(report.lsn) };
    // A new primary's positions go on from where its timeline forked, perhaps below the last
    // sample of the old one: its own samples start afresh.
    if (position.timeline !== sampledTimeline) {
      sampledTimeline = position.timeline;
      samples = [];
    }
    primaryTimeline = Math.max(primaryTimeline ?? 0, position.timeline);
    const at = options.now();
    const last = samples.at(-1);
    if (last === undefined || position.lsn > last.lsn) samples.push({ at, lsn: position.lsn });
    // Samples older than the window are never asked for again; the newest is always kept.
    const keepFrom = at - options.maxLagMs - 1000;
    const firstKept = samples.findIndex((sample) => sample.at >= keepFrom);
    if (firstKept > 0) samples = samples.slice(Math.min(firstKept, samples.length - 1));
    for (const replica of replicas) updateBehind(replica);
    return position;
  }

  /**
   * Records a replica's report; false when what it says breaks what a read routed there relied
   * on (it is no longer a standby, or it restarted), in which case the read must not be used.
   */
  function observeReplica(index: number, report: ServerReport): boolean {
    const replica = replicas[index] as ReplicaState;
    if (!report.standby || report.lsn === null) {
      replica.started = undefined;
      setRotation(index, false, 'the server is not a standby');
      return false;
    }
    const lsn = parseLsn(report.lsn);
    const sameRun = replica.started === report.started;
    if (!sameRun) {
      replica.started = report.started;
      replica.replayed = lsn;
      replica.timeline = undefined;
    } else if (lsn > replica.replayed) replica.replayed = lsn;
    if (report.timeline != null) {
      replica.timeline = report.timeline;
      primaryTimeline = Math.max(primaryTimeline ?? 0, report.timeline);
    }
    updateBehind(replica);
    setRotation(index, true, 'it answers as a standby');
    return sameRun;
  }

  function replicaFailed(index: number, reason: string) {
    const replica = replicas[index] as ReplicaState;
    replica.started = undefined;
    setRotation(index, false, reason);
  }

  /**
   * Where a read goes that must see `token` (a position it was sent), or that names none:
   * `prefer` first when it qualifies (the reads of one batch share a statement), otherwise the
   * replicas that qualify in turn.
   */
  function choose(token: WalPosition | undefined, prefer?: number): Route<number> {
    if (!replicas.some((replica) => replica.inRotation)) return { primary: 'none' };
    let needed: bigint | undefined;
    let timeline: number | undefined;
    if (token !== undefined) {
      if (primaryTimeline !== undefined && token.timeline !== primaryTimeline) {
        return { primary: 'timeline' };
      }
      needed = token.lsn;
      timeline = token.timeline;
    } else {
      if (options.maxLagMs === 0) return { primary: 'behind' };
      needed = recentEnough();
      timeline = primaryTimeline;
    }
    if (needed === undefined || timeline === undefined) return { primary: 'behind' };
    let timelineMismatch = false;
    const start = prefer ?? next;
    for (let step = 0; step < replicas.length; step++) {
      const index = (start + step) % replicas.length;
      const replica = replicas[index] as ReplicaState;
      if (!replica.inRotation || replica.started === undefined) continue;
      if (replica.timeline !== timeline) {
        timelineMismatch ||= replica.timeline !== undefined;
        continue;
      }
      if (replica.replayed < needed) continue;
      next = index + 1;
      return { replica: index };
    }
    return { primary: timelineMismatch && token !== undefined ? 'timeline' : 'behind' };
  }

  /** The replica's position as a Consistency-Token names it, from its report. */
  function replicaPosition(index: number, report: ServerReport): WalPosition {
    const replica = replicas[index] as ReplicaState;
    return { timeline: replica.timeline ?? 0, lsn: parseLsn(report.lsn ?? '0/0') };
  }

  /** Seconds since the primary first stood beyond what the replica has replayed; 0 when none. */
  function lagSeconds(index: number): number | undefined {
    const replica = replicas[index] as ReplicaState;
    if (replica.inRotation !== true) return undefined;
    return replica.behindSince === undefined ? 0 : (options.now() - replica.behindSince) / 1000;
  }

  return {
    choose,
    observePrimary,
    observeReplica,
    replicaFailed,
    replicaPosition,
    lagSeconds,
  };
}

export type ReadRouting = ReturnType<typeof createReadRouting>;
