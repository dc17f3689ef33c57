import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HASHED_TOKEN, TOKEN, TOKEN_ENTRIES } from '../helpers/app.js';
import { createScratchDatabase, type ScratchDatabase, serverUrlOf } from '../helpers/database.js';
import { run, startServer } from '../helpers/process.js';

const tokens = TOKEN_ENTRIES.join(',');

function post(baseUrl: string, body: object, token = TOKEN) {
  return fetch(`${baseUrl}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

describe('configuration at start', () => {
  it.each([
    [{}, 'API_TOKENS or API_TOKENS_FILE must provide at least one bearer token'],
    [
      { API_TOKENS: 't', DATABASE_URL: 'mysql://h/db' },
      'DATABASE_URL must be a postgres:// or postgresql:// URL',
    ],
    [
      { API_TOKENS: 't', DATABASE_URL: 'postgres://h/db', PORT: 'http' },
      'PORT must be an integer from 0 to 65535',
    ],
    [
      { API_TOKENS: 't', DATABASE_URL: 'postgres://h/db', LOG_LEVEL: 'chatty' },
      'LOG_LEVEL must be one of',
    ],
  ])('refuses %j with one line naming the variable, and exits non-zero', async (env, message) => {
    const server = run(process.execPath, ['dist/server.js'], env);
    expect(await server.exited).toBe(1);
    expect(server.stderr.filter((line) => line !== '')).toHaveLength(1);
    expect(server.stderr[0]).toContain(message);
  });
});

describe('the service process', () => {
  let database: ScratchDatabase;
  beforeAll(async () => {
    database = await createScratchDatabase({ migrated: false });
  });
  afterAll(() => database.drop());

  it('migrates on start, serves, and writes no token to its log', async () => {
    const server = await startServer({ DATABASE_URL: serverUrlOf(database), API_TOKENS: tokens });
    try {
      expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
      expect((await post(server.baseUrl, { id: 1, name: 'Logged' })).status).toBe(200);
      expect((await post(server.baseUrl, { id: 2, name: 'Hashed' }, HASHED_TOKEN)).status).toBe(
        200,
      );
      expect((await post(server.baseUrl, { id: 3, name: 'x' }, 'wrong-token-value')).status).toBe(
        401,
      );
      expect((await post(server.baseUrl, { id: 1, name: 'Other' })).status).toBe(409);
    } finally {
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    }
    const log = server.stdout.join('\n');
    for (const secret of [TOKEN, HASHED_TOKEN, 'wrong-token-value'])
      expect(log).not.toContain(secret);
    const requests = server.stdout
      .filter((line) => line.includes('"request completed"'))
      .map((line) => JSON.parse(line));
    expect(requests.map((line) => line.statusCode)).toStrictEqual([200, 200, 200, 401, 409]);
    for (const line of requests) expect(line.reqId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('finishes in-flight requests on SIGTERM, then exits 0', async () => {
    const server = await startServer({ DATABASE_URL: serverUrlOf(database), API_TOKENS: tokens });
    // Hold the row of id 42 in an open transaction, so the service's insert waits on it.
    const blocker = new pg.Client({ connectionString: serverUrlOf(database) });
    await blocker.connect();
    await blocker.query('begin');
    await blocker.query("insert into plants (id, name) values (42, 'Held')");
    const inFlight = Array.from({ length: 5 }, () =>
      post(server.baseUrl, { id: 42, name: 'Held' }),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));

    server.child.kill('SIGTERM');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(server.child.exitCode).toBeNull();
    await blocker.query('commit');
    await blocker.end();

    const responses = await Promise.all(inFlight);
    expect(responses.map((r) => r.status)).toStrictEqual([200, 200, 200, 200, 200]);
    expect(await Promise.all(responses.map((r) => r.json()))).toStrictEqual(
      Array(5).fill({ name: 'Held' }),
    );
    expect(await server.exited).toBe(0);
    expect(server.stdout.some((line) => line.includes('"stopped"'))).toBe(true);
  });

  it('serves /metrics on METRICS_PORT only, when it is set', async () => {
    const metricsPort = String(20_000 + Math.floor(Math.random() * 20_000));
    const server = await startServer({
      DATABASE_URL: serverUrlOf(database),
      API_TOKENS: tokens,
      METRICS_PORT: metricsPort,
    });
    try {
      expect((await fetch(`${server.baseUrl}/metrics`)).status).toBe(404);
      const metrics = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      expect(metrics.status).toBe(200);
      expect(await metrics.text()).toContain('http_requests_total');
    } finally {
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    }
  });

  it('serves on an unmigrated database only after `db:migrate` when MIGRATE_ON_START is off', async () => {
    const fresh = await createScratchDatabase({ migrated: false });
    const server = await startServer({
      DATABASE_URL: serverUrlOf(fresh),
      API_TOKENS: tokens,
      MIGRATE_ON_START: 'false',
    });
    try {
      expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(503);
      const migrate = run(process.execPath, ['dist/migrate.js'], {
        DATABASE_URL: serverUrlOf(fresh),
      });
      expect(await migrate.exited).toBe(0);
      expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
      await fresh.drop();
    }
  });
});
