import type { KeyObject } from 'node:crypto';
import type { Attributes } from '@opentelemetry/api';
import { Pool } from 'undici';
import { type AttemptResult, attemptDelivery } from './attempt.js';
import { attemptSpan, receiverSpanAttributes } from './attempt-span.js';
import { connectOptions, forbiddenHost } from './destination.js';
import type { ClaimedDelivery, EndpointTarget } from './outbox.js';
import { type KeyRing, openSecret } from './secrets.js';
import { signingKey, webhookId } from './signature.js';

/** One subscriber, a static URL or an endpoint: its connections, its queue, its attempts. */
export interface Lane {
  key: string;
  /** The endpoint's row key; undefined for a static URL. */
  endpoint: string | undefined;
  url: string;
  /** Origin and path, for the log: a query string may carry a credential. */
  receiver: string;
  /** What the span of every attempt says of the receiver. */
  receiverAttributes: Attributes;
  path: string;
  pool: Pool;
  /** The keys that sign its deliveries (new, then old during a rotation), or why there are none. */
  keys: readonly KeyObject[] | 'unreadable';
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
  /** Endpoints may reach private networks (static URLs always may). */
  allowPrivateNetworks: boolean;
  encryptionKeys: KeyRing;
}

/** Makes and retargets lanes; keys are derived once per sealed secret. */
export function createLanes(options: LaneOptions) {
  const keyCache = new Map<string, KeyObject>();
  const keyOf = (sealed: string, endpoint: string): KeyObject => {
    const cached = `${endpoint} ${sealed}`;
    let key = keyCache.get(cached);
    if (key === undefined) {
      if (keyCache.size >= 10_000) keyCache.clear();
      const place = { endpoint, field: 'secret' } as const;
      key = signingKey(openSecret(sealed, options.encryptionKeys, place));
      keyCache.set(cached, key);
    }
    return key;
  };

  function poolFor(url: URL, guarded: boolean): Pool {
    return new Pool(url.origin, {
      connections: options.concurrency,
      connect: { timeout: options.timeoutMs, ...connectOptions(!guarded) },
    });
  }

  /** Points the lane at `url`: a new pool when the origin changed. */
  function aim(lane: Omit<Lane, 'pool'> & { pool?: Pool }, href: string): void {
    const url = new URL(href);
    const guarded = lane.endpoint !== undefined && !options.allowPrivateNetworks;
    if (lane.pool === undefined || new URL(lane.url).origin !== url.origin) {
      const old = lane.pool;
      lane.pool = poolFor(url, guarded);
      // Attempts in flight on the old pool finish there.
      if (old) void old.close().catch(() => {});
    }
    lane.url = href;
    lane.receiver = `${url.origin}${url.pathname}`;
    lane.receiverAttributes = receiverSpanAttributes(url, lane.receiver);
    lane.path = `${url.pathname}${url.search}`;
    lane.forbidden = guarded && forbiddenHost(url.hostname);
  }

  function blank(key: string, endpoint: string | undefined, url: string) {
    return {
      key,
      endpoint,
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
    /** A static subscriber's lane, signed with the operator's secret. */
    staticLane(url: string, secret: string): Lane {
      const lane: Omit<Lane, 'pool'> & { pool?: Pool } = blank(url, undefined, url);
      aim(lane, url);
      lane.keys = [signingKey(secret)];
      return lane as Lane;
    },
    /** An endpoint's lane, as `target` says it is now. */
    endpointLane(target: EndpointTarget): Lane {
      const lane: Omit<Lane, 'pool'> & { pool?: Pool } = blank(
        `endpoint:${target.key}`,
        target.key,
        target.url,
      );
      aim(lane, target.url);
      const made = lane as Lane;
      this.retarget(made, target);
      return made;
    },
    /** Brings an endpoint's lane up to date with what a claim read of it. */
    retarget(lane: Lane, target: EndpointTarget): void {
      // A claim that read the endpoint before a change may finish after one that read it after.
      if (target.version < lane.version) return;
      lane.version = target.version;
      if (target.url !== lane.url) aim(lane, target.url);
      const sealed = `${target.secret} ${target.previousSecret ?? ''}`;
      if (sealed === lane.sealed) return;
      lane.sealed = sealed;
      let current: KeyObject;
      try {
        current = keyOf(target.secret, target.key);
      } catch {
        lane.keys = 'unreadable';
        return;
      }
      // The old key only adds a signature: one that cannot be read is left out.
      let previous: KeyObject | undefined;
      try {
        previous =
          target.previousSecret === undefined
            ? undefined
            : keyOf(target.previousSecret, target.key);
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
