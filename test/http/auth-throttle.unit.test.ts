import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { requireBearerToken } from '../../src/http/auth.js';
import {
  type AuthFailureStore,
  createFailureThrottle,
  LocalFailureCounts,
} from '../../src/http/auth-throttle.js';
import { clientKeyOf } from '../../src/http/client-address.js';

describe('clientKeyOf', () => {
  it('keeps an IPv4 address as it is', () => {
    expect(clientKeyOf('203.0.113.7', 64)).toBe('203.0.113.7');
  });

  it('gives one key to every spelling of one IPv6 address', () => {
    const spellings = [
      '2001:db8:1:2::7',
      '2001:0db8:0001:0002:0000:0000:0000:0007',
      '2001:DB8:1:2:0:0:0:7',
      '2001:db8:1:2:0::7',
      '2001:db8:1:2::7%eth0',
    ];
    expect(new Set(spellings.map((address) => clientKeyOf(address, 128)))).toStrictEqual(
      new Set(['2001:db8:1:2::7']),
    );
  });

  it('counts an IPv4-mapped IPv6 address as its IPv4 address', () => {
    expect(clientKeyOf('::ffff:203.0.113.7', 64)).toBe('203.0.113.7');
    expect(clientKeyOf('::FFFF:CB00:7107', 64)).toBe('203.0.113.7');
    expect(clientKeyOf('0:0:0:0:0:ffff:203.0.113.7', 128)).toBe('203.0.113.7');
  });

  it('counts an IPv6 address as its network of the prefix length', () => {
    expect(clientKeyOf('2001:db8:1:2:aaaa:bbbb:cccc:dddd', 64)).toBe('2001:db8:1:2::/64');
    expect(clientKeyOf('2001:db8:1:2::1', 64)).toBe('2001:db8:1:2::/64');
    expect(clientKeyOf('2001:db8:1:3::1', 64)).toBe('2001:db8:1:3::/64');
    expect(clientKeyOf('2001:db8:1:2:aaaa::1', 56)).toBe('2001:db8:1::/56');
    expect(clientKeyOf('2001:db8:1:ff:aaaa::1', 57)).toBe('2001:db8:1:80::/57');
    expect(clientKeyOf('8001::1', 1)).toBe('8000::/1');
    expect(clientKeyOf('::1', 64)).toBe('::/64');
  });

  it('spells the network as RFC 5952 does: lowercase, the longest run of zero groups as ::', () => {
    expect(clientKeyOf('2001:0:0:1:0:0:0:1', 128)).toBe('2001:0:0:1::1');
    expect(clientKeyOf('2001:db8:0:0:1:0:0:1', 128)).toBe('2001:db8::1:0:0:1');
    expect(clientKeyOf('2001:db8:0:1:1:1:1:1', 128)).toBe('2001:db8:0:1:1:1:1:1');
    expect(clientKeyOf('FE80::ABCD', 128)).toBe('fe80::abcd');
  });

  it('keeps what is not an address as it is', () => {
    expect(clientKeyOf('unknown', 64)).toBe('unknown');
  });
});

describe('LocalFailureCounts', () => {
  it('counts failures within a window that begins at the first one', () => {
    const counts = new LocalFailureCounts(60_000);
    expect(counts.add('10.0.0.1', 1000)).toStrictEqual({ failures: 1, remainingMs: 60_000 });
    expect(counts.add('10.0.0.1', 31_000)).toStrictEqual({ failures: 2, remainingMs: 30_000 });
    expect(counts.add('10.0.0.2', 31_000)).toStrictEqual({ failures: 1, remainingMs: 60_000 });
    expect(counts.add('10.0.0.1', 61_000)).toStrictEqual({ failures: 1, remainingMs: 60_000 });
  });

  it('forgets the oldest address when it has no room', () => {
    const counts = new LocalFailureCounts(60_000, 2);
    counts.add('10.0.0.1', 0);
    counts.add('10.0.0.2', 0);
    counts.add('10.0.0.2', 0);
    counts.add('10.0.0.3', 0);
    expect(counts.add('10.0.0.2', 0).failures).toBe(3);
    expect(counts.add('10.0.0.1', 0).failures).toBe(1);
  });
});

