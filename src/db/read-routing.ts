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

/**
 * A read's destination. A replica's comes with what the choice relied on: the run of the server
 * (its postmaster start) whose position qualified it, and the timeline it was on; an answer is
 * used only if it comes from that run (see accept in replicas.ts).
 */
export type Route<Replica> =
  | { replica: Replica; run: string; timeline: number }
  | { primary: PrimaryReason };

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
  /** A failed replica answers again no sooner than this. */
  outUntil: number;
}

const REJOIN_AFTER_MS = 1000;

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
    outUntil: 0,
  }));
  let samples: Sample[] = [];
  const sampleSpacingMs = Math.max(20, options.maxLagMs / 100);
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
    const ahead = samples.findIndex((sample) => sample.lsn > replica.replayed);
    if (ahead === -1) replica.behindSince = undefined;
    // Behind the oldest sample kept: it may have been behind since one that has gone.
    else if (ahead > 0 || replica.behindSince === undefined) {
      replica.behindSince = (samples[ahead] as Sample).at;
    }
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
    // A sample close after the last raises it instead: a sample then says the primary was
    // further on than it was, which only asks more of a replica, and they stay a hundred or so.
    if (last !== undefined && at - last.at < sampleSpacingMs) {
      if (position.lsn > last.lsn) last.lsn = position.lsn;
    } else if (last === undefined || position.lsn > last.lsn) {
      samples.push({ at, lsn: position.lsn });
    }
    // Samples older than the window are never asked for again; the newest is always kept.
    const keepFrom = at - options.maxLagMs - 1000;
    const firstKept = samples.findIndex((sample) => sample.at >= keepFrom);
    if (firstKept > 0) samples = samples.slice(Math.min(firstKept, samples.length - 1));
    for (const replica of replicas) updateBehind(replica);
    return position;
  }

  /** Records a replica's report: a new run of the server starts its state afresh. */
  function observeReplica(index: number, report: ServerReport): void {
    const replica = replicas[index] as ReplicaState;
    if (!report.standby || report.lsn === null) {
      replica.started = undefined;
      setRotation(index, false, 'the server is not a standby');
      return;
    }
    const lsn = parseLsn(report.lsn);
    if (replica.started !== report.started) {
      replica.started = report.started;
      replica.replayed = lsn;
      replica.timeline = undefined;
    } else if (lsn > replica.replayed) replica.replayed = lsn;
    if (report.timeline != null) {
      replica.timeline = report.timeline;
      primaryTimeline = Math.max(primaryTimeline ?? 0, report.timeline);
    }
    updateBehind(replica);
    if (options.now() >= replica.outUntil) setRotation(index, true, 'it answers as a standby');
  }

  /**
   * A read's own report from the replica its route named: the position its answer covers, or
   * undefined when the answer must not be used: it came from another run of the server than
   * the one the route relied on (it restarted, or a round-robin address led elsewhere), which
   * may not have replayed that far, or from a server that is no longer a standby.
   */
  function accept(
    route: Extract<Route<number>, { replica: number }>,
    report: ServerReport,
  ): WalPosition | undefined {
    observeReplica(route.replica, report);
    if (!report.standby || report.lsn === null || report.started !== route.run) return undefined;
    return { timeline: route.timeline, lsn: parseLsn(report.lsn) };
  }

  /**
   * A read on the replica failed: it leaves the rotation for a while at least, even though it
   * may answer the next poll (a replica whose reads wait on a lock still answers that).
   */
  function replicaFailed(index: number, reason: string) {
    const replica = replicas[index] as ReplicaState;
    replica.started = undefined;
    replica.outUntil = options.now() + REJOIN_AFTER_MS;
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
      return { replica: index, run: replica.started, timeline };
    }
    return { primary: timelineMismatch && token !== undefined ? 'timeline' : 'behind' };
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
    accept,
    replicaFailed,
    lagSeconds,
  };
}

export type ReadRouting = ReturnType<typeof createReadRouting>;
