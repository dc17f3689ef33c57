import { Client } from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import { createLogger } from '../../../src/logger.js';
import { createPlantQueries } from '../../../src/plants/queries.js';
import { createDeclarations } from '../../../src/webhooks/delivery/declare.js';
import { createDispatcher } from '../../../src/webhooks/delivery/engine.js';
import { redeliverFailed } from '../../../src/webhooks/delivery/recovery.js';
import { openSecret, sealSecret } from '../../../src/webhooks/security/secrets.js';
import type { WebhookSettings } from '../../../src/webhooks/settings.js';
import { batching, postPlant, startTestApp, type TestApp, TOKEN } from '../../helpers/app.js';
import { testEngine } from '../../helpers/database.js';
import { eventually } from '../../helpers/eventually.js';
import { freePort } from '../../helpers/process.js';
import {
  type Answer,
  type ReceivedRequest,
  type Receiver,
  startReceiver,
  WEBHOOK_SECRET,
} from '../../helpers/receiver.js';
import { ringKey } from '../../helpers/sealed.js';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const resource of open.splice(0).reverse()) await resource.close();
});

/** Short delays, so retries happen within a test. */
function webhookConfig(urls: string[], overrides: Partial<WebhookSettings> = {}): WebhookSettings {
  return {
    ...loadConfig({ API_TOKENS: 'unused' }).webhooks,
    urls,
    secret: WEBHOOK_SECRET,
    timeoutMs: 1000,
    retrySchedule: [0.1, 0.2],
    concurrency: 8,
    ...overrides,
  };
}

async function receiver(answer?: (request: ReceivedRequest, n: number) => Answer, port?: number) {
  const started = await startReceiver(answer, port === undefined ? {} : { port });
  open.push(started);
  return started;
}

async function appSendingTo(urls: string[], overrides: Partial<WebhookSettings> = {}) {
  const t = await startTestApp({ webhooks: webhookConfig(urls, overrides) });
  open.push(t);
  return t;
}

interface DeliveryRow extends Record<string, unknown> {
  id: string;
  event_id: string;
  url: string;
  body: string;
  attempts: number;
  failed: boolean;
  last_status: number | null;
  last_error: string | null;
}

const deliveries = (t: TestApp) =>
  t.database.query<DeliveryRow>(
    `select d.id::text, d.event_id::text, e.url, d.body, d.attempts,
            d.failed_at is not null as failed, d.last_status, d.last_error
       from webhook_deliveries as d join webhook_endpoints as e on e.id = d.endpoint_id
      order by d.id`,
  );

/** The events recorded and not yet fanned out, oldest first. */
const events = (t: TestApp) =>
  t.database.query<{ event_id: string; body: string }>(
    'select event_id::text, body from webhook_events order by id',
  );

/**
 * An app that declares `urls` and whose creates record events while no dispatcher runs, as if
 * it died before fanning out.
 */
async function appRecordingOnly(urls = ['http://127.0.0.1:9/unused']) {
  const t = await startTestApp({ webhooks: webhookConfig(urls) });
  open.push(t);
  await t.dispatcher?.stop(0);
  return t;
}

