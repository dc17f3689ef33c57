import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { isDatabaseUnavailable } from '../../src/db/errors.js';
import { openPostgres } from '../../src/db/postgres.js';
import { postPlant, startTestApp, type TestApp } from '../helpers/app.js';
import { onServer } from '../helpers/database.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';

// A failover can leave DATABASE_URL leading, for a while, to a server that refuses writes (a
// standby, or a demoted primary a stale DNS answer still names). Here the scratch database is
// made read-only for new sessions and its sessions are ended, as a switch of servers ends them.

describe.each([
  ['directly', {}],
  ['through the pooler-safe client (DB_POOLER)', { DB_POOLER: 'true' }],
])('when the database becomes read-only, %s', (_how, env) => {
  let t: TestApp;
  let name: string;
  beforeAll(async () => {
    t = await startTestApp({ env });
    name = new URL(t.database.url ?? '').pathname.slice(1);
    expect((await postPlant(t.app, { id: 1, name: 'Before' })).statusCode).toBe(200);
    await onServer(`alter database ${name} set default_transaction_read_only = on`);
    await onServer(
      `select pg_terminate_backend(pid) from pg_stat_activity where datname = '${name}'`,
    );
  });
  afterAll(() => t.close());

  it('answers creates 503 with Retry-After, never 500, and writes nothing', async () => {
    for (let id = 2; id < 12; id++) {
      const response = await postPlant(t.app, { id, name: 'During' });
      expect(response.statusCode).toBe(503);
      expect(response.headers['retry-after']).toBeDefined();
      expect(response.json()).toStrictEqual({
        error: 503,
        message: 'the database is unavailable; retry later',
      });
    }
    const rows = await t.database.query('select id from plants order by id');
    expect(rows).toStrictEqual([{ id: '1' }]);
  });

  it('reports not ready, so that a load balancer stops sending writes', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(response.statusCode).toBe(503);
    expect(response.json()).toStrictEqual({
      error: 503,
      message: 'the database is read-only; writes are refused until it accepts them again',
    });
  });

  it('serves again by itself, from the first request, once the database accepts writes', async () => {
    await onServer(`alter database ${name} reset default_transaction_read_only`);
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    for (let id = 12; id < 22; id++) {
      expect((await postPlant(t.app, { id, name: 'After' })).statusCode).toBe(200);
    }
  });
});

describe('a connection lost while the pool asks it whether it accepts writes', () => {
  it('fails that query as an unavailable database, and the process goes on', async () => {
    const url = new URL(inject('databaseUrl'));
    const proxy = await startFaultProxy({ host: url.hostname, port: Number(url.port) });
    const database = openPostgres({
      url: proxy.via(url.toString()),
      pooler: false,
      poolMax: 1,
      connectTimeoutMs: 5000,
      statementTimeoutMs: 5000,
      onIdleError: () => {},
    });
    try {
      // Connected: from now on the question is sent into the void, as a server dies mid-answer.
      database.pool.on('connect', () => proxy.blackhole());
      const query = database.pool.query('select 1');
      await new Promise((resolve) => setTimeout(resolve, 200));
      await proxy.close();
      const failure = await query.then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(isDatabaseUnavailable(failure)).toBe(true);
    } finally {
      await database.close();
    }
  });
});
