// Custom headers of an endpoint: set and read through the management API, stored sealed for
// their row, and sent with every delivery to it, after the service's own headers.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openSecret } from '../../../src/webhooks/security/secrets.js';
import { postPlant, startTestApp, type TestApp, TOKEN } from '../../helpers/app.js';
import { eventually } from '../../helpers/eventually.js';
import { type ReceivedRequest, startReceiver, WEBHOOK_SECRET } from '../../helpers/receiver.js';
import { ringKey } from '../../helpers/sealed.js';
import { webhookApps } from '../../helpers/webhook-apps.js';

const ADMIN = 'admin-token-headers-8e21';
// Values that stand for a receiver's credentials: spelled so that none appears anywhere by chance.
const CREDENTIAL = 'Bearer receiver-credential-5b9d07';
const OTHER_CREDENTIAL = 'Bearer receiver-credential-c4e611';

const apps = webhookApps(ADMIN, { retrySchedule: [] });
const { app, track } = apps;
const receiver = () => apps.receiver(WEBHOOK_SECRET);

type Method = 'GET' | 'PUT' | 'POST' | 'DELETE' | 'PATCH';

const call = (t: TestApp, method: Method, url: string, body?: unknown, token = ADMIN) =>
  t.app.inject({
    method,
    url,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    ...(body !== undefined && { payload: JSON.stringify(body) }),
  });

/** A new endpoint through the API, signed with the receivers' secret: its `ep_` id. */
async function endpoint(t: TestApp, url = 'https://receiver.example.com/hook'): Promise<string> {
  const created = await call(t, 'POST', '/webhooks/endpoints', { url, secret: WEBHOOK_SECRET });
  expect(created.statusCode, created.body).toBe(201);
  return created.json().id;
}

const headersPath = (id: string) => `/webhooks/endpoints/${id}/headers`;
const put = (t: TestApp, id: string, headers: unknown) =>
  call(t, 'PUT', headersPath(id), { headers });

/** The stored headers column of the endpoint `id` names, and its row key. */
async function stored(t: TestApp, id: string) {
  const [row] = await t.database.query<{ key: string; headers: string | null }>(
    `select id::text as key, headers from webhook_endpoints
      where 'ep_' || lpad(to_hex(id), 16, '0') = $1`,
    [id],
  );
  return row;
}

const attempts = (t: TestApp) =>
  t.database.query<{ succeeded: boolean; error: string | null }>(
    'select succeeded, error from webhook_attempts order by id',
  );

