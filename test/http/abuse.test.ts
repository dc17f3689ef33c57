import { type AddressInfo, connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postPlant, startTestApp, storedPlant, type TestApp, TOKEN } from '../helpers/app.js';

const from = (remoteAddress: string) => ({ remoteAddress });

describe('failed authentication is throttled per client address', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ env: { AUTH_FAILURE_LIMIT: '3', RATE_LIMIT_WINDOW_MS: '60000' } });
  });
  afterAll(() => t.close());

  const attempt = (address: string, authorization?: string, id = 1) =>
    t.app.inject({
      method: 'POST',
      url: '/plants',
      ...from(address),
      headers: { 'content-type': 'application/json', ...(authorization && { authorization }) },
      payload: JSON.stringify({ id, name: 'guess' }),
    });

  it('answers 401 up to the limit, then 429 with Retry-After in the Error shape', async () => {
    const statuses = [];
    for (let i = 0; i < 4; i++)
      statuses.push((await attempt('10.0.0.1', `Bearer guess-${i}`)).statusCode);
    expect(statuses).toStrictEqual([401, 401, 401, 429]);
    const blocked = await attempt('10.0.0.1', 'Bearer guess-5');
    expect(blocked.statusCode).toBe(429);
    expect(Number(blocked.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(Number(blocked.headers['retry-after'])).toBeLessThanOrEqual(60);
    expect(blocked.json()).toStrictEqual({
      error: 429,
      message: 'too many failed authentication attempts from this address; retry later',
    });
  });

  it('keeps a blocked address out even with a valid token, so a guess cannot be confirmed', async () => {
    for (let i = 0; i < 3; i++) await attempt('10.0.0.2');
    const response = await attempt('10.0.0.2', `Bearer ${TOKEN}`, 77);
    expect(response.statusCode).toBe(429);
    expect(await storedPlant(t.database, 77)).toBeUndefined();
  });

  it('leaves other addresses alone', async () => {
    for (let i = 0; i < 3; i++) await attempt('10.0.0.3');
    expect((await attempt('10.0.0.4', 'Bearer nope')).statusCode).toBe(401);
    expect((await attempt('10.0.0.5', `Bearer ${TOKEN}`, 78)).statusCode).toBe(200);
  });

  it('does not count successful requests', async () => {
    for (let i = 0; i < 10; i++) {
      expect((await attempt('10.0.0.6', `Bearer ${TOKEN}`, 100 + i)).statusCode).toBe(200);
    }
    expect((await attempt('10.0.0.6', 'Bearer nope')).statusCode).toBe(401);
  });
});

describe('behind a trusted proxy', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ env: { AUTH_FAILURE_LIMIT: '2', TRUST_PROXY: '127.0.0.1' } });
  });
  afterAll(() => t.close());

  it('counts failures per X-Forwarded-For client, not per proxy', async () => {
    const attempt = (client: string, remoteAddress = '127.0.0.1') =>
      t.app.inject({
        method: 'POST',
        url: '/plants',
        remoteAddress,
        headers: { 'x-forwarded-for': client, authorization: 'Bearer nope' },
      });
    expect((await attempt('203.0.113.1')).statusCode).toBe(401);
    expect((await attempt('203.0.113.1')).statusCode).toBe(401);
    expect((await attempt('203.0.113.1')).statusCode).toBe(429);
    expect((await attempt('203.0.113.2')).statusCode).toBe(401);
    // An untrusted peer cannot choose its address with the header.
    expect((await attempt('203.0.113.9', '198.51.100.7')).statusCode).toBe(401);
    expect((await attempt('203.0.113.9', '198.51.100.7')).statusCode).toBe(401);
    expect((await attempt('203.0.113.10', '198.51.100.7')).statusCode).toBe(429);
  });
});

/** A request with a bad token (or `authorization`) from `client`, through a trusted proxy. */
const viaProxy = (t: TestApp, client: string, authorization = 'Bearer nope') =>
  t.app.inject({
    method: 'GET',
    url: '/plants/1',
    remoteAddress: '127.0.0.1',
    headers: { 'x-forwarded-for': client, authorization },
  });

const statusesOf = async (responses: Array<() => Promise<{ statusCode: number }>>) => {
  const statuses = [];
  for (const send of responses) statuses.push((await send()).statusCode);
  return statuses;
};

