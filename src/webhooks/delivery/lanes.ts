import type { KeyObject } from 'node:crypto';
import type { Attributes } from '@opentelemetry/api';
import {
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_URL_FULL,
} from '@opentelemetry/semantic-conventions';
import { Pool } from 'undici';
import { openHeaders } from '../security/custom-headers.js';
import { connectOptions, forbiddenHost } from '../security/destination.js';
import { type KeyRing, openSecret } from '../security/secrets.js';
import { signingKey } from '../security/signature.js';
import type { ClaimedDelivery, EndpointTarget } from './outbox.js';
import { type Alarm, createAlarm, type OneAtATime, oneAtATime } from './running.js';

/** How finely a lane's wakes for its retries are told apart, in ms. */
const WAKE_STEP_MS = 50;

/** What an endpoint's lane knows of it and holds: aimed by createLanes. */
function laneState(target: EndpointTarget, guarded: boolean, pool: Pool) {
  return {
    endpoint: target.key,
    url: target.url,
    /** Its connections refuse private networks (see security/destination.ts). */
    guarded,
    pool,
    /** Origin and path, for the log: a query string may carry a credential. */
    receiver: '',
    /** What the span of every attempt says of the receiver. */
    receiverAttributes: {} as Attributes,
    path: '',
    /** The keys that sign its deliveries (new, then old during a rotation), or why there are none. */
    keys: 'unreadable' as readonly KeyObject[] | 'unreadable',
    /** The URL names a host that deliveries must not reach (checked before connecting). */
    forbidden: false,
    /** The sealed secrets `keys` were made from: they change only on a rotation. */
    sealed: '',
    /**
     * Its custom headers, names and values in turn, or why they cannot be sent; values are
     * never logged nor put in a span.
     */
    headers: [] as readonly string[] | 'unreadable',
    /** The sealed headers `headers` were opened from: they change only when they are set. */
    sealedHeaders: null as string | null,
    /** The version of the endpoint the lane was last aimed with (see EndpointTarget). */
    version: 0,
    queue: [] as ClaimedDelivery[],
    inFlight: new Set<ClaimedDelivery>(),
    /** More may be due than it holds: its last claim took all it asked for, or it was full. */
    backlog: false,
    /** performance.now() when it last had work: idle endpoint lanes are closed. */
    lastBusy: performance.now(),
  };
}

/** One endpoint: its connections, its queue, its attempts, and when it claims and starts them. */
export interface Lane extends ReturnType<typeof laneState> {
  /** Its claims, one at a time. */
  claims: OneAtATime;
  /** Claims for the lane when each retry, and its next slots, fall due. */
  wake: Alarm;
  /** Starts the first of its queue, a paced delivery, when its slot begins. */
  pace: Alarm;
}

/** What a lane's timers and claims run, given by the dispatcher. */
export interface LaneWork {
  /** Claims due deliveries for the lane's free slots. */
  claim(lane: Lane): Promise<void>;
  /** Starts what the lane's queue may start now. */
  pump(lane: Lane): void;
}

function newLane(target: EndpointTarget, guarded: boolean, pool: Pool, work: LaneWork): Lane {
  const lane: Lane = {
    ...laneState(target, guarded, pool),
    claims: oneAtATime(() => work.claim(lane)),
    // Retries fall due at jittered times: one claim per WAKE_STEP_MS takes all that are due.
    wake: createAlarm(() => lane.claims.run(), WAKE_STEP_MS),
    pace: createAlarm(() => work.pump(lane)),
  };
  return lane;
}

export interface LaneOptions {
  timeoutMs: number;
  concurrency: number;
  /** Endpoints may reach private networks (configured ones always may). */
  allowPrivateNetworks: boolean;
  encryptionKeys: KeyRing;
  /** See EngineTiming.connectionIdleMs. */
  connectionIdleMs: number;
}

/** Makes and retargets lanes; keys are derived once per sealed secret. */
export function createLanes(options: LaneOptions, work: LaneWork) {
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

  /** An endpoint's custom headers as undici takes them; 'unreadable' when they do not open. */
  const headersOf = (sealed: string | null, endpoint: string) => {
    try {
      return Object.entries(openHeaders(sealed, options.encryptionKeys, endpoint)).flat();
    } catch {
      return 'unreadable' as const;
    }
  };

  /** The operator's WEBHOOK_URLS are trusted; an API-made endpoint is not, unless allowed. */
  const guardedFor = (target: EndpointTarget) =>
    !target.configured && !options.allowPrivateNetworks;

  function poolFor(url: URL, guarded: boolean): Pool {
    return new Pool(url.origin, {
      connections: options.concurrency,
      keepAliveTimeout: options.connectionIdleMs,
      keepAliveMaxTimeout: options.connectionIdleMs,
      connect: { timeout: options.timeoutMs, ...connectOptions(!guarded) },
    });
  }

  /** Points the lane at `url`: a new pool when the origin changed. */
  function aim(lane: Lane, href: string, guarded: boolean): void {
    const url = new URL(href);
    if (new URL(lane.url).origin !== url.origin || lane.guarded !== guarded) {
      const old = lane.pool;
      lane.pool = poolFor(url, guarded);
      // Attempts in flight on the old pool finish there.
      void old.close().catch(() => {});
    }
    lane.url = href;
    lane.guarded = guarded;
    lane.receiver = `${url.origin}${url.pathname}`;
    lane.receiverAttributes = {
      [ATTR_HTTP_REQUEST_METHOD]: 'POST',
      [ATTR_SERVER_ADDRESS]: url.hostname,
      [ATTR_SERVER_PORT]: Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
      // A query string may carry a credential.
      [ATTR_URL_FULL]: lane.receiver,
    };
    lane.path = `${url.pathname}${url.search}`;
    lane.forbidden = guarded && forbiddenHost(url.hostname);
  }

  return {
    /** An endpoint's lane, as `target` says it is now. */
    lane(target: EndpointTarget): Lane {
      const guarded = guardedFor(target);
      const lane = newLane(target, guarded, poolFor(new URL(target.url), guarded), work);
      aim(lane, target.url, guarded);
      this.retarget(lane, target);
      return lane;
    },
    /** Brings an endpoint's lane up to date with what a claim read of it. */
    retarget(lane: Lane, target: EndpointTarget): void {
      // A claim that read the endpoint before a change may finish after one that read it after.
      if (target.version < lane.version) return;
      lane.version = target.version;
      const guarded = guardedFor(target);
      if (target.url !== lane.url || guarded !== lane.guarded) aim(lane, target.url, guarded);
      if (target.headers !== lane.sealedHeaders) {
        lane.sealedHeaders = target.headers;
        lane.headers = headersOf(target.headers, target.key);
      }
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
