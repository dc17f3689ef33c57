import type { KeyObject } from 'node:crypto';
// Through @opentelemetry/api alone: every call is a no-op until the SDK is started.
import {
  type Attributes,
  isSpanContextValid,
  ROOT_CONTEXT,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_REQUEST_RESEND_COUNT,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_URL_FULL,
} from '@opentelemetry/semantic-conventions';
import { type Dispatcher, Pool } from 'undici';
import { openHeaders } from '../security/custom-headers.js';
import { connectOptions, forbiddenHost } from '../security/destination.js';
import { type KeyRing, openSecret } from '../security/secrets.js';
import { signatures, signingKey } from '../security/signature.js';
import { webhookId } from '../tables/ids.js';
import type { ClaimedDelivery, EndpointTarget } from './outbox.js';

/** How one attempt ended. Only a 2xx answered within the time limit is a delivery. */
export type AttemptResult =
  | { kind: 'answered'; status: number; retryAfter: string | undefined }
  | { kind: 'timeout' }
  /** No answer: the connection was refused, reset, or the name did not resolve. */
  | { kind: 'unreachable'; code: string };

/** At most this much of an answer is read; the rest is not waited for. */
const RESPONSE_READ_LIMIT = 4096;

const USER_AGENT = 'plant-store-webhooks/1.0.0';

function errorCode(error: unknown): string {
  for (let current = error, depth = 0; current && depth < 4; depth++) {
    const { code, cause } = current as { code?: unknown; cause?: unknown };
    if (typeof code === 'string') return code;
    current = cause;
  }
  return (error as Error)?.name ?? 'Error';
}

const timeoutCodes = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT']);

/**
 * Makes one attempt of a delivery: a POST of its body, signed for this attempt's timestamp,
 * whose status must arrive within the time limit. Redirects are not followed (a 3xx is an
 * answer like any other), and at most a few KiB of the answer are read. Never rejects.
 * Written against undici's dispatch interface rather than request(), which would make a
 * stream of every answer: deliveries are as many as creates.
 */
