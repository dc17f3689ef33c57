import type { KeyObject } from 'node:crypto';
import type { Attributes } from '@opentelemetry/api';
import { Pool } from 'undici';
import { type AttemptResult, attemptDelivery } from './attempt.js';
import { attemptSpan, receiverSpanAttributes } from './attempt-span.js';
import { connectOptions, forbiddenHost } from './destination.js';
import type { ClaimedDelivery, EndpointTarget } from './outbox.js';
import { openSecret } from './secrets.js';
import { signingKey, webhookId } from './signature.js';

/** One endpoint: its connections, its queue, its attempts. */
export interface Lane {
  /** The endpoint's row key. */
  endpoint: string;
  url: string;
  /** Origin and path, for the log: a query string may carry a credential. */
  receiver: string;
  /** What the span of every attempt says of the receiver. */
  receiverAttributes: Attributes;
  path: string;
  pool: Pool;
  /** The keys that sign its deliveries (new, then old during a rotation), or why there are none. */
  keys: readonly KeyObject[] | 'unreadable';
  /** Its connections refuse private networks (see destination.ts). */
  guarded: boolean;
  /** The URL names a host that deliveries must not reach (checked before connecting). */
  forbidden: boolean;
  /** The sealed secrets `keys` were made from: they change only on a rotation. */
  sealed: string;
  /** The version of the endpoint the lane was last aimed with (see EndpointTarget). */
  version: number;
  queue: ClaimedDelivery[];
  inFlight: Set<ClaimedDelivery>;
  claiming: boolean;
  claimAgain: boolean;
  /** The last claim took all it asked for: more may be due. */
  backlog: boolean;
  wakeAt: number;
  wakeTimer: NodeJS.Timeout | undefined;
  /** performance.now() when it last had work: idle endpoint lanes are closed. */
  lastBusy: number;
}

export interface LaneOptions {
  timeoutMs: number;
  concurrency: number;
  /** Endpoints may reach private networks (configured ones always may). */
  allowPrivateNetworks: boolean;
  encryptionKey: Buffer | undefined;
}

/** Makes and retargets lanes; keys are derived once per sealed secret. */
export function createLanes(options: LaneOptions) {
  const keyCache = new Map<string, KeyObject>();
  const keyOf = (sealed: string): KeyObject => {
    let key = keyCache.get(sealed);
    if (key === undefined) {
      if (keyCache.size >= 10_000) keyCache.clear();
      key = signingKey(openSecret(sealed, options.encryptionKey));
      keyCache.set(sealed, key);
    }
    return key;
  };

  /** The operator's WEBHOOK_URLS are trusted; an API-made endpoint is not, unless allowed. */
  const guardedFor = (target: EndpointTarget) =>
    !target.configured && !options.allowPrivateNetworks;

  function poolFor(url: URL, guarded: boolean): Pool {
    return new Pool(url.origin, {
      connections: options.concurrency,
      connect: { timeout: options.timeoutMs, ...connectOptions(!guarded) },
    });
  }

  /** Points the lane at `url`: a new pool when the origin changed. */
  function aim(lane: Omit<Lane, 'pool'> & { pool?: Pool }, href: string, guarded: boolean): void {
    const url = new URL(href);
    if (
      lane.pool === undefined ||
      new URL(lane.url).origin !== url.origin ||
      lane.guarded !== guarded
    ) {
      const old = lane.pool;
      lane.pool = poolFor(url, guarded);
      // Attempts in flight on the old pool finish there.
      if (old) void old.close().catch(() => {});
    }
    lane.url = href;
    lane.guarded = guarded;
    lane.receiver = `${url.origin}${url.pathname}`;
    lane.receiverAttributes = receiverSpanAttributes(url, lane.receiver);
    lane.path = `${url.pathname}${url.search}`;
    lane.forbidden = guarded && forbiddenHost(url.hostname);
  }

  function blank(endpoint: string, url: string) {
    return {
      endpoint,
      guarded: false,
      url,
      receiver: '',
      receiverAttributes: {},
      path: '',
      keys: 'unreadable' as const,
      forbidden: false,
      sealed: '',
      version: 0,
      queue: [],
      inFlight: new Set<ClaimedDelivery>(),
      claiming: false,
      claimAgain: false,
      backlog: false,
      wakeAt: Number.POSITIVE_INFINITY,
      wakeTimer: undefined,
      lastBusy: performance.now(),
    };
  }

  return {
    /** An endpoint's lane, as `target` says it is now. */
    lane(target: EndpointTarget): Lane {
      const lane: Omit<Lane, 'pool'> & { pool?: Pool } = blank(target.key, target.url);
      aim(lane, target.url, guardedFor(target));
      const made = lane as Lane;
      this.retarget(made, target);
      return made;
    },
    /** Brings an endpoint's lane up to date with what a claim read of it. */
    retarget(lane: Lane, target: EndpointTarget): void {
      // A claim that read the endpoint before a change may finish after one that read it after.
      if (target.version < lane.version) return;
      lane.version = target.version;
      const guarded = guardedFor(target);
      if (target.url !== lane.url || guarded !== lane.guarded) aim(lane, target.url, guarded);
      const sealed = `${target.secret} ${target.previousSecret ?? ''}`;
      if (sealed === lane.sealed) return;
      lane.sealed = sealed;
      let current: KeyObject;
      try {
        current = keyOf(target.secret);
      } catch {
        lane.keys = 'unreadable';
        return;
      }
      // The old key only adds a signature: one that cannot be read is left out.
      let previous: KeyObject | undefined;
      try {
        previous = target.previousSecret === undefined ? undefined : keyOf(target.previousSecret);
      } catch {}
      lane.keys = previous === undefined ? [current] : [current, previous];
    },
  };
}

export type Lanes = ReturnType<typeof createLanes>;

/** Attempts a delivery on its lane, or refuses it before connecting (see Lane.forbidden, keys). */
export function sendOn(
  lane: Lane,
  delivery: ClaimedDelivery,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<AttemptResult> {
  if (lane.forbidden) {
    return Promise.resolve({ kind: 'unreachable', code: 'EDESTINATIONNOTALLOWED' });
  }
  if (lane.keys === 'unreadable') {
    return Promise.resolve({ kind: 'unreachable', code: 'ESECRETUNAVAILABLE' });
  }
  const keys = lane.keys;
  return attemptSpan(
    {
      receiver: lane.receiverAttributes,
      webhookId: webhookId(delivery.eventId),
      attempt: delivery.attempt,
      traceparent: delivery.traceparent,
    },
    () =>
      attemptDelivery(delivery, { client: lane.pool, path: lane.path, keys, timeoutMs, signal }),
  );
}