describe('PUT and GET /webhooks/endpoints/{id}/headers', () => {
  const CONFIGURED = 'https://configured.example.com/hook';
  // One service for the API alone: no plant is created, so nothing is delivered.
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      env: { ADMIN_TOKENS: ADMIN, WEBHOOK_URLS: CONFIGURED, WEBHOOK_SECRET },
    });
  });
  afterAll(() => t.close());

  it('reads back what was set, names in their case and order, and {} before and after clearing', async () => {
    const id = await endpoint(t);
    const none = await call(t, 'GET', headersPath(id));
    expect(none.statusCode).toBe(200);
    expect(none.json()).toStrictEqual({ headers: {} });
    expect((await stored(t, id))?.headers).toBeNull();

    const headers = { 'X-Greenhouse': 'north', Authorization: CREDENTIAL, 'x-empty': '' };
    const before = (await call(t, 'GET', `/webhooks/endpoints/${id}`)).json().updatedAt;
    const set = await put(t, id, headers);
    expect(set.statusCode, set.body).toBe(204);
    expect(set.body).toBe('');
    const read = await call(t, 'GET', headersPath(id));
    expect(read.statusCode).toBe(200);
    expect(read.headers['cache-control']).toBe('no-store');
    expect(read.body).toBe(JSON.stringify({ headers }));
    expect((await call(t, 'GET', `/webhooks/endpoints/${id}`)).json().updatedAt >= before).toBe(
      true,
    );

    // A PUT replaces the whole set.
    expect((await put(t, id, { 'X-Other': 'one' })).statusCode).toBe(204);
    expect((await call(t, 'GET', headersPath(id))).json()).toStrictEqual({
      headers: { 'X-Other': 'one' },
    });
    expect((await put(t, id, {})).statusCode).toBe(204);
    expect((await call(t, 'GET', headersPath(id))).json()).toStrictEqual({ headers: {} });
    expect((await stored(t, id))?.headers).toBeNull();
  });

  it('takes 20 headers, and refuses 21 or more than 8192 characters in all', async () => {
    const id = await endpoint(t);
    const many = (n: number) =>
      Object.fromEntries(Array.from({ length: n }, (_, i) => [`X-H${i}`, `v${i}`]));
    expect((await put(t, id, many(20))).statusCode).toBe(204);
    const refused = await put(t, id, many(21));
    expect(refused.statusCode).toBe(400);
    expect(refused.json()).toStrictEqual({
      error: 400,
      message: 'body/headers must hold at most 20 headers',
    });
    const large = Object.fromEntries(
      Array.from({ length: 3 }, (_, i) => [`X-Large${i}`, 'v'.repeat(4000)]),
    );
    expect((await put(t, id, large)).json().message).toBe(
      'body/headers must hold names and values of at most 8192 characters in all',
    );
    expect((await call(t, 'GET', headersPath(id))).json()).toStrictEqual({ headers: many(20) });
  });

  it.each([
    'Webhook-Id',
    'webhook-signature',
    'WEBHOOK-TIMESTAMP',
    'webhook-anything',
    'Content-Type',
    'content-length',
    'CONTENT-ENCODING',
    'Host',
    'Connection',
    'transfer-encoding',
    'User-Agent',
    'Keep-Alive',
    'upgrade',
    'Expect',
  ])('refuses the header %s, which the service sets, naming it', async (name) => {
    const id = await endpoint(t);
    const refused = await put(t, id, { 'X-Fine': 'yes', [name]: 'value' });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().message).toBe(
      `body/headers must not set "${name}": the service sets webhook-*, content-*, host, connection, transfer-encoding, user-agent, keep-alive, upgrade, expect itself`,
    );
    expect((await stored(t, id))?.headers).toBeNull();
  });

  it.each([
    ['a space', 'X Greenhouse'],
    ['a colon', 'X-Greenhouse:'],
    ['a non-ASCII letter', 'X-Gewächshaus'],
    ['nothing', ''],
    ['129 characters', `X-${'a'.repeat(127)}`],
  ])('refuses a name with %s, naming it', async (_, name) => {
    const id = await endpoint(t);
    const refused = await put(t, id, { [name]: 'value' });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().message).toMatch(/^body\/headers must have names that are HTTP tokens/);
    const quoted = JSON.stringify(name.length > 64 ? `${name.slice(0, 64)}...` : name);
    expect(refused.json().message).toContain(`${quoted} is not`);
  });

  it('refuses one name twice in two cases, naming it', async () => {
    const id = await endpoint(t);
    const refused = await put(t, id, { 'X-Greenhouse': 'north', 'x-greenhouse': 'south' });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().message).toBe(
      'body/headers must not name "x-greenhouse" twice: header names are case-insensitive',
    );
  });

  it.each([
    ['a line feed', `${CREDENTIAL}\nX-Injected: yes`],
    ['a carriage return', `${CREDENTIAL}\r`],
    ['a NUL', `${CREDENTIAL}\u0000`],
    ['a control character', `${CREDENTIAL}\u0007`],
    ['a non-ASCII character', `${CREDENTIAL}é`],
    ['a leading space', ` ${CREDENTIAL}`],
    ['a trailing tab', `${CREDENTIAL}\t`],
    ['4097 characters', `${CREDENTIAL}${'x'.repeat(4097 - CREDENTIAL.length)}`],
    ['a number', 42],
    ['null', null],
  ])('refuses a value with %s, naming its header and never quoting it', async (_, value) => {
    const id = await endpoint(t);
    const refused = await put(t, id, { 'X-Fine': 'yes', Authorization: value });
    expect(refused.statusCode).toBe(400);
    const { message } = refused.json();
    expect(message).toMatch(/^body\/headers must give "Authorization" a/);
    expect(message).not.toContain('receiver-credential');
    expect(t.logs.join('\n')).not.toContain('receiver-credential');
  });

  it('takes a value of 4096 printable characters with inner spaces and tabs', async () => {
    const id = await endpoint(t);
    const value = `a \t${'~'.repeat(4091)} b`;
    expect(value).toHaveLength(4096);
    expect((await put(t, id, { 'X-Long': value })).statusCode).toBe(204);
    expect((await call(t, 'GET', headersPath(id))).json()).toStrictEqual({
      headers: { 'X-Long': value },
    });
  });

  it.each([
    ['not an object', { headers: ['X-A', 'b'] }, 'body/headers must be a JSON object'],
    ['absent', {}, 'body/headers is required'],
  ])('refuses headers that are %s', async (_, body, message) => {
    const id = await endpoint(t);
    const refused = await call(t, 'PUT', headersPath(id), body);
    expect(refused.statusCode).toBe(400);
    expect(refused.json().message).toMatch(new RegExp(`^${message.replaceAll('/', '\\/')}`));
  });

  it('answers 404 for no endpoint, 409 to a PUT on a configured one, 405 to other methods', async () => {
    const id = await endpoint(t);
    expect((await call(t, 'DELETE', `/webhooks/endpoints/${id}`)).statusCode).toBe(204);
    for (const missing of [id, 'ep_1', 'ep_ffffffffffffffff']) {
      for (const [method, body] of [
        ['GET', undefined],
        ['PUT', { headers: {} }],
      ] as const) {
        const answer = await call(t, method, headersPath(missing), body);
        expect(answer.statusCode, `${method} ${missing}`).toBe(404);
        expect(answer.json().message).toBe(
          missing === 'ep_1'
            ? 'no webhook endpoint has this id: endpoint ids are ep_ and 16 hexadecimal digits, such as ep_0000000000000001'
            : 'no webhook endpoint has this id',
        );
      }
    }
    const configured = (await call(t, 'GET', '/webhooks/endpoints?limit=100'))
      .json()
      .find((listed: { url: string }) => listed.url === CONFIGURED);
    expect(configured.configured).toBe(true);
    expect((await call(t, 'GET', headersPath(configured.id))).json()).toStrictEqual({
      headers: {},
    });
    const refused = await put(t, configured.id, { 'X-Greenhouse': 'north' });
    expect(refused.statusCode).toBe(409);
    expect(refused.json().message).toMatch(/WEBHOOK_URLS/);
    expect((await stored(t, configured.id))?.headers).toBeNull();

    const other = await endpoint(t);
    const post = await call(t, 'POST', headersPath(other), { headers: {} });
    expect(post.statusCode).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD, PUT');
    const plantToken = await call(t, 'PUT', headersPath(other), { headers: {} }, TOKEN);
    expect(plantToken.statusCode).toBe(403);
  });
});