function attemptDelivery(
  { pool, path }: { pool: Dispatcher; path: string },
  keys: readonly KeyObject[],
  custom: readonly string[],
  delivery: ClaimedDelivery,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<AttemptResult> {
  const id = webhookId(delivery.eventId, delivery.trigger);
  const timestamp = Math.floor(Date.now() / 1000);
  return new Promise<AttemptResult>((resolve) => {
    let controller: Dispatcher.DispatchController | undefined;
    let answered: AttemptResult | undefined;
    let read = 0;
    let settled = false;
    const settle = (result: AttemptResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', abandon);
      resolve(result);
    };
    const stop = (result: AttemptResult) => {
      settle(result);
      if (controller && !controller.aborted) controller.abort(new Error('attempt over'));
    };
    // A status that arrived in time counts, even if the rest of the answer does not.
    const expire = () => stop(answered ?? { kind: 'timeout' });
    const abandon = () => stop({ kind: 'timeout' });
    const timer = setTimeout(expire, timeoutMs);
    signal.addEventListener('abort', abandon, { once: true });
    pool.dispatch(
      {
        method: 'POST',
        path,
        headers: [
          'content-type',
          'application/json',
          'user-agent',
          USER_AGENT,
          'webhook-id',
          id,
          'webhook-timestamp',
          String(timestamp),
          'webhook-signature',
          signatures(keys, id, timestamp, delivery.body),
          ...custom,
        ],
        body: delivery.body,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      },
      {
        onRequestStart(started) {
          controller = started;
          if (settled) started.abort(new Error('attempt over'));
        },
        onResponseStart(_controller, status, headers) {
          const retryAfter = headers['retry-after'];
          answered = {
            kind: 'answered',
            status,
            retryAfter: typeof retryAfter === 'string' ? retryAfter : undefined,
          };
        },
        onResponseData(_controller, chunk) {
          read += chunk.length;
          if (read > RESPONSE_READ_LIMIT && answered) stop(answered);
        },
        onResponseEnd() {
          settle(answered ?? { kind: 'unreachable', code: 'NO_ANSWER' });
        },
        onResponseError(_controller, error) {
          if (answered) return settle(answered);
          const code = errorCode(error);
          settle(timeoutCodes.has(code) ? { kind: 'timeout' } : { kind: 'unreachable', code });
        },
      },
    );
  });
}

// Asked at each span, not once: the SDK registers its provider through its own copy of the API
// (it is not bundled), which a tracer this bundle made before the start would never reach.
const tracer = () => trace.getTracer('plant-store');

const traceparentFormat = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

function spanContextOf(traceparent: string | undefined): SpanContext | undefined {
  const match = traceparentFormat.exec(traceparent ?? '');
  if (!match) return undefined;
  const [, traceId = '', spanId = '', flags = ''] = match;
  const spanContext = { traceId, spanId, traceFlags: Number.parseInt(flags, 16), isRemote: true };
  return isSpanContextValid(spanContext) ? spanContext : undefined;
}

/** Why an attempt failed, as error.type; undefined for a 2xx or 3xx answer. */
function failureOf(result: AttemptResult): string | undefined {
  if (result.kind === 'timeout') return 'timeout';
  if (result.kind === 'unreachable') return result.code;
  return result.status >= 400 ? String(result.status) : undefined;
}

/**
 * Attempts a delivery on its lane, or refuses it before connecting (see Lane.forbidden, keys);
 * in a span of its own, the child of the statement that recorded its event.
 */
export async function sendOn(
  lane: Lane,
  delivery: ClaimedDelivery,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<AttemptResult> {
  if (lane.forbidden) return { kind: 'unreachable', code: 'EDESTINATIONNOTALLOWED' };
  const { keys } = lane;
  if (keys === 'unreadable') return { kind: 'unreachable', code: 'ESECRETUNAVAILABLE' };
  const { headers } = lane;
  if (headers === 'unreadable') return { kind: 'unreachable', code: 'EHEADERSUNAVAILABLE' };
  const recorded = spanContextOf(delivery.traceparent);
  const span = tracer().startSpan(
    'POST',
    {
      kind: SpanKind.CLIENT,
      attributes: {
        ...lane.receiverAttributes,
        ...(delivery.attempt > 1 && { [ATTR_HTTP_REQUEST_RESEND_COUNT]: delivery.attempt - 1 }),
        'webhook.id': webhookId(delivery.eventId, delivery.trigger),
      },
    },
    recorded ? trace.setSpanContext(ROOT_CONTEXT, recorded) : ROOT_CONTEXT,
  );
  // An attempt never rejects: its result says how it ended.
  const result = await attemptDelivery(lane, keys, headers, delivery, timeoutMs, signal);
  if (result.kind === 'answered') span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, result.status);
  const failure = failureOf(result);
  if (failure !== undefined) {
    span.setAttribute(ATTR_ERROR_TYPE, failure);
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
  return result;
}

/** One endpoint: its connections, its queue, its attempts; aimed by createLanes. */
function newLane(target: EndpointTarget, guarded: boolean, pool: Pool) {
  return {
    endpoint: target.key,
    url: target.url,
    /** Its connections refuse private networks (see destination.ts). */
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
    claiming: false,
    claimAgain: false,
    /** The last claim took all it asked for: more may be due. */
    backlog: false,
    wakeAt: Number.POSITIVE_INFINITY,
    wakeTimer: undefined as NodeJS.Timeout | undefined,
    /** When the first of the queue, a paced delivery, may start: the lane pumps again then. */
    paceAt: Number.POSITIVE_INFINITY,
    paceTimer: undefined as NodeJS.Timeout | undefined,
    /** performance.now() when it last had work: idle endpoint lanes are closed. */
    lastBusy: performance.now(),
  };
}

export type Lane = ReturnType<typeof newLane>;

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
    lane(target: EndpointTarget) {
      const guarded = guardedFor(target);
      const lane = newLane(target, guarded, poolFor(new URL(target.url), guarded));
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
