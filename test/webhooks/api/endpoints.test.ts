import { randomBytes, randomUUID } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  generateSecret,
  isEndpointSecret,
  sealSecret,
} from '../../../src/webhooks/security/secrets.js';
import { startTestApp, type TestApp, TOKEN } from '../../helpers/app.js';
import { ringKey } from '../../helpers/sealed.js';

const ADMIN = 'admin-token-7c21e9';
const ENCRYPTION_KEY = randomBytes(32).toString('base64');
const CHALLENGE = 'Bearer realm="plant-store"';
const INSUFFICIENT_SCOPE = `${CHALLENGE}, error="insufficient_scope"`;

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({
    env: {
      ADMIN_TOKENS: ADMIN,
      WEBHOOK_ENCRYPTION_KEY: ENCRYPTION_KEY,
      WEBHOOK_ROTATION_GRACE_S: '3600',
      AUTH_FAILURE_LIMIT: '3',
    },
  });
  // The API alone, and rows as the API leaves them: nothing delivers or claims them meanwhile
  // (test/webhooks/api/endpoint-deliveries.test.ts delivers).
  await t.dispatcher?.stop(0);
});
afterAll(() => t.close());

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE' | 'PUT';

function call(
  method: Method,
  url: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<LightMyRequestResponse> {
  return t.app.inject({
    method,
    url,
    headers: {
      authorization: `Bearer ${ADMIN}`,
      ...(body !== undefined && { 'content-type': 'application/json' }),
      ...headers,
    },
    ...(body !== undefined && { payload: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
}

async function create(body: Record<string, unknown> = {}) {
  const response = await call('POST', '/webhooks/endpoints', {
    url: 'https://receiver.example.com/plants',
    ...body,
  });
  expect(response.statusCode, response.body).toBe(201);
  return response.json() as { id: string; url: string; description: string; disabled: boolean };
}

const keyOf = (id: string) => BigInt(`0x${id.slice(3)}`).toString();

async function storedEndpoint(id: string) {
  const [row] = await t.database.query<Record<string, unknown>>(
    `select url, description, disabled, disabled_reason, secret, previous_secret,
            extract(epoch from previous_secret_until - now())::float8 as grace_left
       from webhook_endpoints where id = $1`,
    [keyOf(id)],
  );
  return row;
}

const expectError = (response: LightMyRequestResponse, status: number, pattern: RegExp) => {
  expect(response.statusCode, response.body).toBe(status);
  const body = response.json();
  expect(body).toStrictEqual({ error: status, message: expect.any(String) });
  expect(body.message).toMatch(pattern);
};

describe('scopes', () => {
  it('answers 403 insufficient_scope to an admin token on the plant API', async () => {
    const response = await t.app.inject({
      method: 'GET',
      url: '/plants',
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    expectError(response, 403, /plant token/);
    expect(response.headers['www-authenticate']).toBe(INSUFFICIENT_SCOPE);
  });

  it('answers 403 insufficient_scope to a plant token on the management API', async () => {
    const response = await call('GET', '/webhooks/endpoints', undefined, {
      authorization: `Bearer ${TOKEN}`,
    });
    expectError(response, 403, /admin token/);
    expect(response.headers['www-authenticate']).toBe(INSUFFICIENT_SCOPE);
  });

  it('answers 401 with the Bearer challenge to no token and to an unknown one', async () => {
    const remoteAddress = '10.9.0.2';
    const none = await t.app.inject({ method: 'GET', url: '/webhooks/endpoints', remoteAddress });
    expectError(none, 401, /bearer token is required/);
    expect(none.headers['www-authenticate']).toBe(CHALLENGE);
    const unknown = await t.app.inject({
      method: 'GET',
      url: '/webhooks/endpoints',
      remoteAddress,
      headers: { authorization: 'Bearer not-a-token' },
    });
    expectError(unknown, 401, /not valid/);
    expect(unknown.headers['www-authenticate']).toBe(`${CHALLENGE}, error="invalid_token"`);
  });

  it('does not count a 403 as a failed authentication; a 401 it counts', async () => {
    const remoteAddress = '10.9.0.1';
    const counted = async () =>
      (
        await t.database.query<{ failures: number }>(
          'select failures from auth_failures where address = $1',
          [remoteAddress],
        )
      )[0]?.failures ?? 0;
    for (let i = 0; i < 6; i++) {
      const inside = await t.app.inject({
        method: 'GET',
        url: '/webhooks/endpoints',
        remoteAddress,
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      expect(inside.statusCode).toBe(403);
      const outside = await t.app.inject({
        method: 'GET',
        url: '/plants',
        remoteAddress,
        headers: { authorization: `Bearer ${ADMIN}` },
      });
      expect(outside.statusCode).toBe(403);
    }
    expect(await counted()).toBe(0);
    const guess = await t.app.inject({
      method: 'GET',
      url: '/webhooks/endpoints',
      remoteAddress,
      headers: { authorization: 'Bearer guess' },
    });
    expect(guess.statusCode).toBe(401);
    expect(await counted()).toBe(1);
  });

  it('refuses every token on the management API when no admin token is configured, naming ADMIN_TOKENS', async () => {
    const plain = await startTestApp({ env: {} });
    const off =
      'the webhook management API is off: no admin token is configured; set ADMIN_TOKENS (or ADMIN_TOKENS_FILE) to turn it on';
    try {
      const plant = await plain.app.inject({
        method: 'GET',
        url: '/webhooks/endpoints',
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      expect(plant.statusCode).toBe(403);
      expect(plant.json()).toStrictEqual({
        error: 403,
        message: `this token is for the plant API; ${off}`,
      });
      const other = await plain.app.inject({
        method: 'GET',
        url: '/webhooks/endpoints',
        headers: { authorization: `Bearer ${ADMIN}` },
      });
      expect(other.statusCode).toBe(401);
      expect(other.headers['www-authenticate']).toBe(`${CHALLENGE}, error="invalid_token"`);
      expect(other.json()).toStrictEqual({ error: 401, message: off });
      const none = await plain.app.inject({ method: 'POST', url: '/webhooks/endpoints' });
      expect(none.statusCode).toBe(401);
      expect(none.headers['www-authenticate']).toBe(CHALLENGE);
      expect(none.json()).toStrictEqual({ error: 401, message: off });
      // The plant API is not concerned: its refusals say what they said.
      const plants = await plain.app.inject({
        method: 'GET',
        url: '/plants',
        headers: { authorization: `Bearer ${ADMIN}` },
      });
      expect(plants.json()).toStrictEqual({ error: 401, message: 'the bearer token is not valid' });
    } finally {
      await plain.close();
    }
  });
});

describe('POST /webhooks/endpoints', () => {
  it('answers 201 with the Endpoint and its Location, stores the secret sealed', async () => {
    const response = await call('POST', '/webhooks/endpoints', {
      url: 'https://receiver.example.com/plants?x=1',
      description: 'greenhouse',
      unknown: 'ignored',
    });
    expect(response.statusCode).toBe(201);
    const endpoint = response.json();
    expect(endpoint).toStrictEqual({
      id: expect.stringMatching(/^ep_[0-9a-f]{16}$/),
      url: 'https://receiver.example.com/plants?x=1',
      description: 'greenhouse',
      disabled: false,
      events: ['newPlant'],
      rateLimit: null,
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      updatedAt: endpoint.createdAt,
    });
    expect(Math.abs(Date.parse(endpoint.createdAt) - Date.now())).toBeLessThan(60_000);
    expect(response.headers.location).toBe(`/webhooks/endpoints/${endpoint.id}`);
    expect(response.body).not.toContain('whsec_');

    const secret = (await call('GET', `${response.headers.location}/secret`)).json().key;
    expect(isEndpointSecret(secret)).toBe(true);
    const row = await storedEndpoint(endpoint.id);
    expect(row).toMatchObject({ url: endpoint.url, description: 'greenhouse', disabled: false });
    expect(row?.secret).toMatch(/^aes256gcm-v2:default:/);
    expect(row?.secret).not.toContain(secret.slice('whsec_'.length));
  });

  it('takes a secret of the client, and defaults description and disabled', async () => {
    const secret = `whsec_${randomBytes(24).toString('base64')}`;
    const endpoint = await create({ secret, disabled: true });
    expect(endpoint).toMatchObject({ description: '', disabled: true });
    expect(endpoint).not.toHaveProperty('disabledReason');
    expect(endpoint).not.toHaveProperty('secret');
    const read = await call('GET', `/webhooks/endpoints/${endpoint.id}/secret`);
    expect(read.json()).toStrictEqual({ key: secret });
    expect(read.headers['cache-control']).toBe('no-store');
  });

  it.each([
    ['a missing url', {}, /body\/url is required/],
    ['a relative url', { url: '/plants' }, /body\/url must be an absolute http or https URL/],
    ['another scheme', { url: 'ftp://example.com/x' }, /body\/url must be an absolute/],
    ['user information', { url: 'https://user:pw@example.com/' }, /body\/url must be/],
    ['a lone surrogate', { url: 'https://example.com/x\ud800y' }, /body\/url must be/],
    ['a url too long', { url: `https://example.com/${'a'.repeat(2030)}` }, /body\/url must be/],
    ['a url with a space', { url: 'https://example.com/a b' }, /body\/url must be/],
    ['a url of another type', { url: 5 }, /body\/url must be a string/],
    [
      'a description too long',
      { url: 'http://x.example', description: 'd'.repeat(1025) },
      /body\/description/,
    ],
    [
      'a disabled that is no boolean',
      { url: 'http://x.example', disabled: 'yes' },
      /body\/disabled/,
    ],
    [
      'a secret without whsec_',
      { url: 'http://x.example', secret: 'sk_live_4eC39HqLyjWDarjtT1zdp7dc' },
      /body\/secret must be whsec_/,
    ],
    [
      'a secret too short',
      { url: 'http://x.example', secret: `whsec_${randomBytes(16).toString('base64')}` },
      /body\/secret/,
    ],
    [
      'a secret too long',
      { url: 'http://x.example', secret: `whsec_${randomBytes(65).toString('base64')}` },
      /body\/secret/,
    ],
    ['no object', [1], /body must be a JSON object/],
  ])('answers 400 naming the field for %s', async (_case, body, message) => {
    const response = await call('POST', '/webhooks/endpoints', body);
    expectError(response, 400, message);
    if (typeof body === 'object' && 'secret' in body) {
      expect(response.body).not.toContain(String(body.secret).replace(/^whsec_/, ''));
    }
  });

  it('accepts a URL of exactly 2048 characters', async () => {
    const url = `https://example.com/${'a'.repeat(2048 - 'https://example.com/'.length)}`;
    expect((await create({ url })).url).toBe(url);
  });
});

describe('an endpoint on a private host', () => {
  const warningsOf = (id: string) =>
    t.logs
      .map((line) => JSON.parse(line))
      .filter((line) => line.level === 'warn' && line.endpoint === id)
      .map((line) => line.msg);
  const warning = (id: string) =>
    `the webhook endpoint ${id} has a loopback or private host: every delivery to it fails "destination not allowed" unless WEBHOOK_ALLOW_PRIVATE_NETWORKS=true`;

  it.each([
    'http://localhost:4000/hook',
    'http://127.0.0.1:4000/hook',
    'http://[::1]:4000/hook',
    'https://10.1.2.3/hook',
  ])(
    'is created (201) from %s, with a warning naming WEBHOOK_ALLOW_PRIVATE_NETWORKS',
    async (url) => {
      const endpoint = await create({ url });
      expect(warningsOf(endpoint.id)).toStrictEqual([warning(endpoint.id)]);
    },
  );

  it('is warned of when a PATCH moves it there, and a public host is not', async () => {
    const endpoint = await create();
    expect(warningsOf(endpoint.id)).toStrictEqual([]);
    const path = `/webhooks/endpoints/${endpoint.id}`;
    expect((await call('PATCH', path, { description: 'x' })).statusCode).toBe(200);
    expect(warningsOf(endpoint.id)).toStrictEqual([]);
    expect((await call('PATCH', path, { url: 'http://192.168.1.20/hook' })).statusCode).toBe(200);
    expect(warningsOf(endpoint.id)).toStrictEqual([warning(endpoint.id)]);
  });

  it('is not warned of when WEBHOOK_ALLOW_PRIVATE_NETWORKS is true', async () => {
    const allowing = await startTestApp({
      env: { ADMIN_TOKENS: ADMIN, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' },
    });
    try {
      const response = await allowing.app.inject({
        method: 'POST',
        url: '/webhooks/endpoints',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        payload: JSON.stringify({ url: 'http://localhost:4000/hook' }),
      });
      expect(response.statusCode).toBe(201);
      expect(allowing.logs.join('\n')).not.toContain('WEBHOOK_ALLOW_PRIVATE_NETWORKS');
    } finally {
      await allowing.close();
    }
  });
});

describe('GET /webhooks/endpoints', () => {
  it('pages through every endpoint in ascending id order, with Link to the next page', async () => {
    for (let i = 0; i < 3; i++) await create({ description: `page ${i}` });
    const all = (await call('GET', '/webhooks/endpoints?limit=100')).json() as { id: string }[];
    expect(all.length).toBeGreaterThanOrEqual(3);
    expect(all.map(({ id }) => id)).toStrictEqual(all.map(({ id }) => id).sort());
    const seen: string[] = [];
    let next: string | undefined = '/webhooks/endpoints?limit=2';
    while (next) {
      const response = await call('GET', next);
      expect(response.statusCode).toBe(200);
      const page = response.json() as { id: string }[];
      expect(page.length).toBeLessThanOrEqual(2);
      seen.push(...page.map(({ id }) => id));
      const link = response.headers.link as string | undefined;
      if (link) {
        expect(link).toBe(`</webhooks/endpoints?limit=2&after=${page.at(-1)?.id}>; rel="next"`);
      } else {
        expect(page.length).toBeLessThan(2);
      }
      next = link?.slice(1, link.indexOf('>'));
    }
    expect(seen).toStrictEqual(all.map(({ id }) => id));
  });

  it('defaults to 50 and returns only endpoints after `after`', async () => {
    const all = (await call('GET', '/webhooks/endpoints')).json() as { id: string }[];
    expect(all.length).toBeLessThanOrEqual(50);
    const first = all[0]?.id as string;
    const rest = (await call('GET', `/webhooks/endpoints?after=${first}&other=x`)).json();
    expect(rest).toStrictEqual(all.slice(1));
  });

  it.each([
    ['limit=0', /querystring\/limit must be an integer from 1 to 100/],
    ['limit=101', /querystring\/limit/],
    ['limit=01', /querystring\/limit/],
    ['limit=1&limit=2', /querystring\/limit must not be given more than once/],
    ['after=5', /querystring\/after must be an endpoint id/],
    ['after=ep_0000000000000001&after=ep_0000000000000002', /querystring\/after/],
  ])('answers 400 to ?%s', async (query, message) => {
    expectError(await call('GET', `/webhooks/endpoints?${query}`), 400, message);
  });
});

describe('GET, PATCH and DELETE /webhooks/endpoints/{id}', () => {
  it('reads an endpoint', async () => {
    const endpoint = await create({ description: 'read me' });
    const response = await call('GET', `/webhooks/endpoints/${endpoint.id}`);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toStrictEqual(endpoint);
  });

  it.each(['application/merge-patch+json', 'application/json'])(
    'merges a patch sent as %s',
    async (contentType) => {
      const endpoint = await create({ description: 'before' });
      const response = await call(
        'PATCH',
        `/webhooks/endpoints/${endpoint.id}`,
        { url: 'http://moved.example.com/hook', unknown: 1 },
        { 'content-type': contentType },
      );
      expect(response.statusCode, response.body).toBe(200);
      const patched = response.json();
      expect(patched).toMatchObject({
        id: endpoint.id,
        url: 'http://moved.example.com/hook',
        description: 'before',
        disabled: false,
      });
      expect(Date.parse(patched.updatedAt)).toBeGreaterThanOrEqual(Date.parse(patched.createdAt));
      expect(await storedEndpoint(endpoint.id)).toMatchObject({
        url: 'http://moved.example.com/hook',
        description: 'before',
      });
    },
  );

  it('resets the description with null, and refuses null for url and disabled', async () => {
    const endpoint = await create({ description: 'some' });
    const path = `/webhooks/endpoints/${endpoint.id}`;
    const reset = await call('PATCH', path, { description: null });
    expect(reset.json()).toMatchObject({ description: '', url: endpoint.url });
    expectError(await call('PATCH', path, { url: null }), 400, /body\/url/);
    expectError(await call('PATCH', path, { disabled: null }), 400, /body\/disabled/);
    expectError(await call('PATCH', path, { url: 'mailto:a@b.c' }), 400, /body\/url/);
    const other = await call('PATCH', path, '{}', { 'content-type': 'text/plain' });
    expectError(other, 415, /application\/merge-patch\+json or application\/json/);
  });

  it('refuses, and changes nothing for, a field PATCH cannot change, saying where it is changed', async () => {
    const endpoint = await create({ description: 'kept' });
    const path = `/webhooks/endpoints/${endpoint.id}`;
    const key = (await call('GET', `${path}/secret`)).json().key;
    const stored = await storedEndpoint(endpoint.id);
    for (const [body, message] of [
      [
        { secret: generateSecret(), description: 'changed' },
        `body/secret cannot be changed by PATCH: POST /webhooks/endpoints/${endpoint.id}/secret/rotate sets a new signing key`,
      ],
      [
        { headers: { 'x-greenhouse': 'north' } },
        `body/headers cannot be set by PATCH: PUT /webhooks/endpoints/${endpoint.id}/headers sets them`,
      ],
      [{ id: 'ep_0000000000000abc' }, 'body/id is set by the service and cannot be changed'],
      [
        { createdAt: '2020-01-01T00:00:00Z' },
        'body/createdAt is set by the service and cannot be changed',
      ],
      [{ configured: true }, 'body/configured is set by the service and cannot be changed'],
      [
        { disabledReason: 'because' },
        'body/disabledReason is set by the service and cannot be changed',
      ],
      [
        { updatedAt: '2020-01-01T00:00:00Z' },
        'body/updatedAt is set by the service and cannot be changed',
      ],
    ] as const) {
      const response = await call('PATCH', path, body);
      expect(response.statusCode, JSON.stringify(body)).toBe(400);
      expect(response.json()).toStrictEqual({ error: 400, message });
    }
    expect(await storedEndpoint(endpoint.id)).toStrictEqual(stored);
    expect((await call('GET', `${path}/secret`)).json()).toStrictEqual({ key });
  });

  it('refuses custom headers in a create, saying where they are set, and creates nothing', async () => {
    const count = () => t.database.query('select count(*)::int as n from webhook_endpoints');
    const before = await count();
    const response = await call('POST', '/webhooks/endpoints', {
      url: 'https://receiver.example.com/plants',
      headers: { 'x-greenhouse': 'north' },
    });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toStrictEqual({
      error: 400,
      message:
        'body/headers cannot be set when creating an endpoint: PUT /webhooks/endpoints/{id}/headers sets them once it exists',
    });
    expect(await count()).toStrictEqual(before);
  });

  it('disabling fails the pending deliveries; enabling clears the reason and the failing run', async () => {
    const endpoint = await create();
    const key = keyOf(endpoint.id);
    await t.database.query(
      `insert into webhook_deliveries (event_id, endpoint_id, body) values ($1, $2, '{"id":7}')`,
      [randomUUID(), key],
    );
    const disabled = await call('PATCH', `/webhooks/endpoints/${endpoint.id}`, { disabled: true });
    expect(disabled.json()).toMatchObject({ disabled: true });
    expect(disabled.json()).not.toHaveProperty('disabledReason');
    const deliveries = await t.database.query<{ failed: boolean; last_error: string }>(
      'select failed_at is not null as failed, last_error from webhook_deliveries where endpoint_id = $1',
      [key],
    );
    expect(deliveries).toStrictEqual([{ failed: true, last_error: 'endpoint disabled' }]);
    const log = await call('GET', `/webhooks/endpoints/${endpoint.id}/attempts`);
    expect(log.json()).toStrictEqual([
      {
        id: expect.any(String),
        eventId: expect.any(String),
        plantId: 7,
        trigger: 'delivery',
        status: 'failed',
        error: 'endpoint disabled',
        durationMs: 0,
        attemptedAt: expect.any(String),
      },
    ]);

    await t.database.query(
      `update webhook_endpoints set disabled_reason = 'the receiver answered 410 Gone',
              failing_since = now() where id = $1`,
      [key],
    );
    const read = await call('GET', `/webhooks/endpoints/${endpoint.id}`);
    expect(read.json().disabledReason).toBe('the receiver answered 410 Gone');
    const enabled = await call('PATCH', `/webhooks/endpoints/${endpoint.id}`, { disabled: false });
    expect(enabled.json()).toMatchObject({ disabled: false });
    expect(enabled.json()).not.toHaveProperty('disabledReason');
    const [row] = await t.database.query<{ reason: string | null; failing: boolean }>(
      'select disabled_reason as reason, failing_since is not null as failing from webhook_endpoints where id = $1',
      [key],
    );
    expect(row).toStrictEqual({ reason: null, failing: false });
  });

  it('deletes an endpoint with its deliveries and attempts; then it is 404 everywhere', async () => {
    const endpoint = await create();
    const key = keyOf(endpoint.id);
    const eventId = randomUUID();
    await t.database.query(
      `insert into webhook_deliveries (event_id, endpoint_id, body) values ($1, $2, '{}')`,
      [eventId, key],
    );
    await t.database.query(
      `insert into webhook_attempts (endpoint_id, event_id, plant_id, succeeded, duration_ms)
       values ($1, $2, 1, false, 5)`,
      [key, eventId],
    );
    const path = `/webhooks/endpoints/${endpoint.id}`;
    const deleted = await call('DELETE', path);
    expect(deleted.statusCode).toBe(204);
    expect(deleted.body).toBe('');
    const left = await t.database.query<{ n: number }>(
      `select (select count(*) from webhook_deliveries where endpoint_id = $1)::int
            + (select count(*) from webhook_attempts where endpoint_id = $1)::int
            + (select count(*) from webhook_endpoints where id = $1)::int as n`,
      [key],
    );
    expect(left).toStrictEqual([{ n: 0 }]);
    for (const [method, url, body] of [
      ['GET', path],
      ['PATCH', path, { description: 'x' }],
      ['DELETE', path],
      ['GET', `${path}/secret`],
      ['POST', `${path}/secret/rotate`, {}],
      ['GET', `${path}/attempts`],
      ['POST', `${path}/recover`, { since: '2020-01-01T00:00:00Z' }],
    ] as [Method, string, unknown?][]) {
      expectError(await call(method, url, body), 404, /no webhook endpoint has this id/);
    }
  });

  it.each(['ep_1', 'ep_00000000000000AB', '42', '3'])(
    'answers 404 to the malformed id %s, saying the form ids take',
    async (id) => {
      const form =
        /^no webhook endpoint has this id: endpoint ids are ep_ and 16 hexadecimal digits, such as ep_0000000000000001$/;
      expectError(await call('GET', `/webhooks/endpoints/${id}`), 404, form);
      expectError(await call('GET', `/webhooks/endpoints/${id}/attempts`), 404, form);
    },
  );

  it.each(['ep_ffffffffffffffff', 'ep_0000000000000000', 'ep_00000000000000ff'])(
    'answers 404 to the well-formed id %s of no endpoint, saying only that it is unknown',
    async (id) => {
      const unknown = /^no webhook endpoint has this id$/;
      expectError(await call('GET', `/webhooks/endpoints/${id}`), 404, unknown);
      expectError(await call('GET', `/webhooks/endpoints/${id}/attempts`), 404, unknown);
    },
  );

  it('answers 405 with Allow to the methods a path does not serve, after authentication', async () => {
    const endpoint = await create();
    const put = await call('PUT', `/webhooks/endpoints/${endpoint.id}`, {});
    expect(put.statusCode).toBe(405);
    expect(put.headers.allow).toBe('GET, HEAD, PATCH, DELETE');
    const rotate = await call('GET', `/webhooks/endpoints/${endpoint.id}/secret/rotate`);
    expect(rotate.statusCode).toBe(405);
    expect(rotate.headers.allow).toBe('POST');
    const anonymous = await t.app.inject({
      method: 'PUT',
      url: '/webhooks/endpoints',
      remoteAddress: '10.9.0.3',
    });
    expect(anonymous.statusCode).toBe(401);
  });
});

describe('secrets', () => {
  it('rotates: the new key is read back, the old one kept for the grace', async () => {
    const endpoint = await create();
    const path = `/webhooks/endpoints/${endpoint.id}/secret`;
    const before = (await call('GET', path)).json().key;
    const storedBefore = (await storedEndpoint(endpoint.id))?.secret;
    const rotated = await call('POST', `${path}/rotate`);
    expect(rotated.statusCode).toBe(204);
    expect(rotated.body).toBe('');
    const after = (await call('GET', path)).json().key;
    expect(isEndpointSecret(after)).toBe(true);
    expect(after).not.toBe(before);
    const row = await storedEndpoint(endpoint.id);
    expect(row?.previous_secret).toBe(storedBefore);
    expect(row?.grace_left).toBeGreaterThan(3590);
    expect(row?.grace_left).toBeLessThanOrEqual(3600);

    const given = `whsec_${randomBytes(48).toString('base64')}`;
    expect((await call('POST', `${path}/rotate`, { key: given })).statusCode).toBe(204);
    expect((await call('GET', path)).json()).toStrictEqual({ key: given });
  });

  it('answers 400 naming key for a key that is not one, without echoing it', async () => {
    const endpoint = await create();
    const key = `whsec_${randomBytes(8).toString('base64')}`;
    const response = await call('POST', `/webhooks/endpoints/${endpoint.id}/secret/rotate`, {
      key,
    });
    expectError(response, 400, /body\/key must be whsec_/);
    expect(response.body).not.toContain(key);
  });

  it("does not open a sealed secret copied to another endpoint's row", async () => {
    const [from, to] = [await create(), await create()];
    const secret = (await call('GET', `/webhooks/endpoints/${from.id}/secret`)).json().key;
    await t.database.query(
      'update webhook_endpoints set secret = (select secret from webhook_endpoints where id = $1) where id = $2',
      [keyOf(from.id), keyOf(to.id)],
    );
    const copied = await call('GET', `/webhooks/endpoints/${to.id}/secret`);
    expectError(copied, 500, /cannot be read with the encryption key/);
    expect(copied.body).not.toContain(secret.slice('whsec_'.length));
    expect((await call('GET', `/webhooks/endpoints/${from.id}/secret`)).json()).toStrictEqual({
      key: secret,
    });
  });

  it('answers 500 naming the key id the ring lacks, and says to add it back rather than rotate', async () => {
    const endpoint = await create();
    const sealed = sealSecret(generateSecret(), [ringKey('k0')], {
      endpoint: keyOf(endpoint.id),
      field: 'secret',
    });
    await t.database.query('update webhook_endpoints set secret = $1 where id = $2', [
      sealed,
      keyOf(endpoint.id),
    ]);
    const response = await call('GET', `/webhooks/endpoints/${endpoint.id}/secret`);
    expect(response.statusCode).toBe(500);
    expect(response.json()).toStrictEqual({
      error: 500,
      message:
        'the secret of this endpoint is sealed under the key id "k0", which WEBHOOK_ENCRYPTION_KEYS does not hold: add that key back to WEBHOOK_ENCRYPTION_KEYS (rotating it instead gives the endpoint a key its receivers do not know)',
    });
  });

  it('never writes a secret in the log', async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const endpoint = await create({ secret });
    await call('GET', `/webhooks/endpoints/${endpoint.id}/secret`);
    await call('POST', `/webhooks/endpoints/${endpoint.id}/secret/rotate`, { key: secret });
    const log = t.logs.join('\n');
    expect(log).not.toContain(secret.slice(6));
    expect(log).not.toContain(ADMIN);
  });

  it('stores the secret as it is without WEBHOOK_ENCRYPTION_KEY', async () => {
    const plain = await startTestApp({ env: { ADMIN_TOKENS: ADMIN } });
    try {
      const secret = `whsec_${randomBytes(24).toString('base64')}`;
      const response = await plain.app.inject({
        method: 'POST',
        url: '/webhooks/endpoints',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        payload: JSON.stringify({ url: 'https://example.com/', secret }),
      });
      expect(response.statusCode).toBe(201);
      const rows = await plain.database.query<{ secret: string }>(
        'select secret from webhook_endpoints',
      );
      expect(rows).toStrictEqual([{ secret: `plain:${secret}` }]);
    } finally {
      await plain.close();
    }
  });
});

describe('GET /webhooks/endpoints/{id}/attempts', () => {
  it('lists attempts newest first, pages with after, filters by status', async () => {
    const endpoint = await create();
    const key = keyOf(endpoint.id);
    const eventId = randomUUID();
    const attempt = (
      plantId: string,
      succeeded: boolean,
      status: number | null,
      error: string | null,
    ) =>
      t.database.query(
        `insert into webhook_attempts
           (endpoint_id, event_id, plant_id, succeeded, response_status, error, duration_ms, attempted_at)
         values ($1, $2, $3, $4, $5, $6, 12, '2026-11-25T10:00:00.5Z')`,
        [key, eventId, plantId, succeeded, status, error],
      );
    await attempt('9223372036854775807', false, null, 'connection refused');
    await attempt('-9223372036854775808', false, 503, null);
    await attempt('9007199254740993', true, 200, null);
    const path = `/webhooks/endpoints/${endpoint.id}/attempts`;
    const response = await call('GET', path);
    expect(response.statusCode).toBe(200);
    const webhookId = `msg_${eventId.replaceAll('-', '')}`;
    // Exact JSON integers: compared as text, which a parse would round.
    expect(response.body).toContain('"plantId":9223372036854775807,');
    expect(response.body).toContain('"plantId":-9223372036854775808,');
    expect(response.body).toContain('"plantId":9007199254740993,');
    const page = response.json() as Record<string, unknown>[];
    expect(page.map(({ status }) => status)).toStrictEqual(['succeeded', 'failed', 'failed']);
    expect(page[2]).toStrictEqual({
      id: expect.stringMatching(/^att_[0-9a-f]{16}$/),
      eventId: webhookId,
      plantId: expect.any(Number),
      trigger: 'delivery',
      status: 'failed',
      error: 'connection refused',
      durationMs: 12,
      attemptedAt: '2026-11-25T10:00:00.500Z',
    });
    expect(page[1]).toMatchObject({ responseStatus: 503 });
    expect(page[1]).not.toHaveProperty('error');
    const ids = page.map(({ id }) => id as string);
    expect(ids).toStrictEqual([...ids].sort().reverse());

    const first = await call('GET', `${path}?limit=2`);
    expect(first.json().map(({ id }: { id: string }) => id)).toStrictEqual(ids.slice(0, 2));
    expect(first.headers.link).toBe(`<${path}?limit=2&after=${ids[1]}>; rel="next"`);
    const second = await call('GET', `${path}?limit=2&after=${ids[1]}`);
    expect(second.json().map(({ id }: { id: string }) => id)).toStrictEqual(ids.slice(2));
    expect(second.headers.link).toBeUndefined();

    const failed = await call('GET', `${path}?status=failed&limit=1`);
    expect(failed.json().map(({ id }: { id: string }) => id)).toStrictEqual([ids[1]]);
    expect(failed.headers.link).toBe(`<${path}?limit=1&after=${ids[1]}&status=failed>; rel="next"`);
    const succeeded = await call('GET', `${path}?status=succeeded`);
    expect(succeeded.json().map(({ id }: { id: string }) => id)).toStrictEqual([ids[0]]);
  });

  it('answers an empty array for an endpoint without attempts', async () => {
    const endpoint = await create();
    const response = await call('GET', `/webhooks/endpoints/${endpoint.id}/attempts`);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toStrictEqual([]);
  });

  it.each([
    ['status=ok', /querystring\/status must be succeeded or failed/],
    ['limit=101', /querystring\/limit must be an integer from 1 to 100/],
    ['after=ep_0000000000000001', /querystring\/after must be an attempt id/],
    ['status=failed&status=failed', /querystring\/status must not be given more than once/],
  ])('answers 400 to ?%s', async (query, message) => {
    const endpoint = await create();
    const response = await call('GET', `/webhooks/endpoints/${endpoint.id}/attempts?${query}`);
    expectError(response, 400, message);
  });
});

describe('POST /webhooks/endpoints/{id}/recover', () => {
  it('makes the deliveries that failed since then due again, as new', async () => {
    const endpoint = await create();
    const key = keyOf(endpoint.id);
    const delivery = (failedAt: string | null) =>
      t.database.query(
        `insert into webhook_deliveries
           (event_id, endpoint_id, body, attempts, failed_at, last_status, last_error, next_attempt_at)
         values ($1, $2, '{}', 8, $3, 500, 'gave up', now() + interval '1 hour')`,
        [randomUUID(), key, failedAt],
      );
    await delivery('2026-01-01T00:00:00Z');
    await delivery('2026-06-01T00:00:00Z');
    await delivery('2026-06-02T00:00:00Z');
    await delivery(null);
    const response = await call('POST', `/webhooks/endpoints/${endpoint.id}/recover`, {
      since: '2026-06-01T00:00:00+00:00',
    });
    expect(response.statusCode, response.body).toBe(202);
    expect(response.json()).toStrictEqual({ recovering: 2 });
    const rows = await t.database.query<Record<string, unknown>>(
      `select failed_at is null as pending, attempts, last_status, last_error,
              next_attempt_at <= now() as due
         from webhook_deliveries where endpoint_id = $1 order by id`,
      [key],
    );
    expect(rows).toStrictEqual([
      { pending: false, attempts: 8, last_status: 500, last_error: 'gave up', due: false },
      { pending: true, attempts: 0, last_status: null, last_error: null, due: true },
      { pending: true, attempts: 0, last_status: null, last_error: null, due: true },
      { pending: true, attempts: 8, last_status: 500, last_error: 'gave up', due: false },
    ]);
  });

  it('answers 409 for a disabled endpoint', async () => {
    const endpoint = await create({ disabled: true });
    const response = await call('POST', `/webhooks/endpoints/${endpoint.id}/recover`, {
      since: '2026-01-01T00:00:00Z',
    });
    expectError(response, 409, /disabled/);
  });

  it.each([
    ['2026-01-01'],
    ['2026-01-01 00:00:00Z'],
    ['2026-02-30T00:00:00Z'],
    ['2026-01-01T24:00:00Z'],
    ['2026-01-01T00:00:00'],
    ['yesterday'],
    [5],
  ])('answers 400 naming since for %s', async (since) => {
    const endpoint = await create();
    const response = await call('POST', `/webhooks/endpoints/${endpoint.id}/recover`, { since });
    expectError(response, 400, /body\/since must be an RFC 3339 date-time/);
  });
});
