import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postPlant, startTestApp, type TestApp, TOKEN } from '../helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const auth = { authorization: `Bearer ${TOKEN}` };

function get(url: string, headers: Record<string, string> = auth) {
  return t.app.inject({ method: 'GET', url, headers });
}

/** Stores plants with SQL, beside the service: ids as text so that nothing rounds them. */
async function store(...plants: Array<{ id: string; name: string; tag?: string }>) {
  await t.database.query(
    'insert into plants (id, name, tag) select * from unnest($1::int8[], $2::text[], $3::text[])',
    [plants.map((p) => p.id), plants.map((p) => p.name), plants.map((p) => p.tag ?? null)],
  );
}

/** The answer is the Error body with this status, in JSON, with a request id. */
function expectError(response: LightMyRequestResponse, status: number, message?: string) {
  expect(response.statusCode).toBe(status);
  expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
  expect(response.headers['x-request-id']).toBeTruthy();
  const body = response.json();
  expect(Object.keys(body).sort()).toStrictEqual(['error', 'message']);
  expect(body.error).toBe(status);
  if (message !== undefined) expect(body.message).toBe(message);
}

const notCanonical = 'params/id must be an integer in canonical decimal form, such as 42 or -7';
const outOfRange = 'params/id must be an integer in the int64 range';