const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the newPlant webhook', () => {
  it('sends each newly stored plant once, signed, as stored, and none for replays, 409s or 400s', async () => {
    const hook = await receiver();
    const t = await appSendingTo([hook.url]);
    const sent = [
      '{"id":9007199254740993,"name":"Monstera","tag":"aroid"}',
      '{"id":-9223372036854775808,"name":"Ficus 🌿 \\"lyrata\\""}',
      '{"id":7,"name":"Pilea","tag":""}',
    ];
    for (const body of sent) expect((await postPlant(t.app, body)).statusCode).toBe(200);
    expect((await postPlant(t.app, sent[0] as string)).statusCode).toBe(200);
    expect((await postPlant(t.app, { id: 7, name: 'Other' })).statusCode).toBe(409);
    expect((await postPlant(t.app, { id: 8, name: '' })).statusCode).toBe(400);

    await hook.waitFor(3);
    await settle(300);
    expect(hook.requests.map((request) => request.body).sort()).toStrictEqual([...sent].sort());
    for (const request of hook.requests) {
      expect(request).toMatchObject({ method: 'POST', path: '/hook', verified: true });
      expect(request.headers['content-type']).toBe('application/json');
      expect(request.headers['webhook-id']).toMatch(/^msg_[0-9a-f]{32}$/);
      expect(
        Math.abs(Number(request.headers['webhook-timestamp']) - Date.now() / 1000),
      ).toBeLessThan(10);
      expect(request.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    }
    expect(new Set(hook.requests.map((r) => r.headers['webhook-id'])).size).toBe(3);
    // Delivered rows do not stay, and neither do the events they were made of.
    expect(
      await eventually(
        () => deliveries(t),
        (rows) => rows.length === 0,
      ),
    ).toStrictEqual([]);
    expect(await events(t)).toStrictEqual([]);
  });

  it('sends every event to each URL, with the same webhook-id', async () => {
    const first = await receiver();
    const second = await receiver();
    const t = await appSendingTo([first.url, second.url]);
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const [a] = await first.waitFor(1);
    const [b] = await second.waitFor(1);
    expect(a?.body).toBe('{"id":1,"name":"Aloe"}');
    expect(b?.body).toBe(a?.body);
    expect(b?.headers['webhook-id']).toBe(a?.headers['webhook-id']);
  });

  it('records the event in the same statement as the plant, and keeps its body after a delete', async () => {
    // Nothing listens: the delivery stays in the outbox.
    const t = await appSendingTo([`http://127.0.0.1:${await freePort()}/hook`], {
      retrySchedule: [60],
    });
    expect((await postPlant(t.app, { id: 42, name: 'Calathea', tag: 'prayer' })).statusCode).toBe(
      200,
    );
    const response = await t.app.inject({
      method: 'DELETE',
      url: '/plants/42',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(response.statusCode).toBe(204);
    const [row] = await eventually(
      () => deliveries(t),
      (rows) => rows[0]?.attempts === 1 && rows[0].last_error !== null,
    );
    expect(row).toMatchObject({
      body: '{"id":42,"name":"Calathea","tag":"prayer"}',
      attempts: 1,
      failed: false,
      last_status: null,
      last_error: 'ECONNREFUSED',
    });
  });

  it('records events in the insert that locks what is stored only for the rows it inserted', async () => {
    const t = await appRecordingOnly();
    const queries = createPlantQueries(t.appDatabase.db, {
      textAsBytes: batching.textAsBytes,
      recordEvents: true,
    });
    await queries.insertNew([{ id: 20n, name: 'Stored' }]);
    const { rows } = await queries.insertOrLock([
      { id: 20n, name: 'Other' },
      { id: 21n, name: 'New', tag: '' },
    ]);
    const sorted = rows.sort((a, b) => Number(a.id - b.id));
    expect(sorted.map((row) => [row.id, row.inserted])).toStrictEqual([
      [20n, false],
      [21n, true],
    ]);
    expect((await events(t)).map((row) => row.body)).toStrictEqual([
      '{"id":20,"name":"Stored"}',
      '{"id":21,"name":"New","tag":""}',
    ]);
  });

  it('records one event row per new plant, whatever the number of subscribers, and none for replays, 409s or 400s', async () => {
    const t = await appRecordingOnly();
    for (const id of [1, 2, 3]) {
      expect((await postPlant(t.app, { id, name: 'Aloe' })).statusCode).toBe(200);
    }
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    expect((await postPlant(t.app, { id: 2, name: 'Other' })).statusCode).toBe(409);
    expect((await postPlant(t.app, { id: 4, name: '' })).statusCode).toBe(400);
    expect((await events(t)).map((row) => row.body)).toStrictEqual([
      '{"id":1,"name":"Aloe"}',
      '{"id":2,"name":"Aloe"}',
      '{"id":3,"name":"Aloe"}',
    ]);
    expect(await deliveries(t)).toStrictEqual([]);
  });

  it('fans out an event committed before any dispatcher ran, to each URL with the same webhook-id', async () => {
    const hooks = [await receiver(), await receiver(), await receiver()];
    const t = await appRecordingOnly(hooks.map((hook) => hook.url));
    expect((await postPlant(t.app, { id: 5, name: 'Fern', tag: 'green' })).statusCode).toBe(200);
    const [event] = await events(t);
    const dispatcher = createDispatcher({
      db: t.appDatabase.db,
      config: webhookConfig(hooks.map((hook) => hook.url)),
      logger: createLogger('warn', { write: () => {} }),
    });
    open.push({ close: () => dispatcher.stop(0) });
    dispatcher.start();
    const received = await Promise.all(hooks.map(async (hook) => (await hook.waitFor(1))[0]));
    const webhookId = `msg_${event?.event_id.replaceAll('-', '')}`;
    for (const request of received) {
      expect(request).toMatchObject({
        body: '{"id":5,"name":"Fern","tag":"green"}',
        verified: true,
      });
      expect(request?.headers['webhook-id']).toBe(webhookId);
    }
    expect(await events(t)).toStrictEqual([]);
    expect(
      await eventually(
        () => deliveries(t),
        (rows) => rows.length === 0,
      ),
    ).toStrictEqual([]);
  });

  it('writes nothing to the outbox when no URL is configured', async () => {
    const t = await startTestApp();
    open.push(t);
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    expect(await events(t)).toStrictEqual([]);
    expect(await deliveries(t)).toStrictEqual([]);
  });
});

describe('retries', () => {
  // One app and one receiver for the whole group: each test has a plant id of its own, and the
  // receiver answers each plant as that test wants (see `answers`).
  const answers = new Map<string, (n: number) => Answer>();
  let hook: Receiver;
  let t: TestApp;
  beforeAll(async () => {
    hook = await startReceiver((request) => {
      const id = /^\{"id":(-?\d+),/.exec(request.body)?.[1] ?? '';
      const n = hook.requests.filter((r) => r.body.startsWith(`{"id":${id},`)).length;
      return answers.get(id)?.(n) ?? { status: 200 };
    });
    // A second: the receiver answers in this process, which CI may run at its lowest priority
    // beside other suites; the receiver that is meant to time out takes two.
    t = await startTestApp({ webhooks: webhookConfig([hook.url], { timeoutMs: 1000 }) });
  });
  afterAll(async () => {
    await t.close();
    await hook.close();
  });

  /** Creates plant `id`, answered by `answer`; resolves with its first `count` deliveries. */
  async function deliver(id: number, answer: (n: number) => Answer, count: number) {
    answers.set(String(id), answer);
    expect((await postPlant(t.app, { id, name: 'Aloe' })).statusCode).toBe(200);
    const deadline = Date.now() + 10_000;
    let requests = hook.requests.filter((r) => r.body === `{"id":${id},"name":"Aloe"}`);
    while (requests.length < count && Date.now() < deadline) {
      await settle(10);
      requests = hook.requests.filter((r) => r.body === `{"id":${id},"name":"Aloe"}`);
    }
    expect(requests).toHaveLength(count);
    return requests;
  }

  const rowOf = async (id: number) =>
    (await deliveries(t)).find((row) => row.body.startsWith(`{"id":${id},`));
  const goneFromOutbox = (id: number) =>
    eventually(
      () => rowOf(id),
      (row) => row === undefined,
    );
  const logsOf = (webhookId: unknown) =>
    t.logs.map((line) => JSON.parse(line)).filter((line) => line.webhookId === webhookId);
  const metric = async (name: string) => {
    const text = (await t.app.inject({ method: 'GET', url: '/metrics' })).body;
    return Number(new RegExp(`^${name.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1]);
  };

  it('retries after a 500, with the same webhook-id and a fresh signature', async () => {
    const requests = await deliver(101, (n) => ({ status: n < 2 ? 500 : 204 }), 3);
    expect(new Set(requests.map((r) => r.headers['webhook-id'])).size).toBe(1);
    expect(requests.every((r) => r.verified)).toBe(true);
    expect(await goneFromOutbox(101)).toBeUndefined();
    const lines = logsOf(requests[0]?.headers['webhook-id']);
    expect(lines.map((l) => [l.level, l.status, l.attempt])).toStrictEqual([
      ['warn', 500, 1],
      ['warn', 500, 2],
    ]);
  });

  it('retries an attempt that is not answered within the time limit', async () => {
    const [first, second] = await deliver(
      102,
      (n) => ({ status: 200, delayMs: n === 0 ? 2000 : 0 }),
      2,
    );
    expect(second?.headers['webhook-id']).toBe(first?.headers['webhook-id']);
    expect(await goneFromOutbox(102)).toBeUndefined();
    expect(logsOf(first?.headers['webhook-id'])).toMatchObject([{ error: 'timeout', attempt: 1 }]);
  });

  it('does not follow a redirect: a 3xx is a failed attempt', async () => {
    const target = await receiver();
    const [first] = await deliver(
      103,
      (n) => (n === 0 ? { status: 307, headers: { location: target.url } } : { status: 200 }),
      2,
    );
    expect(await goneFromOutbox(103)).toBeUndefined();
    expect(target.requests).toStrictEqual([]);
    expect(logsOf(first?.headers['webhook-id'])).toMatchObject([{ status: 307, attempt: 1 }]);
  });

  it('waits as long as a 503 Retry-After asks', async () => {
    const [first, second] = await deliver(
      104,
      (n) => (n === 0 ? { status: 503, headers: { 'retry-after': '2' } } : { status: 200 }),
      2,
    );
    expect((second?.at ?? 0) - (first?.at ?? 0)).toBeGreaterThanOrEqual(1900);
  });

  it('ends a delivery at once when the receiver answers 410 Gone', async () => {
    await deliver(105, () => ({ status: 410 }), 1);
    const row = await eventually(
      () => rowOf(105),
      (found) => found?.failed === true,
    );
    expect(row).toMatchObject({ attempts: 1, failed: true, last_status: 410 });
    await settle(500);
    expect(hook.requests.filter((r) => r.body.startsWith('{"id":105,'))).toHaveLength(1);
  });

  it('marks a delivery failed after its last attempt, logs it at error and counts it', async () => {
    const failedBefore = await metric('plant_store_webhook_deliveries_total{outcome="failed"}');
    const [first] = await deliver(106, () => ({ status: 500 }), 3);
    const row = await eventually(
      () => rowOf(106),
      (found) => found?.failed === true,
    );
    expect(row).toMatchObject({
      attempts: 3,
      failed: true,
      last_status: 500,
      last_error: 'HTTP 500',
    });
    await settle(400);
    expect(hook.requests.filter((r) => r.body.startsWith('{"id":106,'))).toHaveLength(3);
    expect(logsOf(first?.headers['webhook-id']).filter((l) => l.level === 'error')).toMatchObject([
      { msg: 'webhook delivery failed after its last attempt', status: 500, attempt: 3 },
    ]);
    expect(t.logs.join('\n')).not.toContain(WEBHOOK_SECRET.slice('whsec_'.length));
    expect(await metric('plant_store_webhook_deliveries_total{outcome="failed"}')).toBe(
      failedBefore + 1,
    );
    expect(await metric('plant_store_webhook_attempts_total{result="5xx"}')).toBeGreaterThanOrEqual(
      3,
    );
    expect(await metric('plant_store_webhook_backlog{state="failed"}')).toBeGreaterThanOrEqual(1);
    expect(await metric('plant_store_webhook_oldest_due_seconds')).toBeGreaterThanOrEqual(0);
  });

  it('sends a failed delivery again when an operator asks for it', async () => {
    let up = false;
    await deliver(107, () => ({ status: up ? 200 : 500 }), 3);
    const row = await eventually(
      () => rowOf(107),
      (found) => found?.failed === true,
    );
    up = true;
    expect(await redeliverFailed(t.appDatabase.db, { url: 'http://elsewhere/' })).toBe(0);
    expect(await redeliverFailed(t.appDatabase.db, { eventId: row?.event_id })).toBe(1);
    const requests = await deliver(107, () => ({ status: 200 }), 4);
    expect(await goneFromOutbox(107)).toBeUndefined();
    expect(new Set(requests.map((r) => r.headers['webhook-id'])).size).toBe(1);
  });
});

describe('a receiver that was down', () => {
  it('gets the delivery once it comes back', async () => {
    const port = await freePort();
    const t = await appSendingTo([`http://127.0.0.1:${port}/hook`], {
      retrySchedule: [0.3, 0.3, 0.3, 0.3, 0.3, 0.3],
    });
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    await eventually(
      () => deliveries(t),
      (rows) => (rows[0]?.attempts ?? 0) >= 2,
    );
    const hook = await receiver(undefined, port);
    const [request] = await hook.waitFor(1);
    expect(request).toMatchObject({ body: '{"id":1,"name":"Aloe"}', verified: true });
    expect(
      await eventually(
        () => deliveries(t),
        (rows) => rows.length === 0,
      ),
    ).toStrictEqual([]);
  });
});

describe('WEBHOOK_URLS as configured endpoints', () => {
  const ADMIN = 'admin-token-3c7a90';
  const admin = (t: TestApp, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string) =>
    t.app.inject({
      method,
      url,
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      ...(method !== 'GET' && method !== 'DELETE' && { payload: '{}' }),
    });

  async function appDeclaring(urls: string[], replicaOf?: TestApp) {
    const t = await startTestApp({
      env: { ADMIN_TOKENS: ADMIN },
      webhooks: webhookConfig(urls),
      ...(replicaOf && { replicaOf }),
    });
    open.push(t);
    return t;
  }

  it('lists each as configured, answers 409 naming WEBHOOK_URLS to every change, and logs its attempts', async () => {
    const hook = await receiver();
    const t = await appDeclaring([hook.url]);
    const listed = await admin(t, 'GET', '/webhooks/endpoints');
    expect(listed.json()).toStrictEqual([
      {
        id: expect.stringMatching(/^ep_/),
        url: hook.url,
        description: '',
        disabled: false,
        events: ['newPlant'],
        rateLimit: null,
        configured: true,
        createdAt: expect.any(String),
        updatedAt: expect.any(String),
      },
    ]);
    const path = `/webhooks/endpoints/${listed.json()[0].id}`;
    for (const [method, url] of [
      ['PATCH', path],
      ['DELETE', path],
      ['POST', `${path}/secret/rotate`],
      ['GET', `${path}/secret`],
    ] as const) {
      const refused = await admin(t, method, url);
      expect(refused.statusCode, `${method} ${url}`).toBe(409);
      expect(refused.json().message).toMatch(/WEBHOOK_URLS/);
    }
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const [request] = await hook.waitFor(1);
    const log = await eventually(
      async () => (await admin(t, 'GET', `${path}/attempts`)).json() as unknown[],
      (entries) => entries.length === 1,
    );
    expect(log).toMatchObject([
      { eventId: request?.headers['webhook-id'], plantId: 1, status: 'succeeded' },
    ]);
  });

  it('ends a delivery on a 410 without disabling the endpoint', async () => {
    const hook = await receiver(() => ({ status: 410 }));
    const t = await appDeclaring([hook.url]);
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const rows = await eventually(
      () => deliveries(t),
      (found) => found[0]?.failed === true,
    );
    expect(rows).toMatchObject([{ failed: true, last_status: 410 }]);
    expect((await postPlant(t.app, { id: 2, name: 'Aloe' })).statusCode).toBe(200);
    await hook.waitFor(2);
    const [endpoint] = (await admin(t, 'GET', '/webhooks/endpoints')).json();
    expect(endpoint).toMatchObject({ disabled: false, configured: true });
  });

  it('stops sending to a URL once no running replica declares it', async () => {
    const kept = await receiver();
    const dropped = await receiver();
    const t = await appDeclaring([kept.url]);
    const other = await appDeclaring([dropped.url], t);
    await other.close();
    // As when the last replica declaring it has been gone for DECLARED_FOR_MS.
    await t.database.query(
      `update webhook_endpoints set declared_until = now() - interval '1 second' where url = $1`,
      [dropped.url],
    );
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    await kept.waitFor(1);
    await settle(300);
    expect(dropped.requests).toHaveLength(0);
  });

  it('moves the deliveries an older release wrote by URL to its endpoint, with their webhook-id', async () => {
    const hook = await receiver();
    const before = await appDeclaring([]);
    const eventId = '0b8f2f4e-8d51-4d1c-9f53-8b1e8f6a0c11';
    await before.database.query(
      `insert into webhook_deliveries (event_id, url, body) values ($1, $2, '{"id":3,"name":"Old"}')`,
      [eventId, hook.url],
    );
    await appDeclaring([hook.url], before);
    const [request] = await hook.waitFor(1);
    expect(request?.body).toBe('{"id":3,"name":"Old"}');
    expect(request?.headers['webhook-id']).toBe(`msg_${eventId.replaceAll('-', '')}`);
  });
});

describe.runIf(testEngine() === 'postgres')('WEBHOOK_URLS declared by two replicas at once', () => {
  it('seals WEBHOOK_SECRET for the row the other replica inserted, and signs with it', async () => {
    const hook = await receiver();
    const keys = [ringKey('k1')];
    const place = (endpoint: string) => ({ endpoint, field: 'secret' }) as const;
    const t = await appSendingTo([], { encryptionKeys: keys });
    // The other replica inserts the URL's row; its transaction is still open.
    const replica = new Client({ connectionString: t.database.url });
    await replica.connect();
    open.push({ close: () => replica.end() });
    await replica.query('begin');
    const inserted = await replica.query<{ id: string }>(
      `insert into webhook_endpoints (url, secret, configured, declared_until)
       values ($1, '', true, now() + interval '1 hour') returning id::text as id`,
      [hook.url],
    );
    const id = inserted.rows[0]?.id ?? '';
    const theirs = sealSecret(WEBHOOK_SECRET, keys, place(id));
    await replica.query('update webhook_endpoints set secret = $2 where id = $1', [id, theirs]);
    const sealFor = (endpoint: string) => sealSecret(WEBHOOK_SECRET, keys, place(endpoint));
    const declaring = createDeclarations(t.appDatabase.db).declare([hook.url], sealFor, 60_000);
    // This declaration drew a row key of its own, and its insert waits for the other's.
    await eventually(
      () =>
        t.database.query(
          `select 1 from pg_locks l join pg_stat_activity a on a.pid = l.pid
            where not l.granted and a.datname = current_database()`,
        ),
      (waiting) => waiting.length > 0,
    );
    await replica.query('commit');
    await declaring;
    const rows = await t.database.query<{ id: string; secret: string }>(
      'select id::text as id, secret from webhook_endpoints where configured',
    );
    expect(rows.map((row) => row.id)).toStrictEqual([id]);
    expect(rows[0]?.secret).not.toBe(theirs);
    expect(openSecret(rows[0]?.secret ?? '', keys, place(id))).toBe(WEBHOOK_SECRET);
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    expect((await hook.waitFor(1))[0]?.verified).toBe(true);
  });
});
