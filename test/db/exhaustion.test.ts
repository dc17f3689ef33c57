import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postPlant, startTestApp, type TestApp, TOKEN } from '../helpers/app.js';

const STATEMENT_TIMEOUT_MS = 1000;
// Timers, the event loop and a busy machine: what "a few milliseconds" may grow to here.
const SLACK_MS = 400;

describe('with every pooled connection stuck behind a lock', () => {
  let t: TestApp;
  let locker: pg.Client;
  beforeAll(async () => {
    t = await startTestApp({
      env: { DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS), DB_POOL_MAX: '2' },
    });
    expect((await postPlant(t.app, { id: 1, name: 'Fern' })).statusCode).toBe(200);
    locker = new pg.Client({ connectionString: t.database.url });
    await locker.connect();
    await locker.query('begin');
    await locker.query('lock table plants in access exclusive mode');
  });
  afterAll(async () => {
    await locker.query('rollback');
    await locker.end();
    await t.close();
  });

  it('answers every request within DB_STATEMENT_TIMEOUT_MS of its arrival, with 503 and Retry-After', async () => {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const requests = [
      ...Array.from({ length: 6 }, (_, i) => () => postPlant(t.app, { id: 10 + i, name: 'Moss' })),
      ...Array.from(
        { length: 6 },
        (_, i) => () => t.app.inject({ method: 'GET', url: `/plants?after=${i}`, headers: auth }),
      ),
      ...Array.from(
        { length: 6 },
        (_, i) => () => t.app.inject({ method: 'GET', url: `/plants/${i + 1}`, headers: auth }),
      ),
      ...Array.from(
        { length: 6 },
        (_, i) => () =>
          t.app.inject({ method: 'DELETE', url: `/plants/${i + 100}`, headers: auth }),
      ),
    ];
    const answers = await Promise.all(
      requests.map(async (send) => {
        const started = performance.now();
        const response = await send();
        return { response, ms: performance.now() - started };
      }),
    );
    for (const { response, ms } of answers) {
      expect(response.statusCode).toBe(503);
      expect(response.headers['retry-after']).toBeDefined();
      expect(ms).toBeLessThan(STATEMENT_TIMEOUT_MS + SLACK_MS);
    }
  });
});
