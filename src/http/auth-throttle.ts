import type { FastifyBaseLogger } from 'fastify';
import { failureForLog } from '../db/errors.js';
import { clientKeyOf } from './client-address.js';

/** The failures of one client address within its window so far, and the time left in it. */
export interface FailureCount {
  failures: number;
  remainingMs: number;
}

/**
 * Where failed authentications are counted for every replica of the service (the database).
 * A window starts at an address's first failure and lasts the configured window; an address
 * is throttled once its failures reach the limit, until its window ends.
 */
export interface AuthFailureStore {
  /** Counts one failure of `address`: its count in its window, this one included. */
  recordFailure(address: string): Promise<FailureCount>;
  /** Every address throttled now, with the time left in its window. */
  throttled(): Promise<Array<{ address: string; remainingMs: number }>>;
  /** Forgets the counts whose window has passed. */
  forgetExpired(): Promise<void>;
}

export interface FailureThrottleOptions {
  /** Failures an address may make per window; the next request is refused. */
  limit: number;
  windowMs: number;
  /** IPv6 clients are counted per network of this many bits. */
  ipv6Prefix: number;
  /** The shared store, once the service has opened its database. */
  store: () => AuthFailureStore | undefined;
  log: Pick<FastifyBaseLogger, 'warn'>;
  /** How often the addresses throttled by other replicas are read from the store. */
  refreshMs?: number;
}

export interface FailureThrottle {
  /**
   * Seconds until the client may try again, or undefined when it is not throttled: no I/O, and
   * its address is not even read while no address is throttled.
   */
  retryAfter(client: { readonly ip: string }): number | undefined;
  /**
   * Counts a failed authentication of `ip`. Resolves with the seconds until it may try again
   * when this failure is over the limit (another replica counted the last ones), else undefined.
   */
  recordFailure(ip: string): Promise<number | undefined>;
  start(): void;
  stop(): void;
}

const seconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000));

/**
 * Failures counted in this process only, at most `capacity` addresses (the oldest is forgotten
 * first): for failures that the shared store cannot take.
 */
export class LocalFailureCounts {
  private readonly counts = new Map<string, { failures: number; endsAt: number }>();

  constructor(
    private readonly windowMs: number,
    private readonly capacity = 10_000,
  ) {}

  add(address: string, now = Date.now()): FailureCount {
    let count = this.counts.get(address);
    if (count === undefined || count.endsAt <= now) {
      this.counts.delete(address);
      if (this.counts.size >= this.capacity) {
        for (const [known, { endsAt }] of this.counts) if (endsAt <= now) this.counts.delete(known);
        const oldest = this.counts.keys().next();
        if (this.counts.size >= this.capacity && !oldest.done) this.counts.delete(oldest.value);
      }
      count = { failures: 0, endsAt: now + this.windowMs };
      this.counts.set(address, count);
    }
    count.failures++;
    return { failures: count.failures, remainingMs: count.endsAt - now };
  }
}

/**
 * Throttles failed authentication per client address for the whole service. Failures are
 * counted in the shared store, which answers each with its count across every replica; each
 * replica keeps the addresses throttled now in memory, refreshed from the store twice a
 * second, so a request is checked without any I/O and an address throttled through one
 * replica is refused by all within a second.
 *
 * Until the service has opened its database, and whenever the store fails (the database is
 * unreachable, or too many failures wait for it), a failure is counted in this process's memory
 * instead, never in the shared count: the address is still throttled, per replica, and a
 * failure is answered 401 (429 over the limit), never 500.
 */
export function createFailureThrottle(options: FailureThrottleOptions): FailureThrottle {
  const { limit, ipv6Prefix, store, log } = options;
  const local = new LocalFailureCounts(options.windowMs);
  /** The addresses throttled now, with the time (Date.now()) their windows end. */
  const throttledUntil = new Map<string, number>();
  let storeFailing = false;
  let refreshing = false;
  let countedSinceSweep = false;
  let nextSweep = 0;
  let timer: NodeJS.Timeout | undefined;

  function throttle(address: string, remainingMs: number, now: number): void {
    const until = now + remainingMs;
    if ((throttledUntil.get(address) ?? 0) < until) throttledUntil.set(address, until);
  }

  async function count(address: string): Promise<FailureCount> {
    const shared = store();
    if (shared === undefined) return local.add(address);
    try {
      const counted = await shared.recordFailure(address);
      storeFailing = false;
      countedSinceSweep = true;
      return counted;
    } catch (error) {
      if (!storeFailing) {
        // The statement's name and why (a StatementError), never its parameters (addresses).
        log.warn(
          failureForLog(error),
          'failed authentications are counted per replica until the database answers',
        );
      }
      storeFailing = true;
      return local.add(address);
    }
  }

  async function refresh(): Promise<void> {
    const now = Date.now();
    for (const [address, until] of throttledUntil) {
      if (until <= now) throttledUntil.delete(address);
    }
    const shared = store();
    if (shared === undefined || refreshing) return;
    refreshing = true;
    try {
      const throttled = await shared.throttled();
      const answeredAt = Date.now();
      for (const { address, remainingMs } of throttled) throttle(address, remainingMs, answeredAt);
      if (countedSinceSweep && now >= nextSweep) {
        countedSinceSweep = false;
        nextSweep = now + options.windowMs;
        await shared.forgetExpired();
      }
    } catch {
      // The database is unreachable: the next refresh asks again; requests show the fault.
    } finally {
      refreshing = false;
    }
  }

  return {
    retryAfter(client) {
      if (throttledUntil.size === 0) return undefined;
      const address = clientKeyOf(client.ip, ipv6Prefix);
      const until = throttledUntil.get(address);
      if (until === undefined) return undefined;
      const remainingMs = until - Date.now();
      if (remainingMs > 0) return seconds(remainingMs);
      throttledUntil.delete(address);
      return undefined;
    },
    async recordFailure(ip) {
      const address = clientKeyOf(ip, ipv6Prefix);
      const { failures, remainingMs } = await count(address);
      if (failures >= limit) throttle(address, remainingMs, Date.now());
      return failures > limit ? seconds(remainingMs) : undefined;
    },
    start() {
      // Twice a second, so that a throttle reaches every replica within a second, query included.
      timer ??= setInterval(refresh, options.refreshMs ?? 500).unref();
    },
    stop() {
      clearInterval(timer);
      timer = undefined;
    },
  };
}
