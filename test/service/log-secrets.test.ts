import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postPlant, startTestApp, type TestApp, TOKEN } from '../helpers/app.js';
import { onServer } from '../helpers/database.js';
import { startReceiver, WEBHOOK_SECRET } from '../helpers/receiver.js';

// Secrets and private data that reach the service, each spelled so that it cannot appear in a
// log line by chance.
const PLANT_NAME = 'Private body 5f1e9c';
const URL_CREDENTIAL = 'url-credential-77ad3b';
const QUERY_TOKEN = 'query-token-c2b8e1';

describe('the log, under database failures and careless clients', () => {
  let t: TestApp;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  beforeAll(async () => {
    receiver = await startReceiver();
    t = await startTestApp({
      webhooks: {
        urls: [`${receiver.url}?key=${URL_CREDENTIAL}`],
        secret: WEBHOOK_SECRET,
        timeoutMs: 1000,
        retrySchedule: [60],
        concurrency: 1,
      },
    });
    const name = new URL(t.database.url ?? '').pathname.slice(1);
    expect((await postPlant(t.app, { id: 1, name: PLANT_NAME })).statusCode).toBe(200);
    // Connections killed under the service: the pool reports the idle ones it loses.
    await onServer(
      `select pg_terminate_backend(pid) from pg_stat_activity where datname = '${name}'`,
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Failed INSERTs: the server refuses writes for a while.
    await onServer(`alter database ${name} set default_transaction_read_only = on`);
    await onServer(
      `select pg_terminate_backend(pid) from pg_stat_activity where datname = '${name}'`,
    );
    for (let id = 2; id < 6; id++) await postPlant(t.app, { id, name: PLANT_NAME });
    await onServer(`alter database ${name} reset default_transaction_read_only`);
    // A token in the query string, which the service does not accept but must not log either.
    await t.app.inject({
      method: 'GET',
      url: `/plants/1?access_token=${QUERY_TOKEN}&ACCESS%5FTOKEN=${QUERY_TOKEN}`,
      headers: { authorization: `Bearer ${TOKEN}` },
    });
  });
  afterAll(async () => {
    await t.close();
    await receiver.close();
  });

  it('holds no plant body, URL credential, token or connection object', () => {
    const log = t.logs.join('\n');
    expect(log).toContain('"statusCode":503');
    for (const secret of [PLANT_NAME, URL_CREDENTIAL, QUERY_TOKEN, TOKEN, WEBHOOK_SECRET]) {
      expect(log).not.toContain(secret);
    }
    // A pg connection carries its cancel key (processID and secretKey).
    expect(log).not.toMatch(/secretKey|processID|"client":\{/);
    expect(log).not.toMatch(/params|parameters/i);
  });

  it('names each failed statement once, with its SQLSTATE', () => {
    const failures = t.logs
      .map((line) => JSON.parse(line) as { sqlState?: string; statement?: string; msg: string })
      .filter((line) => line.sqlState === '25006');
    expect(failures.length).toBeGreaterThan(0);
    for (const failure of failures) expect(failure.statement).toMatch(/^plants_/);
  });
});