describe('custom headers at rest', () => {
  it('are sealed for their row and field with WEBHOOK_ENCRYPTION_KEYS, and a copy opens nowhere else', async () => {
    const keys = [ringKey('k1')];
    const [a, b] = [await receiver(), await receiver()];
    const t = await app({ encryptionKeys: keys });
    const [idA, idB] = [await endpoint(t, a.url), await endpoint(t, b.url)];
    expect((await put(t, idA, { Authorization: CREDENTIAL })).statusCode).toBe(204);
    const rowA = await stored(t, idA);
    expect(rowA?.headers).toMatch(/^aes256gcm-v2:k1:/);
    expect(rowA?.headers).not.toContain('receiver-credential');
    const place = { endpoint: rowA?.key ?? '', field: 'headers' } as const;
    expect(openSecret(rowA?.headers ?? '', keys, place)).toBe(
      JSON.stringify({ Authorization: CREDENTIAL }),
    );
    // Sealed for the headers field: it does not open as the row's secret.
    expect(() => openSecret(rowA?.headers ?? '', keys, { ...place, field: 'secret' })).toThrow();

    // Copied to another endpoint's row: it does not open there, and is never sent from there.
    const rowB = await stored(t, idB);
    await t.database.query('update webhook_endpoints set headers = $1 where id = $2', [
      rowA?.headers,
      rowB?.key,
    ]);
    const unreadable = await call(t, 'GET', headersPath(idB));
    expect(unreadable.statusCode).toBe(500);
    expect(unreadable.json().message).toBe(
      'the custom headers of this endpoint cannot be read with the encryption key this service has; set them again to replace them',
    );
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const [toA] = await a.waitFor(1);
    expect(toA?.headers.authorization).toBe(CREDENTIAL);
    const log = await eventually(
      () => attempts(t),
      (rows) => rows.length === 2,
    );
    expect(log).toContainEqual({
      succeeded: false,
      error: "the endpoint's custom headers cannot be read",
    });
    expect(b.requests).toHaveLength(0);

    // Set again, they open and go with the next delivery.
    expect((await put(t, idB, { Authorization: OTHER_CREDENTIAL })).statusCode).toBe(204);
    expect((await postPlant(t.app, { id: 2, name: 'Aloe' })).statusCode).toBe(200);
    const [toB] = await b.waitFor(1);
    expect(toB?.headers.authorization).toBe(OTHER_CREDENTIAL);
    const logs = t.logs.join('\n');
    expect(logs).not.toContain('receiver-credential');
  });
});