describe('GET /plants/{id}', () => {
  beforeAll(() =>
    store(
      { id: '9223372036854775807', name: 'Largest', tag: 'edge' },
      { id: '-9223372036854775808', name: 'Smallest' },
      { id: '9007199254740993', name: 'Past 2^53', tag: '' },
      { id: '0', name: 'Zero', tag: 'nil' },
    ),
  );

  it.each([
    ['9223372036854775807', '{"id":9223372036854775807,"name":"Largest","tag":"edge"}'],
    ['-9223372036854775808', '{"id":-9223372036854775808,"name":"Smallest"}'],
    ['9007199254740993', '{"id":9007199254740993,"name":"Past 2^53","tag":""}'],
    ['0', '{"id":0,"name":"Zero","tag":"nil"}'],
  ])('answers the plant %s with its id as an exact JSON integer', async (id, body) => {
    const response = await get(`/plants/${id}`);
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(response.body).toBe(body);
  });

  it('leaves tag out when the plant has none, and answers "" when its tag is empty', async () => {
    expect((await get('/plants/-9223372036854775808')).json()).not.toHaveProperty('tag');
    expect((await get('/plants/9007199254740993')).json().tag).toBe('');
  });

  it.each([
    ['a leading U+FEFF', '\ufeffMonstera'],
    ['quotes, backslashes and control characters', 'a "b" \\ c\u0001\u001f\n\t'],
    ['U+2028 and U+2029', 'line\u2028paragraph\u2029'],
    ['emoji and combining marks', '🌵 café\u0301'],
  ])('gives back a name and tag with %s exactly as they were created', async (_, text) => {
    const id = 1000 + Math.floor(Math.random() * 1e9);
    expect((await postPlant(t.app, { id, name: text, tag: text })).statusCode).toBe(200);
    const response = await get(`/plants/${id}`);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toStrictEqual({ id, name: text, tag: text });
  });

  it('answers 404 with the Error body when no plant has the id', async () => {
    expectError(await get('/plants/424242'), 404, 'no plant has the id 424242');
  });

  it.each(['-0', '007', '00', '+5', '1.0', '1e3', 'abc', '0x1F', '%20%31', '1%20', '-'])(
    'answers 400 naming the parameter to the id %s, which is not canonical decimal',
    async (id) => {
      expectError(await get(`/plants/${id}`), 400, notCanonical);
    },
  );

  it('answers 400 to an empty id, naming the list as GET /plants', async () => {
    expectError(
      await get('/plants/'),
      400,
      'params/id is empty: name a plant, as in /plants/42; the list of plants is GET /plants',
    );
  });

  it.each(['9223372036854775808', '-9223372036854775809', '1'.repeat(500)])(
    'answers 400 to the id %s, outside int64',
    async (id) => {
      expectError(await get(`/plants/${id}`), 400, outOfRange);
    },
  );

  it('reads a percent-encoded digit as the digit', async () => {
    expect((await get('/plants/%30')).body).toBe('{"id":0,"name":"Zero","tag":"nil"}');
  });

  it.each(['%ZZ', '%', '%FF', '1%2'])(
    'answers 400 with the Error body to the malformed encoding %s',
    async (id) => {
      expectError(await get(`/plants/${id}`), 400, 'the request URL is malformed');
    },
  );

  it('answers HEAD with the status and headers of GET and no body', async () => {
    const found = await t.app.inject({ method: 'HEAD', url: '/plants/0', headers: auth });
    expect(found.statusCode).toBe(200);
    expect(found.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(found.body).toBe('');
    const missing = await t.app.inject({ method: 'HEAD', url: '/plants/1', headers: auth });
    expect(missing.statusCode).toBe(404);
  });
});

describe('DELETE /plants/{id}', () => {
  const del = (id: string, headers: Record<string, string> = auth, payload?: string) =>
    t.app.inject({ method: 'DELETE', url: `/plants/${id}`, headers, payload });

  it('answers 204 with no body and removes the plant', async () => {
    await store({ id: '9223372036854775806', name: 'Doomed', tag: 'x' });
    const response = await del('9223372036854775806');
    expect(response.statusCode).toBe(204);
    expect(response.body).toBe('');
    expect(response.headers['content-type']).toBeUndefined();
    expect(response.headers['content-length']).toBeUndefined();
    expect(
      await t.database.query("select id from plants where id = '9223372036854775806'"),
    ).toStrictEqual([]);
    expectError(await get('/plants/9223372036854775806'), 404);
  });

  it('answers 404 with the Error body when there was no plant, also the second time', async () => {
    await store({ id: '-77', name: 'Once' });
    expect((await del('-77')).statusCode).toBe(204);
    expectError(await del('-77'), 404, 'no plant has the id -77');
  });

  it('frees the id: a POST with it creates a new plant, with new content', async () => {
    expect((await postPlant(t.app, { id: 88, name: 'First', tag: 'a' })).statusCode).toBe(200);
    expect((await del('88')).statusCode).toBe(204);
    const again = await postPlant(t.app, { id: 88, name: 'Second' });
    expect(again.statusCode).toBe(200);
    expect(again.json()).toStrictEqual({ name: 'Second' });
    expect((await get('/plants/88')).body).toBe('{"id":88,"name":"Second"}');
  });

  it.each([
    ['a JSON content type and no body', { 'content-type': 'application/json' }, undefined],
    ['a JSON body', { 'content-type': 'application/json' }, '{"id":1}'],
    ['a body of another type', { 'content-type': 'text/plain' }, 'please'],
  ])('ignores a request body: %s', async (_, headers, payload) => {
    await store({ id: '99', name: 'Bodied' });
    const response = await del('99', { ...auth, ...headers }, payload);
    expect(response.statusCode).toBe(204);
  });

  it.each([
    ['-0', notCanonical],
    ['01', notCanonical],
    ['1.5', notCanonical],
    ['9223372036854775808', outOfRange],
  ])('answers 400 to the id %s and deletes nothing', async (id, message) => {
    expectError(await del(id), 400, message);
  });
});

describe('authentication', () => {
  it.each([
    ['GET', '/plants'],
    ['GET', '/plants?limit=0'],
    ['GET', '/plants/1'],
    ['GET', '/plants/abc'],
    ['HEAD', '/plants/1'],
    ['DELETE', '/plants/1'],
    ['DELETE', '/plants/-0'],
    ['PUT', '/plants/1'],
    ['PATCH', '/plants'],
  ])('runs first on %s %s: 401 with the challenge', async (method, url) => {
    for (const headers of [{}, { authorization: 'Bearer not-a-token' }]) {
      const response = await t.app.inject({ method: method as 'GET', url, headers });
      expect(response.statusCode).toBe(401);
      expect(response.headers['www-authenticate']).toMatch(/^Bearer realm="plant-store"/);
      if (method !== 'HEAD') expectError(response, 401);
    }
  });

  it('keeps the plant when an unauthenticated client deletes it', async () => {
    await store({ id: '66', name: 'Kept' });
    const response = await t.app.inject({ method: 'DELETE', url: '/plants/66' });
    expect(response.statusCode).toBe(401);
    expect((await get('/plants/66')).statusCode).toBe(200);
  });
});

describe('other methods on the plant paths', () => {
  it.each([
    ['PUT', '/plants', 'GET, HEAD, POST'],
    ['PATCH', '/plants', 'GET, HEAD, POST'],
    ['DELETE', '/plants', 'GET, HEAD, POST'],
    ['OPTIONS', '/plants', 'GET, HEAD, POST'],
    ['POST', '/plants/1', 'GET, HEAD, DELETE'],
    ['PUT', '/plants/1', 'GET, HEAD, DELETE'],
    ['PATCH', '/plants/1', 'GET, HEAD, DELETE'],
    ['TRACE', '/plants/1', 'GET, HEAD, DELETE'],
  ])('answer %s %s with 405, the Error body and Allow: %s', async (method, url, allow) => {
    const response = await t.app.inject({
      method: method as 'PUT',
      url,
      headers: { ...auth, 'content-type': 'text/plain' },
      payload: method === 'TRACE' ? undefined : 'not read',
    });
    expectError(response, 405, `${method} is not allowed here; allowed: ${allow}`);
    expect(response.headers.allow).toBe(allow);
  });
});

describe('reads by id that arrive together', () => {
  it('share SELECTs, and each gets its own plant', async () => {
    await store(...Array.from({ length: 40 }, (_, i) => ({ id: String(5000 + i), name: `R${i}` })));
    const before = await readBatches();
    const responses = await Promise.all(
      Array.from({ length: 60 }, (_, i) => get(`/plants/${5000 + (i % 45)}`)),
    );
    responses.forEach((response, i) => {
      const n = i % 45;
      if (n < 40) expect(response.json()).toStrictEqual({ id: 5000 + n, name: `R${n}` });
      else expect(response.statusCode).toBe(404);
    });
    const after = await readBatches();
    expect(after.reads - before.reads).toBe(60);
    expect(after.batches - before.batches).toBeLessThan(60 / 4);
  });
});

/** The read batches the service sent so far, and the reads they carried, from /metrics. */
async function readBatches(): Promise<{ batches: number; reads: number }> {
  const { body } = await t.app.inject({ method: 'GET', url: '/metrics' });
  const value = (name: string) =>
    Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(body)?.[1] ?? Number.NaN);
  return {
    batches: value('plant_store_read_batch_size_count'),
    reads: value('plant_store_read_batch_size_sum'),
  };
}
