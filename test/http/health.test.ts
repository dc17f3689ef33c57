import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postPlant, startTestApp, type TestApp, TOKEN } from '../helpers/app.js';

describe('with a migrated database', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.close());

  it('GET /healthz answers 200 {"status":"ok"} without a token', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/healthz' });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toStrictEqual({ status: 'ok' });
  });

  it('GET /readyz answers 200 {"status":"ready"} without a token', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toStrictEqual({ status: 'ready' });
  });
});

describe('while the process is shutting down', () => {
  let t: TestApp;
  let stopping = false;
  beforeAll(async () => {
    t = await startTestApp({ isStopping: () => stopping });
    stopping = true;
  });
  afterAll(() => t.close());

  it('GET /readyz answers 503, so that load balancers send no new requests', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(response.statusCode).toBe(503);
    expect(response.headers['retry-after']).toBe('2');
    expect(response.json()).toStrictEqual({ error: 503, message: 'the service is shutting down' });
  });

  it('still serves creates, and closes their connection so keep-alive clients move on', async () => {
    const response = await postPlant(t.app, { id: 1, name: 'Late' });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toStrictEqual({ name: 'Late' });
    expect(response.headers.connection).toBe('close');
  });

  it('GET /healthz still answers 200', async () => {
    expect((await t.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });
});

describe('with a database that was never migrated', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ migrated: false });
  });
  afterAll(() => t.close());

  it('GET /readyz answers 503 with Retry-After', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(response.statusCode).toBe(503);
    expect(response.headers['retry-after']).toBe('2');
    expect(response.json()).toStrictEqual({
      error: 503,
      message: 'the database schema is not migrated',
    });
  });

  it("GET /readyz answers 503 while the schema lacks this build's newest migration", async () => {
    await t.database.query('create schema drizzle');
    await t.database.query(
      'create table drizzle.__drizzle_migrations (id serial, hash text, created_at bigint)',
    );
    await t.database.query(
      'insert into drizzle.__drizzle_migrations (hash, created_at) values ($1, $2)',
      ['old', 1],
    );
    const response = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(response.statusCode).toBe(503);
    expect(response.json().message).toBe('the database schema is not migrated');
  });

  it('GET /healthz still answers 200', async () => {
    expect((await t.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });
});

describe('with the database unreachable', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ databaseUrl: 'postgres://postgres@127.0.0.1:1/none' });
  });
  afterAll(() => t.close());

  it('GET /readyz answers 503 with Retry-After and no internals', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(response.statusCode).toBe(503);
    expect(response.headers['retry-after']).toBe('2');
    expect(response.json()).toStrictEqual({ error: 503, message: 'the database is unavailable' });
  });

  it('GET /healthz answers 200', async () => {
    expect((await t.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });

  it('POST /plants answers 503 with Retry-After and no internals', async () => {
    const response = await postPlant(t.app, { id: 1, name: 'x' });
    expect(response.statusCode).toBe(503);
    expect(response.headers['retry-after']).toBe('2');
    expect(response.json()).toStrictEqual({
      error: 503,
      message: 'the database is unavailable; retry later',
    });
    expect(response.body).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|postgres/);
  });

  it.each([
    ['GET', '/plants/1'],
    ['GET', '/plants?limit=5'],
    ['DELETE', '/plants/1'],
  ] as const)('%s %s answers 503 with Retry-After and no internals', async (method, url) => {
    const response = await t.app.inject({
      method,
      url,
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(response.statusCode).toBe(503);
    expect(response.headers['retry-after']).toBe('2');
    expect(response.json()).toStrictEqual({
      error: 503,
      message: 'the database is unavailable; retry later',
    });
  });
});
