import { type AddressInfo, connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postPlant, startTestApp, storedPlant, type TestApp } from '../helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { BODY_LIMIT: '1024' } });
});
afterAll(() => t.close());

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('content types', () => {
  it.each([
    [1001, 'application/json'],
    [1002, 'application/json; charset=utf-8'],
    [1003, 'application/json;charset=UTF-8'],
    [1004, 'Application/JSON'],
    [1005, 'application/json; charset="utf-8"'],
  ])('stores plant %i sent as %s', async (id, contentType) => {
    const response = await postPlant(
      t.app,
      { id, name: contentType },
      { 'content-type': contentType },
    );
    expect(response.statusCode).toBe(200);
    expect(await storedPlant(t.database, id)).toMatchObject({ name: contentType });
  });

  it.each([
    ['text/plain', 'Content-Type must be application/json'],
    ['application/x-www-form-urlencoded', 'Content-Type must be application/json'],
    ['application/jsonx', 'Content-Type must be application/json'],
    ['application/json; charset=latin1', 'Content-Type charset must be utf-8'],
  ])('answers 415 to %s', async (contentType, message) => {
    const response = await postPlant(
      t.app,
      { id: 2000, name: 'x' },
      { 'content-type': contentType },
    );
    expect(response.statusCode).toBe(415);
    expect(response.json()).toStrictEqual({ error: 415, message });
    expect(await storedPlant(t.database, 2000)).toBeUndefined();
  });

  it('answers 415 to a body without a content type', async () => {
    const response = await postPlant(t.app, '{"id":2001,"name":"x"}', {
      'content-type': undefined,
    });
    expect(response.statusCode).toBe(415);
    expect(response.json()).toStrictEqual({
      error: 415,
      message: 'Content-Type must be application/json',
    });
  });

  it('answers 400 to no body and no content type', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/plants',
      headers: { authorization: 'Bearer test-token-4f1d2c' },
    });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toStrictEqual({ error: 400, message: 'body must be a JSON object' });
  });
});

describe('body size', () => {
  it('answers 413 to a body over BODY_LIMIT and stores nothing', async () => {
    const response = await postPlant(t.app, { id: 3000, name: 'x', padding: 'p'.repeat(1100) });
    expect(response.statusCode).toBe(413);
    expect(response.json()).toStrictEqual({
      error: 413,
      message: 'the request body is larger than the limit of 1024 bytes',
    });
    expect(await storedPlant(t.database, 3000)).toBeUndefined();
  });

  it('accepts a body at the limit', async () => {
    const body = JSON.stringify({ id: 3001, name: 'x', padding: '' });
    const padded = body.replace('"padding":""', `"padding":"${'p'.repeat(1024 - body.length)}"`);
    expect(Buffer.byteLength(padded)).toBe(1024);
    expect((await postPlant(t.app, padded)).statusCode).toBe(200);
  });
});

describe('unknown routes', () => {
  it.each([
    ['GET', '/nothing-here'],
    ['GET', '/plants/1/leaves'],
    ['GET', '/gardens'],
  ])('answer %s %s with 404 and the Error body', async (method, url) => {
    const response = await t.app.inject({ method: method as 'GET', url });
    expect(response.statusCode).toBe(404);
    expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(response.json()).toStrictEqual({
      error: 404,
      message: `no route matches ${method} ${url}`,
    });
  });

  it.each([
    ['POST', '/plant', '/plants'],
    ['GET', '/plant/42', '/plants/{id}'],
    ['GET', '/helthz', '/healthz'],
    ['GET', '/webhook/endpoints', '/webhooks/endpoints'],
    ['DELETE', '/plants/1/', '/plants/{id}'],
  ])('answer %s %s with 404 naming the nearest route, %s', async (method, url, nearest) => {
    const response = await t.app.inject({ method: method as 'GET', url });
    expect(response.statusCode).toBe(404);
    expect(response.json()).toStrictEqual({
      error: 404,
      message: `no route matches ${method} ${url}; the nearest route is ${nearest}`,
    });
  });
});