/** A store that answers as the database would for one replica, and records every call. */
function recordingStore(options: { failing?: boolean } = {}) {
  const counts = new LocalFailureCounts(60_000);
  const calls: string[] = [];
  const throttled: Array<{ address: string; remainingMs: number }> = [];
  const store: AuthFailureStore = {
    async recordFailure(address) {
      calls.push(`recordFailure ${address}`);
      if (options.failing) throw new Error('the database is unreachable');
      return counts.add(address);
    },
    async throttled() {
      calls.push('throttled');
      return throttled;
    },
    async forgetExpired() {
      calls.push('forgetExpired');
    },
  };
  return { store, calls, throttled };
}

const silent = { warn: () => {} };

async function appWith(store: AuthFailureStore, limit: number) {
  const app = Fastify({ trustProxy: true });
  await app.register(async (scope) => {
    await requireBearerToken(scope, (token) => token === 'right', {
      failuresPerAddress: limit,
      ipv6Prefix: 64,
      requestsPerToken: 0,
      windowMs: 60_000,
      failureStore: () => store,
    });
    scope.get('/', async () => 'ok');
  });
  const send = (client: string, token: string) =>
    app.inject({
      url: '/',
      headers: { 'x-forwarded-for': client, authorization: `Bearer ${token}` },
    });
  return { app, send };
}

describe('the failure throttle', () => {
  it('does not ask the store about a valid token from an address that is not throttled', async () => {
    const { store, calls } = recordingStore();
    const { app, send } = await appWith(store, 2);
    try {
      // One address throttled, so that every check must look its address up.
      await send('2001:db8:abcd::1', 'wrong');
      await send('2001:db8:abcd::1', 'wrong');
      expect((await send('2001:db8:abcd::1', 'right')).statusCode).toBe(429);
      calls.length = 0;
      for (let i = 0; i < 50; i++) {
        expect((await send(`2001:db8:${i}::1`, 'right')).statusCode).toBe(200);
        expect((await send(`10.0.0.${i}`, 'right')).statusCode).toBe(200);
      }
      expect(calls.filter((call) => call !== 'throttled')).toStrictEqual([]);
    } finally {
      await app.close();
    }
  });

  it('counts each failure in the store once, under the normalised address', async () => {
    const { store, calls } = recordingStore();
    const { app, send } = await appWith(store, 5);
    try {
      expect((await send('::ffff:10.0.0.1', 'wrong')).statusCode).toBe(401);
      expect((await send('2001:db8:1:2::3', 'wrong')).statusCode).toBe(401);
      expect(calls.filter((call) => call !== 'throttled')).toStrictEqual([
        'recordFailure 10.0.0.1',
        'recordFailure 2001:db8:1:2::/64',
      ]);
    } finally {
      await app.close();
    }
  });

  it('still answers 401 when the store fails, and throttles on the count in memory', async () => {
    const { store } = recordingStore({ failing: true });
    const { app, send } = await appWith(store, 2);
    try {
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await send('10.0.0.1', 'wrong')).statusCode);
      expect(statuses).toStrictEqual([401, 401, 429]);
    } finally {
      await app.close();
    }
  });

  it('answers 429 to a failure the store counts over the limit', async () => {
    const { store } = recordingStore();
    const throttle = createFailureThrottle({
      limit: 1,
      windowMs: 60_000,
      ipv6Prefix: 64,
      store: () => store,
      log: silent,
    });
    // As if another replica had counted the first failure and this one has not refreshed yet.
    await store.recordFailure('10.0.0.1');
    expect(await throttle.recordFailure('10.0.0.1')).toBeGreaterThanOrEqual(59);
  });

  it('learns the addresses throttled through other replicas from the store', async () => {
    const { store, throttled } = recordingStore();
    const throttle = createFailureThrottle({
      limit: 1,
      windowMs: 60_000,
      ipv6Prefix: 64,
      store: () => store,
      log: silent,
      refreshMs: 10,
    });
    throttle.start();
    try {
      throttled.push({ address: '2001:db8:1:2::/64', remainingMs: 30_000 });
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(throttle.retryAfter({ ip: '2001:db8:1:2:ffff::1' })).toBe(30);
      expect(throttle.retryAfter({ ip: '2001:db8:1:3::1' })).toBeUndefined();
    } finally {
      throttle.stop();
    }
  });
});