describe('the client address that failures count against', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ env: { AUTH_FAILURE_LIMIT: '3', TRUST_PROXY: '127.0.0.1' } });
  });
  afterAll(() => t.close());

  it('is the /64 of an IPv6 client: its addresses share one count', async () => {
    const addresses = Array.from({ length: 120 }, (_, i) => `2001:db8:1:2:${i.toString(16)}::1`);
    const statuses = await statusesOf(addresses.map((client) => () => viaProxy(t, client)));
    expect(statuses).toStrictEqual([401, 401, 401, ...Array(117).fill(429)]);
    expect((await viaProxy(t, '2001:db8:1:3::1')).statusCode).toBe(401);
    expect(
      await t.database.query(
        "select failures, throttled from auth_failures where address = '2001:db8:1:2::/64'",
      ),
    ).toStrictEqual([{ failures: 3, throttled: true }]);
  });

  it('is the IPv4 address of an IPv4-mapped IPv6 address', async () => {
    const statuses = await statusesOf(
      ['::ffff:198.51.100.4', '198.51.100.4', '::FFFF:C633:6404', '198.51.100.4'].map(
        (client) => () => viaProxy(t, client),
      ),
    );
    expect(statuses).toStrictEqual([401, 401, 401, 429]);
  });
});

describe('one IPv6 address', () => {
  it('counts once however it is spelled', async () => {
    const t = await startTestApp({
      env: { AUTH_FAILURE_LIMIT: '5', TRUST_PROXY: '127.0.0.1', AUTH_FAILURE_IPV6_PREFIX: '128' },
    });
    try {
      const spellings = [
        '2001:db8::7',
        '2001:0db8:0000:0000:0000:0000:0000:0007',
        '2001:DB8::7',
        '2001:db8:0:0::0:7',
        '2001:db8::7%eth0',
      ];
      const statuses = await statusesOf(spellings.map((client) => () => viaProxy(t, client)));
      expect(statuses).toStrictEqual([401, 401, 401, 401, 401]);
      expect((await viaProxy(t, '2001:0DB8::0007')).statusCode).toBe(429);
      // With a /128 prefix, the neighbour is a client of its own.
      expect((await viaProxy(t, '2001:db8::8')).statusCode).toBe(401);
    } finally {
      await t.close();
    }
  });
});

describe('two replicas on one database', () => {
  let first: TestApp;
  let second: TestApp;
  beforeAll(async () => {
    const env = { AUTH_FAILURE_LIMIT: '3', TRUST_PROXY: '127.0.0.1' };
    first = await startTestApp({ env });
    second = await startTestApp({ env, replicaOf: first });
  });
  afterAll(async () => {
    await second.close();
    await first.close();
  });

  it('allow the limit between them, not the limit each', async () => {
    const client = '203.0.113.50';
    const statuses = await statusesOf([
      () => viaProxy(first, client),
      () => viaProxy(second, client),
      () => viaProxy(first, client),
      () => viaProxy(second, client),
      () => viaProxy(first, client),
    ]);
    expect(statuses).toStrictEqual([401, 401, 401, 429, 429]);
  });

  it('refuse, within a second, an address that failed through the other one', async () => {
    const client = '203.0.113.51';
    const valid = `Bearer ${TOKEN}`;
    expect((await viaProxy(second, client, valid)).statusCode).toBe(404);
    for (let i = 0; i < 3; i++) expect((await viaProxy(first, client)).statusCode).toBe(401);
    const throttled = Date.now();
    let response = await viaProxy(second, client, valid);
    while (response.statusCode !== 429 && Date.now() - throttled < 3000) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      response = await viaProxy(second, client, valid);
    }
    expect(response.statusCode).toBe(429);
    expect(Date.now() - throttled).toBeLessThan(1000);
    expect(Number(response.headers['retry-after'])).toBeGreaterThanOrEqual(58);
  });
});

describe('while the database is unreachable', () => {
  it('failed authentication still answers 401, and is throttled per replica', async () => {
    const t = await startTestApp({
      databaseUrl: 'postgres://postgres@127.0.0.1:1/none',
      env: { AUTH_FAILURE_LIMIT: '2' },
    });
    try {
      const send = () =>
        t.app.inject({
          method: 'GET',
          url: '/plants/1',
          headers: { authorization: 'Bearer nope' },
        });
      expect(await statusesOf([send, send, send])).toStrictEqual([401, 401, 429]);
      // Said once, with the statement's name and not its parameters (the client's address).
      const said = t.logs.filter((line) => line.includes('counted per replica'));
      expect(said).toHaveLength(1);
      expect(said[0]).toContain('auth_failures_record');
      expect(said[0]).not.toContain('127.0.0.1');
    } finally {
      await t.close();
    }
  });
});