describe('malformed URLs', () => {
  it('answer 400 with the Error body and a request id', async () => {
    const response = await t.app.inject({ method: 'POST', url: '/plants%', payload: '{}' });
    expect(response.statusCode).toBe(400);
    expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(response.headers['x-request-id']).toMatch(uuid);
    expect(response.json()).toStrictEqual({ error: 400, message: 'the request URL is malformed' });
  });
});

describe('requests that are not valid HTTP', () => {
  async function sendRaw(bytes: string): Promise<string> {
    if (!t.app.server.listening) await t.app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = t.app.server.address() as AddressInfo;
    const socket = connect(port, '127.0.0.1');
    socket.write(bytes);
    let answer = '';
    for await (const chunk of socket) answer += chunk;
    return answer;
  }

  it('answer 400 with the Error body', async () => {
    const answer = await sendRaw('NOT HTTP AT ALL\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(answer).toMatch(/\r\nx-request-id: [0-9a-f-]{36}\r\n/);
    expect(answer.split('\r\n\r\n')[1]).toBe(
      '{"error":400,"message":"the request is not valid HTTP"}',
    );
  });

  it('answer 431 to headers over the limit', async () => {
    const answer = await sendRaw(
      `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 431 /);
    expect(answer.split('\r\n\r\n')[1]).toBe(
      '{"error":431,"message":"the request headers are too large"}',
    );
  });

  it('answer 414 to a request target over the limit', async () => {
    const answer = await sendRaw(
      `GET /plants?tag=${'a'.repeat(100_000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 414 /);
    expect(answer.split('\r\n\r\n')[1]).toBe(
      '{"error":414,"message":"the request target (the URL) is too long"}',
    );
  });
});

describe('x-request-id', () => {
  it('echoes a sane incoming id', async () => {
    const response = await postPlant(
      t.app,
      { id: 4000, name: 'x' },
      { 'x-request-id': 'client-abc.123_XYZ' },
    );
    expect(response.headers['x-request-id']).toBe('client-abc.123_XYZ');
  });

  it.each([
    ['too long', 'a'.repeat(129)],
    ['with a space', 'a b'],
    ['with a non-ASCII character', 'café'],
    ['empty', ''],
  ])('replaces an id that is %s with a new UUID', async (_, incoming) => {
    const response = await t.app.inject({
      method: 'GET',
      url: '/healthz',
      headers: { 'x-request-id': incoming },
    });
    expect(response.headers['x-request-id']).toMatch(uuid);
  });

  it('accepts an id of exactly 128 characters', async () => {
    const id = 'b'.repeat(128);
    const response = await t.app.inject({
      method: 'GET',
      url: '/healthz',
      headers: { 'x-request-id': id },
    });
    expect(response.headers['x-request-id']).toBe(id);
  });

  it.each([
    ['a 200', () => postPlant(t.app, { id: 4001, name: 'x' })],
    ['a 400', () => postPlant(t.app, '{')],
    ['a 401', () => postPlant(t.app, { id: 4002, name: 'x' }, { authorization: undefined })],
    ['a 404', () => t.app.inject({ method: 'GET', url: '/missing' })],
    ['a 413', () => postPlant(t.app, { id: 4003, name: 'x'.repeat(2000) })],
    ['a 415', () => postPlant(t.app, 'x', { 'content-type': 'text/plain' })],
    ['the docs', () => t.app.inject({ method: 'GET', url: '/openapi.json' })],
  ])('is on %s, and in the log line of that request', async (_, send) => {
    const response = await send();
    const id = response.headers['x-request-id'];
    expect(id).toMatch(uuid);
    const lines = t.logs.map((line) => JSON.parse(line)).filter((line) => line.reqId === id);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ msg: 'request completed', statusCode: response.statusCode });
  });
});

describe('request log', () => {
  it('writes one line per request with id, method, route, status and duration', async () => {
    await postPlant(t.app, { id: 5000, name: 'logged' }, { 'x-request-id': 'log-line-check' });
    const lines = t.logs
      .map((line) => JSON.parse(line))
      .filter((line) => line.reqId === 'log-line-check');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 'info',
      method: 'POST',
      url: '/plants',
      route: '/plants',
      statusCode: 200,
      msg: 'request completed',
    });
    expect(lines[0].durationMs).toBeTypeOf('number');
  });
});