describe('deliveries with custom headers', () => {
  it('carry them after the service’s own, and a change applies to the next delivery', async () => {
    const hook = await receiver();
    const t = await app({ encryptionKeys: [ringKey('k1')] });
    const id = await endpoint(t, hook.url);
    const first = { Authorization: CREDENTIAL, 'X-Greenhouse': 'north', 'X-Empty': '' };
    expect((await put(t, id, first)).statusCode).toBe(204);
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const [one] = await hook.waitFor(1);
    expect(one).toMatchObject({ body: '{"id":1,"name":"Aloe"}', verified: true });
    expect(one?.headers).toMatchObject({
      authorization: CREDENTIAL,
      'x-greenhouse': 'north',
      'x-empty': '',
      'content-type': 'application/json',
      'user-agent': 'plant-store-webhooks/1.0.0',
    });

    expect((await put(t, id, { 'X-Greenhouse': 'south' })).statusCode).toBe(204);
    expect((await postPlant(t.app, { id: 2, name: 'Aloe' })).statusCode).toBe(200);
    const [, two] = await hook.waitFor(2);
    expect(two?.headers['x-greenhouse']).toBe('south');
    expect(two?.headers.authorization).toBeUndefined();
    expect(two?.headers['x-empty']).toBeUndefined();
    expect(two?.verified).toBe(true);

    expect((await put(t, id, {})).statusCode).toBe(204);
    expect((await postPlant(t.app, { id: 3, name: 'Aloe' })).statusCode).toBe(200);
    const [, , three] = await hook.waitFor(3);
    expect(Object.keys(three?.headers ?? {}).filter((name) => name.startsWith('x-'))).toEqual([]);

    const log = await eventually(
      () => attempts(t),
      (rows) => rows.length === 3,
    );
    expect(log.every((row) => row.succeeded)).toBe(true);
    expect(t.logs.join('\n')).not.toContain('receiver-credential');
  });

  it('go with every attempt of a delivery, retries included', async () => {
    let n = 0;
    const hook = await startReceiver(() => ({ status: n++ === 0 ? 503 : 200 }), {
      secret: WEBHOOK_SECRET,
    });
    track(hook);
    const t = await app({ retrySchedule: [0.05] });
    const id = await endpoint(t, hook.url);
    expect((await put(t, id, { 'X-Greenhouse': 'north' })).statusCode).toBe(204);
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const requests: ReceivedRequest[] = await hook.waitFor(2);
    expect(requests.map((request) => request.headers['x-greenhouse'])).toStrictEqual([
      'north',
      'north',
    ]);
    expect(requests[0]?.headers['webhook-id']).toBe(requests[1]?.headers['webhook-id']);
  });
});