describe('authenticated traffic', () => {
  it('is not throttled by default', async () => {
    const t = await startTestApp();
    try {
      const responses = await Promise.all(
        Array.from({ length: 200 }, (_, i) => postPlant(t.app, { id: i, name: 'many' })),
      );
      expect(new Set(responses.map((r) => r.statusCode))).toStrictEqual(new Set([200]));
    } finally {
      await t.close();
    }
  });

  it('is throttled per token when TOKEN_RATE_LIMIT is set', async () => {
    const t = await startTestApp({ env: { TOKEN_RATE_LIMIT: '5' } });
    try {
      const statuses = [];
      for (let i = 0; i < 7; i++)
        statuses.push((await postPlant(t.app, { id: i, name: 'x' })).statusCode);
      expect(statuses).toStrictEqual([200, 200, 200, 200, 200, 429, 429]);
      const limited = await postPlant(t.app, { id: 99, name: 'x' });
      expect(limited.headers['retry-after']).toBeDefined();
      expect(limited.json()).toStrictEqual({
        error: 429,
        message: 'too many requests for this token; retry later',
      });
      expect(await storedPlant(t.database, 99)).toBeUndefined();
    } finally {
      await t.close();
    }
  });
});

describe('the per-token limit', () => {
  it('counts a token once, however the header spells the scheme word and the spaces', async () => {
    const t = await startTestApp({ env: { TOKEN_RATE_LIMIT: '5' } });
    try {
      const spellings = [
        'Bearer',
        'bearer',
        'BEARER',
        'Bearer ',
        'Bearer  ',
        'bEaReR',
        'Bearer   ',
      ];
      const statuses = [];
      for (const [i, scheme] of spellings.entries()) {
        const authorization = `${scheme} ${TOKEN}`;
        statuses.push((await postPlant(t.app, { id: i, name: 'x' }, { authorization })).statusCode);
      }
      expect(statuses).toStrictEqual([200, 200, 200, 200, 200, 429, 429]);
    } finally {
      await t.close();
    }
  });
});

describe('security headers', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.close());

  it.each([
    ['a 200', () => postPlant(t.app, { id: 1, name: 'x' })],
    ['a 400', () => postPlant(t.app, '{')],
    ['a 401', () => postPlant(t.app, { id: 2, name: 'x' }, { authorization: undefined })],
    ['a 404', () => t.app.inject({ method: 'GET', url: '/nowhere' })],
    ['the probes', () => t.app.inject({ method: 'GET', url: '/healthz' })],
    ['the OpenAPI document', () => t.app.inject({ method: 'GET', url: '/openapi.json' })],
  ])('forbid sniffing, framing, caching and scripts on %s', async (_, send) => {
    const { headers } = await send();
    expect(headers).toMatchObject({
      'x-content-type-options': 'nosniff',
      'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
      'x-frame-options': 'DENY',
      'referrer-policy': 'no-referrer',
      'cache-control': 'no-store',
    });
  });

  it('leave the interactive reference its own Content-Security-Policy', async () => {
    const { headers } = await t.app.inject({ method: 'GET', url: '/docs' });
    expect(headers['x-content-type-options']).toBe('nosniff');
    expect(headers['content-security-policy']).toMatch(/script-src 'self'/);
  });
});

describe('server timeouts', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      env: { HTTP_HEADERS_TIMEOUT_MS: '1000', HTTP_REQUEST_TIMEOUT_MS: '2000' },
    });
    await t.app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(() => t.close());

  async function trickle(
    parts: string[],
    everyMs: number,
  ): Promise<{ answer: string; ms: number }> {
    const { port } = t.app.server.address() as AddressInfo;
    const started = Date.now();
    const socket = connect(port, '127.0.0.1');
    const timer = setInterval(() => {
      const part = parts.shift();
      if (part !== undefined && socket.writable) socket.write(part);
    }, everyMs);
    let answer = '';
    try {
      for await (const chunk of socket) answer += chunk;
    } catch {
      // The server may reset the connection after answering.
    } finally {
      clearInterval(timer);
    }
    return { answer, ms: Date.now() - started };
  }

  it('answer 408 and close when the headers do not arrive in time', async () => {
    const { answer, ms } = await trickle(
      ['POST /plants HTTP/1.1\r\n', ...Array(50).fill('X-Slow: 1\r\n')],
      200,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer.split('\r\n\r\n')[1]).toBe(
      '{"error":408,"message":"the request took too long to arrive"}',
    );
    expect(ms).toBeLessThan(5000);
  });

  it('answer 408 and close when the body does not arrive in time', async () => {
    const head =
      'POST /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      `Authorization: Bearer ${TOKEN}\r\nContent-Length: 100\r\n\r\n`;
    const { answer, ms } = await trickle([head, ...Array(50).fill(' ')], 200);
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(ms).toBeLessThan(6000);
  });
});
