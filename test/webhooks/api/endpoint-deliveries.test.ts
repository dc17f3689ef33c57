// Deliveries to endpoints made through the management API, as the dispatcher makes them:
// each endpoint signed with its own key, the attempt log, rotation, 410 and long failures
// disabling an endpoint, private destinations refused before connecting, retention.
import { createHmac, randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { describe, expect, it } from 'vitest';
import { createDeclarations } from '../../../src/webhooks/delivery/declare.js';
import { createOutbox } from '../../../src/webhooks/delivery/outbox.js';
import { createOutcomeStatements } from '../../../src/webhooks/delivery/outcomes.js';
import { ENGINE_TIMING, leaseMsFor } from '../../../src/webhooks/delivery/timing.js';
import { createUpkeep } from '../../../src/webhooks/delivery/upkeep.js';
import {
  generateSecret,
  type KeyRing,
  sealSecret,
} from '../../../src/webhooks/security/secrets.js';
import { endpointIdOf } from '../../../src/webhooks/tables/ids.js';
import { postPlant, startTestApp, type TestApp } from '../../helpers/app.js';
import { testEngine } from '../../helpers/database.js';
import { eventually } from '../../helpers/eventually.js';
import {
  type Answer,
  type ReceivedRequest,
  startReceiver,
  WEBHOOK_SECRET,
} from '../../helpers/receiver.js';
import { ringKey } from '../../helpers/sealed.js';
import { webhookApps } from '../../helpers/webhook-apps.js';

const ADMIN_TOKEN = 'admin-token-races-2b8e';

/** Apps sending to endpoints (and to `urls`), allowed to reach loopback unless told not to. */
const { app, receiver, track } = webhookApps(ADMIN_TOKEN, {
  retrySchedule: [0.1, 0.2],
  concurrency: 8,
});

/** A key ring of one new key. */
const ringOf = (id: string): KeyRing => [ringKey(id)];

const secretOf = (id: string) => ({ endpoint: id, field: 'secret' }) as const;

/** An endpoint row, as the management API writes one; returns its key. */
async function endpoint(
  t: TestApp,
  url: string,
  secret: string,
  { keys = [], disabled = false }: { keys?: KeyRing; disabled?: boolean } = {},
): Promise<string> {
  const [row] = await t.database.query<{ id: string }>(
    "select nextval(pg_get_serial_sequence('webhook_endpoints', 'id'))::text as id",
  );
  const id = row?.id ?? '';
  await t.database.query(
    `insert into webhook_endpoints (id, url, secret, disabled) overriding system value
     values ($1, $2, $3, $4)`,
    [id, url, sealSecret(secret, keys, secretOf(id)), disabled],
  );
  return id;
}

/** An endpoint made through the management API (optionally with `secret`). */
async function endpointThroughTheApi(t: TestApp, url: string, secret?: string): Promise<void> {
  const response = await t.app.inject({
    method: 'POST',
    url: '/webhooks/endpoints',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    payload: JSON.stringify({ url, ...(secret && { secret }) }),
  });
  expect(response.statusCode, response.body).toBe(201);
}

interface AttemptRow extends Record<string, unknown> {
  endpoint_id: string;
  plant_id: string | null;
  succeeded: boolean;
  response_status: number | null;
  error: string | null;
}

const attempts = (t: TestApp) =>
  t.database.query<AttemptRow>(
    `select endpoint_id::text, plant_id::text, succeeded, response_status, error
       from webhook_attempts order by id`,
  );

const endpointRow = async (t: TestApp, id: string) =>
  (
    await t.database.query<{ disabled: boolean; disabled_reason: string | null }>(
      'select disabled, disabled_reason from webhook_endpoints where id = $1',
      [id],
    )
  )[0];

const verify = (secret: string, request: ReceivedRequest, signature: string) => {
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const id = request.headers['webhook-id'];
  const timestamp = request.headers['webhook-timestamp'];
  const expected = createHmac('sha256', key)
    .update(`${id}.${timestamp}.${request.body}`)
    .digest('base64');
  return signature === `v1,${expected}`;
};

describe('deliveries to endpoints', () => {
  it('signs each endpoint with its own key, beside a static URL signed with WEBHOOK_SECRET', async () => {
    const static_ = await startReceiver();
    track(static_);
    const [secretA, secretB] = [generateSecret(), generateSecret()];
    const [a, b] = [await receiver(secretA), await receiver(secretB)];
    const t = await app({ urls: [static_.url], secret: WEBHOOK_SECRET });
    const idA = await endpoint(t, a.url, secretA);
    await endpoint(t, b.url, secretB, { keys: ringOf('elsewhere') });
    expect((await postPlant(t.app, '{"id":9007199254740993,"name":"Fern"}')).statusCode).toBe(200);
    // b's key was sealed under a key this service does not have: it cannot sign for b.
    const [fromA] = await a.waitFor(1);
    const [fromStatic] = await static_.waitFor(1);
    expect(fromA).toMatchObject({ body: '{"id":9007199254740993,"name":"Fern"}', verified: true });
    expect(fromStatic?.verified).toBe(true);
    expect(fromA?.headers['webhook-id']).toBe(fromStatic?.headers['webhook-id']);
    // A receiver holding another endpoint's secret cannot verify it.
    expect(
      verify(secretB, fromA as ReceivedRequest, fromA?.headers['webhook-signature'] as string),
    ).toBe(false);
    // A delivery's outcome is written in the next batch, b's failures at once: wait for both.
    const log = await eventually(
      () => attempts(t),
      (rows) => rows.some((row) => row.endpoint_id === idA) && rows.length >= 2,
    );
    expect(log).toContainEqual({
      endpoint_id: idA,
      plant_id: '9007199254740993',
      succeeded: true,
      response_status: 200,
      error: null,
    });
    expect(log.find((row) => row.endpoint_id !== idA)).toMatchObject({
      succeeded: false,
      response_status: null,
      error: "the endpoint's signing secret cannot be read",
    });
    expect(b.requests).toHaveLength(0);
  });

  it('opens secrets sealed under any key of WEBHOOK_ENCRYPTION_KEYS', async () => {
    const older = ringOf('k1');
    const secret = generateSecret();
    const hook = await receiver(secret);
    const t = await app({ encryptionKeys: [...ringOf('k2'), ...older] });
    await endpoint(t, hook.url, secret, { keys: older });
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    expect((await hook.waitFor(1))[0]?.verified).toBe(true);
  });

  it("does not sign with a sealed key copied from another endpoint's row", async () => {
    const keys = ringOf('k1');
    const [secretA, secretB] = [generateSecret(), generateSecret()];
    const [a, b] = [await receiver(secretA), await receiver(secretB)];
    const t = await app({ encryptionKeys: keys, retrySchedule: [] });
    const idA = await endpoint(t, a.url, secretA, { keys });
    const idB = await endpoint(t, b.url, secretB, { keys });
    await t.database.query(
      'update webhook_endpoints set secret = (select secret from webhook_endpoints where id = $1) where id = $2',
      [idA, idB],
    );
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    expect((await a.waitFor(1))[0]?.verified).toBe(true);
    const log = await eventually(
      () => attempts(t),
      (rows) => rows.length === 2,
    );
    expect(log.find((row) => row.endpoint_id === idB)).toMatchObject({
      succeeded: false,
      error: "the endpoint's signing secret cannot be read",
    });
    expect(b.requests).toHaveLength(0);
  });

  it('writes no event when there is no subscriber at all, and one per plant once an endpoint exists', async () => {
    const t = await app();
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    expect(await t.database.query('select 1 from webhook_events')).toHaveLength(0);
    expect(await t.database.query('select 1 from webhook_deliveries')).toHaveLength(0);
    const secret = generateSecret();
    const hook = await receiver(secret);
    await endpoint(t, hook.url, secret);
    expect((await postPlant(t.app, { id: 2, name: 'Aloe' })).statusCode).toBe(200);
    const [request] = await hook.waitFor(1);
    expect(request?.body).toBe('{"id":2,"name":"Aloe"}');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(hook.requests).toHaveLength(1);
  });

  it('signs with the new key and then the old one during a rotation', async () => {
    const [oldSecret, newSecret] = [generateSecret(), generateSecret()];
    const hook = await receiver(newSecret);
    const t = await app();
    const id = await endpoint(t, hook.url, newSecret);
    await t.database.query(
      `update webhook_endpoints set previous_secret = $2,
              previous_secret_until = now() + interval '1 hour' where id = $1`,
      [id, sealSecret(oldSecret, [], secretOf(id))],
    );
    expect((await postPlant(t.app, { id: 3, name: 'Aloe' })).statusCode).toBe(200);
    const [request] = await hook.waitFor(1);
    const signatures = String(request?.headers['webhook-signature']).split(' ');
    expect(signatures).toHaveLength(2);
    expect(verify(newSecret, request as ReceivedRequest, signatures[0] as string)).toBe(true);
    expect(verify(oldSecret, request as ReceivedRequest, signatures[1] as string)).toBe(true);
    expect(request?.verified).toBe(true);
  });

  it('leaves out an old key it cannot read, and signs with the new one alone', async () => {
    const secret = generateSecret();
    const hook = await receiver(secret);
    const t = await app();
    const id = await endpoint(t, hook.url, secret);
    await t.database.query(
      `update webhook_endpoints set previous_secret = $2,
              previous_secret_until = now() + interval '1 hour' where id = $1`,
      [id, sealSecret(generateSecret(), ringOf('elsewhere'), secretOf(id))],
    );
    expect((await postPlant(t.app, { id: 3, name: 'Aloe' })).statusCode).toBe(200);
    const [request] = await hook.waitFor(1);
    expect(String(request?.headers['webhook-signature']).split(' ')).toHaveLength(1);
    expect(request?.verified).toBe(true);
  });

  it('disables an endpoint on a 410, records what it misses as failed, and sends it after a recover', async () => {
    const secret = generateSecret();
    let gone = true;
    const hook = await receiver(secret, () => ({ status: gone ? 410 : 200 }));
    const t = await app();
    const id = await endpoint(t, hook.url, secret);
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const row = await eventually(
      () => endpointRow(t, id),
      (r) => r?.disabled === true,
    );
    expect(row).toStrictEqual({
      disabled: true,
      disabled_reason: 'the receiver answered 410 Gone',
    });
    expect((await postPlant(t.app, { id: 2, name: 'Aloe' })).statusCode).toBe(200);
    const missed = await eventually(
      () =>
        t.database.query<{ last_error: string | null; failed: boolean }>(
          'select last_error, failed_at is not null as failed from webhook_deliveries order by id',
        ),
      (rows) => rows.length === 2,
    );
    expect(missed).toStrictEqual([
      { last_error: 'HTTP 410', failed: true },
      { last_error: 'endpoint disabled', failed: true },
    ]);
    expect(hook.requests).toHaveLength(1);
    gone = false;
    await t.database.query(
      'update webhook_endpoints set disabled = false, disabled_reason = null where id = $1',
      [id],
    );
    await t.database.query(
      'update webhook_deliveries set failed_at = null, attempts = 0, next_attempt_at = now()',
    );
    const requests = await hook.waitFor(3);
    expect(
      requests
        .slice(1)
        .map((r) => r.body)
        .sort(),
    ).toStrictEqual(['{"id":1,"name":"Aloe"}', '{"id":2,"name":"Aloe"}']);
  });

  it('disables an endpoint whose attempts all failed for WEBHOOK_DISABLE_AFTER_S', async () => {
    const secret = generateSecret();
    const hook = await receiver(secret, () => ({ status: 500 }));
    const t = await app({ disableAfterS: 60, retrySchedule: [0.05, 0.05, 0.05] });
    const id = await endpoint(t, hook.url, secret);
    await t.database.query(
      `update webhook_endpoints set failing_since = now() - interval '61 seconds' where id = $1`,
      [id],
    );
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const row = await eventually(
      () => endpointRow(t, id),
      (r) => r?.disabled === true,
    );
    expect(row).toStrictEqual({
      disabled: true,
      disabled_reason: 'every attempt failed for 60 seconds (WEBHOOK_DISABLE_AFTER_S)',
    });
    // Counted once the statement that disabled it has answered, a moment after it committed.
    const counted = 'plant_store_webhook_endpoints_disabled_total{reason="failing"} 1';
    const metrics = await eventually(
      async () => (await t.app.inject({ method: 'GET', url: '/metrics' })).body,
      (body) => body.includes(counted),
    );
    expect(metrics).toContain(counted);
  });

  it('ends a run of failures with a success', async () => {
    const secret = generateSecret();
    const hook = await receiver(secret, (_, n) => ({ status: n === 0 ? 500 : 200 }));
    const t = await app();
    const id = await endpoint(t, hook.url, secret);
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    await hook.waitFor(2);
    const log = await eventually(
      () => attempts(t),
      (rows) => rows.length === 2,
    );
    expect(log.map((row) => [row.succeeded, row.response_status])).toStrictEqual([
      [false, 500],
      [true, 200],
    ]);
    const [health] = await t.database.query<{ failing: boolean }>(
      'select failing_since is not null as failing from webhook_endpoints where id = $1',
      [id],
    );
    expect(health).toStrictEqual({ failing: false });
  });

  it.each([
    ['a loopback address', (port: number) => `http://127.0.0.1:${port}/hook`],
    ['a name that resolves to loopback', (port: number) => `http://localhost:${port}/hook`],
    ['an IPv4-mapped loopback address', (port: number) => `http://[::ffff:127.0.0.1]:${port}/hook`],
    ['an IPv6 loopback address', (port: number) => `http://[::1]:${port}/hook`],
    ['the unspecified address', (port: number) => `http://0.0.0.0:${port}/hook`],
    ['an IPv4-mapped loopback in hex', (port: number) => `http://[::ffff:7f00:2]:${port}/hook`],
  ])('refuses %s before connecting unless private networks are allowed', async (_, url) => {
    const secret = generateSecret();
    const hook = await receiver(secret);
    const t = await app({ allowPrivateNetworks: false, retrySchedule: [] });
    await endpoint(t, url(hook.port), secret);
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const log = await eventually(
      () => attempts(t),
      (rows) => rows.length === 1,
    );
    expect(log[0]).toMatchObject({
      succeeded: false,
      response_status: null,
      error:
        'destination not allowed: its address is loopback, private or otherwise special-purpose; set WEBHOOK_ALLOW_PRIVATE_NETWORKS=true to allow it (for local development and tests)',
    });
    expect(hook.requests).toHaveLength(0);
  });

  it('counts no backlog for a configured endpoint that no replica declares any more', async () => {
    const t = await app();
    await t.dispatcher?.stop(0);
    const [row] = await t.database.query<{ id: string }>(
      `insert into webhook_endpoints (url, secret, configured, declared_until)
       values ('http://127.0.0.1:9/lapsed', 'plain:whsec_unused', true, now() - interval '1 second')
       returning id::text`,
    );
    await t.database.query(
      `insert into webhook_deliveries (event_id, endpoint_id, body, next_attempt_at)
       values (gen_random_uuid(), $1, '{}', now() - interval '1 hour')`,
      [row?.id],
    );
    const upkeep = createUpkeep(t.appDatabase.db, { logRetentionS: 3600 });
    expect(await upkeep.stats()).toStrictEqual({ pending: 0, failed: 0, oldestDueSeconds: 0 });
    await t.database.query(
      "update webhook_endpoints set declared_until = now() + interval '1 minute'",
    );
    const declared = await upkeep.stats();
    expect(declared.pending).toBe(1);
    expect(declared.oldestDueSeconds).toBeGreaterThanOrEqual(3600);
  });

  it('sweeps attempts and failed deliveries older than WEBHOOK_LOG_RETENTION_S, and old keys past their grace', async () => {
    const t = await app();
    const id = await endpoint(t, 'http://127.0.0.1:9/hook', generateSecret());
    await t.database.query(
      `insert into webhook_attempts (endpoint_id, event_id, succeeded, duration_ms, attempted_at)
       values ($1, gen_random_uuid(), true, 1, now() - interval '2 hours'),
              ($1, gen_random_uuid(), true, 1, now())`,
      [id],
    );
    await t.database.query(
      `insert into webhook_deliveries (event_id, endpoint_id, body, failed_at)
       values (gen_random_uuid(), $1, '{}', now() - interval '2 hours'),
              (gen_random_uuid(), $1, '{}', now())`,
      [id],
    );
    await t.database.query(
      `update webhook_endpoints set previous_secret = 'plain:whsec_old',
              previous_secret_until = now() - interval '1 second' where id = $1`,
      [id],
    );
    const upkeep = createUpkeep(t.appDatabase.db, { logRetentionS: 3600 });
    expect(await upkeep.sweep()).toBe(2);
    expect(
      await t.database.query(
        'select previous_secret, previous_secret_until from webhook_endpoints',
      ),
    ).toStrictEqual([{ previous_secret: null, previous_secret_until: null }]);
    expect(await t.database.query('select 1 from webhook_attempts')).toHaveLength(1);
    expect(await t.database.query('select 1 from webhook_deliveries')).toHaveLength(1);
  });
});

describe('a retry', () => {
  it('is claimed once its outcome is written, however long that takes, not at the next poll', async () => {
    const secret = generateSecret();
    let n = 0;
    const hook = await receiver(secret, () => ({ status: n++ === 0 ? 503 : 200 }));
    const t = await app({ retrySchedule: [0.05] }, { webhookTiming: { pollIntervalMs: 60_000 } });
    // Writing the failed attempt's outcome takes 300 ms, six times the retry's delay.
    await t.database.query(`create function slow_outcome() returns trigger language plpgsql as $$
      begin perform pg_sleep(0.3); return new; end $$`);
    await t.database.query(`create trigger slow_outcome before update on webhook_deliveries
      for each row when (new.last_status is not null) execute function slow_outcome()`);
    await endpoint(t, hook.url, secret);
    expect((await postPlant(t.app, { id: 1, name: 'Fern' })).statusCode).toBe(200);
    const [first, retry] = await hook.waitFor(2, 5000);
    expect(first?.headers['webhook-id']).toBe(retry?.headers['webhook-id']);
    expect(retry?.verified).toBe(true);
  });
});

describe('a retry, with no poll before the test ends', () => {
  /** Only a wake can deliver a retry in time: the poll comes a minute after the start. */
  const onlyWakes = { pollIntervalMs: 60_000 };
  /** A receiver that answers the first attempt of each plant as `first` says (503), then 200. */
  async function failingFirst(
    secret: string,
    first: (body: string) => Answer = () => ({ status: 503 }),
  ) {
    const hook = await receiver(secret, (request) =>
      hook.requests.some((earlier) => earlier.body === request.body)
        ? { status: 200 }
        : first(request.body),
    );
    return hook;
  }
  /** Resolves once the retry of `count` deliveries is written (their first attempt failed). */
  const retriesWritten = (t: TestApp, count: number) =>
    eventually(
      () => t.database.query('select 1 from webhook_deliveries where last_status = 503'),
      (rows) => rows.length === count,
    );
  const bodies = (requests: ReceivedRequest[]) => requests.map((request) => request.body).sort();

  it('is claimed when due though an earlier retry of its endpoint was still waited for', async () => {
    const secret = generateSecret();
    const hook = await failingFirst(secret);
    const t = await app({ retrySchedule: [1] }, { webhookTiming: onlyWakes });
    await endpoint(t, hook.url, secret);
    expect((await postPlant(t.app, { id: 1, name: 'Fern' })).statusCode).toBe(200);
    await retriesWritten(t, 1);
    // Its retry falls due after the first one's, whose wake is pending.
    expect((await postPlant(t.app, { id: 2, name: 'Ivy' })).statusCode).toBe(200);
    expect(bodies(await hook.waitFor(4, 10_000))).toStrictEqual([
      '{"id":1,"name":"Fern"}',
      '{"id":1,"name":"Fern"}',
      '{"id":2,"name":"Ivy"}',
      '{"id":2,"name":"Ivy"}',
    ]);
  });

  it('is claimed when its lane frees up, having fallen due while the lane was full', async () => {
    const secret = generateSecret();
    // Plant 2's attempt holds the lane's one slot for a second.
    const hook = await failingFirst(secret, (body) =>
      body.includes('"id":2') ? { status: 200, delayMs: 1000 } : { status: 503 },
    );
    const t = await app(
      { retrySchedule: [0.2], concurrency: 1, timeoutMs: 3000 },
      { webhookTiming: onlyWakes },
    );
    await endpoint(t, hook.url, secret);
    expect((await postPlant(t.app, { id: 1, name: 'Fern' })).statusCode).toBe(200);
    await retriesWritten(t, 1);
    expect((await postPlant(t.app, { id: 2, name: 'Ivy' })).statusCode).toBe(200);
    const requests = await hook.waitFor(3, 10_000);
    expect(bodies(requests)).toStrictEqual([
      '{"id":1,"name":"Fern"}',
      '{"id":1,"name":"Fern"}',
      '{"id":2,"name":"Ivy"}',
    ]);
    // The retry fell due while plant 2's attempt held the lane.
    expect(requests[2]?.body).toBe('{"id":1,"name":"Fern"}');
  });

  it("is claimed when due by the database's clock, though that runs ahead of this process's", async () => {
    const secret = generateSecret();
    const hook = await failingFirst(secret);
    const t = await app(
      { retrySchedule: [0.2] },
      { webhookTiming: { ...onlyWakes, wakeMarginMs: 100 } },
    );
    // Each retry falls due 50 ms later than this process reckons: as if its timer fired early.
    await t.database.query(`create function late_retry() returns trigger language plpgsql as $$
      begin new.next_attempt_at := new.next_attempt_at + interval '50 milliseconds'; return new; end $$`);
    await t.database.query(`create trigger late_retry before update on webhook_deliveries
      for each row when (new.last_status is not null and new.failed_at is null)
      execute function late_retry()`);
    await endpoint(t, hook.url, secret);
    expect((await postPlant(t.app, { id: 1, name: 'Fern' })).statusCode).toBe(200);
    expect(bodies(await hook.waitFor(2, 10_000))).toStrictEqual([
      '{"id":1,"name":"Fern"}',
      '{"id":1,"name":"Fern"}',
    ]);
  });
});

describe('endpoints through the API, end to end', () => {
  const ADMIN = 'admin-token-e2e-5d1f';
  const admin = (
    t: TestApp,
    method: 'GET' | 'POST' | 'PATCH' | 'DELETE',
    url: string,
    body?: unknown,
  ) =>
    t.app.inject({
      method,
      url,
      headers: {
        authorization: `Bearer ${ADMIN}`,
        ...(body !== undefined && { 'content-type': 'application/json' }),
      },
      ...(body !== undefined && { payload: JSON.stringify(body) }),
    });

  it('subscribes, signs with the key the API shows, rotates, logs attempts, and recovers after a 410', async () => {
    let status = 200;
    let secret = '';
    const requests: ReceivedRequest[] = [];
    const hook = await startReceiver(
      (request) => {
        requests.push(request);
        return { status };
      },
      { secret: generateSecret() },
    );
    track(hook);
    const t = await startTestApp({
      env: { ADMIN_TOKENS: ADMIN, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' },
      webhooks: { timeoutMs: 1000, retrySchedule: [0.1] },
    });
    track(t);
    const created = await admin(t, 'POST', '/webhooks/endpoints', { url: hook.url });
    expect(created.statusCode, created.body).toBe(201);
    const { id } = created.json() as { id: string };
    secret = (await admin(t, 'GET', `/webhooks/endpoints/${id}/secret`)).json().key;

    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    await hook.waitFor(1);
    const first = requests[0] as ReceivedRequest;
    expect(verify(secret, first, String(first.headers['webhook-signature']))).toBe(true);

    // A rotation: the next delivery carries the new key's signature, then the old one's.
    expect((await admin(t, 'POST', `/webhooks/endpoints/${id}/secret/rotate`, {})).statusCode).toBe(
      204,
    );
    const rotated = (await admin(t, 'GET', `/webhooks/endpoints/${id}/secret`)).json().key;
    expect((await postPlant(t.app, { id: 2, name: 'Aloe' })).statusCode).toBe(200);
    await hook.waitFor(2);
    const [newSignature, oldSignature] = String(requests[1]?.headers['webhook-signature']).split(
      ' ',
    );
    expect(verify(rotated, requests[1] as ReceivedRequest, newSignature as string)).toBe(true);
    expect(verify(secret, requests[1] as ReceivedRequest, oldSignature as string)).toBe(true);

    // A 410 disables the endpoint; what it misses is recorded failed.
    status = 410;
    expect((await postPlant(t.app, { id: 3, name: 'Aloe' })).statusCode).toBe(200);
    const disabled = await eventually(
      async () => (await admin(t, 'GET', `/webhooks/endpoints/${id}`)).json(),
      (endpoint) => endpoint.disabled === true,
    );
    expect(disabled).toMatchObject({
      disabled: true,
      disabledReason: 'the receiver answered 410 Gone',
    });
    expect((await postPlant(t.app, { id: 4, name: 'Aloe' })).statusCode).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(requests).toHaveLength(3);

    const log = await eventually(
      async () => (await admin(t, 'GET', `/webhooks/endpoints/${id}/attempts`)).json(),
      (attempts: unknown[]) => attempts.length === 4,
    );
    const listed = log as Array<{ plantId: number; status: string }>;
    expect(listed.map((a) => [a.plantId, a.status])).toStrictEqual([
      [4, 'failed'],
      [3, 'failed'],
      [2, 'succeeded'],
      [1, 'succeeded'],
    ]);
    // What the disabled endpoint missed is in its log, as no attempt.
    expect(log[0]).toStrictEqual({
      id: expect.stringMatching(/^att_/),
      eventId: expect.stringMatching(/^msg_/),
      plantId: 4,
      trigger: 'delivery',
      status: 'failed',
      error: 'endpoint disabled',
      durationMs: 0,
      attemptedAt: expect.any(String),
    });
    expect(log[1]).toMatchObject({ responseStatus: 410 });

    // Enabled again and recovered: both missed plants arrive, with their first webhook-id.
    status = 200;
    expect(
      (await admin(t, 'PATCH', `/webhooks/endpoints/${id}`, { disabled: false })).statusCode,
    ).toBe(200);
    const since = new Date(Date.now() - 60_000).toISOString();
    const recovered = await admin(t, 'POST', `/webhooks/endpoints/${id}/recover`, { since });
    expect(recovered.statusCode, recovered.body).toBe(202);
    await hook.waitFor(5);
    expect(
      requests
        .slice(3)
        .map((r) => r.body)
        .sort(),
    ).toStrictEqual(['{"id":3,"name":"Aloe"}', '{"id":4,"name":"Aloe"}']);
    expect(requests[3]?.headers['webhook-id'] ?? requests[4]?.headers['webhook-id']).toBeDefined();
    const redelivered = requests.find(
      (r) => r.body === '{"id":3,"name":"Aloe"}' && r !== requests[2],
    );
    expect(redelivered?.headers['webhook-id']).toBe(requests[2]?.headers['webhook-id']);
    const missedAgain = requests.find((r) => r.body === '{"id":4,"name":"Aloe"}');
    expect(missedAgain?.headers['webhook-id']).toBe((log[0] as { eventId: string }).eventId);
  });

  it('answers each change within 300 ms; the next delivery goes as changed, here and on another replica', async () => {
    const before = await receiver(generateSecret());
    const after = await receiver(generateSecret());
    const t = await app();
    const other = await startTestApp({
      replicaOf: t,
      env: { ADMIN_TOKENS: ADMIN, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' },
      webhooks: { timeoutMs: 1000, retrySchedule: [0.1] },
    });
    track(other);
    const timed = async (method: 'PATCH' | 'POST' | 'DELETE', url: string, body?: unknown) => {
      const started = performance.now();
      const response = await admin(other, method, url, body);
      expect(performance.now() - started, `${method} ${url}`).toBeLessThan(300);
      return response;
    };
    const created = await admin(other, 'POST', '/webhooks/endpoints', { url: before.url });
    const { id } = created.json() as { id: string };
    expect((await postPlant(other.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    await before.waitFor(1);

    const patched = await timed('PATCH', `/webhooks/endpoints/${id}`, { url: after.url });
    expect(patched.statusCode).toBe(200);
    expect((await postPlant(other.app, { id: 2, name: 'Aloe' })).statusCode).toBe(200);
    await after.waitFor(1);
    // Within a second, every replica sends as changed.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect((await postPlant(t.app, { id: 3, name: 'Aloe' })).statusCode).toBe(200);
    await after.waitFor(2);
    expect(before.requests.map((r) => r.body)).toStrictEqual(['{"id":1,"name":"Aloe"}']);

    const rotated = await timed('POST', `/webhooks/endpoints/${id}/secret/rotate`, {});
    expect(rotated.statusCode).toBe(204);
    const deleted = await timed('DELETE', `/webhooks/endpoints/${id}`);
    expect(deleted.statusCode).toBe(204);
    expect((await postPlant(other.app, { id: 4, name: 'Aloe' })).statusCode).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(after.requests).toHaveLength(2);
  });
});

describe.runIf(testEngine() === 'postgres')('races with a change of the endpoints', () => {
  /** A connection of its own, for a transaction that the test holds open. */
  async function connection(t: TestApp) {
    const client = new Client({ connectionString: t.database.url });
    await client.connect();
    track({ close: () => client.end() });
    return client;
  }
  /** Records a plant's event as the service's create statement does. */
  const recordEvent = (client: Client, id: number) =>
    client.query(
      `with plant as (insert into plants (id, name) values ($1, 'Late') returning id)
       select record_created_events(array(select format('{"id":%s,"name":"Late"}', id) from plant),
                                    null, false)`,
      [id],
    );

  it('claims again at once a delivery given back because its fan-out answered after the start window', async () => {
    const secret = generateSecret();
    const hook = await receiver(secret);
    const t = await app({}, { webhookTiming: { pollIntervalMs: 60_000, startWindowMs: 100 } });
    const key = await endpoint(t, hook.url, secret);
    // The fan-out's insert waits for the endpoint's row, which this transaction holds.
    const client = await connection(t);
    await client.query('begin');
    await client.query('select 1 from webhook_endpoints where id = $1 for update', [key]);
    expect((await postPlant(t.app, { id: 1, name: 'Fern' })).statusCode).toBe(200);
    const waiting = () =>
      t.database.query<{ n: number }>(
        `select count(*)::int4 as n from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock'`,
      );
    expect(await eventually(waiting, ([row]) => row?.n === 1)).toStrictEqual([{ n: 1 }]);
    // Past the start window, the delivery it answers with is given back, not attempted.
    await new Promise((resolve) => setTimeout(resolve, 150));
    await client.query('commit');
    const [request] = await hook.waitFor(1, 5000);
    expect(request?.verified).toBe(true);
    const [attempt] = await eventually(
      () => t.database.query<{ trigger: string }>('select trigger from webhook_attempts'),
      (rows) => rows.length === 1,
    );
    // Given back, it was not an attempt: its first is the delivery's own, not a retry.
    expect(attempt?.trigger).toBe('delivery');
  });

  it('sends a create committed after an endpoint was made, in a transaction begun before it', async () => {
    const secret = generateSecret();
    const hook = await receiver(secret);
    const t = await app();
    const client = await connection(t);
    await client.query('begin');
    await client.query('select 1');
    await endpointThroughTheApi(t, hook.url, secret);
    await recordEvent(client, 77);
    await client.query('commit');
    const [request] = await hook.waitFor(1);
    expect(request?.body).toBe('{"id":77,"name":"Late"}');
  });

  it('answers an endpoint made while a create runs once that create has committed', async () => {
    const hook = await receiver(generateSecret());
    const t = await app();
    const client = await connection(t);
    await client.query('begin');
    await recordEvent(client, 78);
    let answered = false;
    const made = endpointThroughTheApi(t, hook.url).then(() => {
      answered = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(answered).toBe(false);
    await client.query('commit');
    await made;
    expect((await postPlant(t.app, { id: 79, name: 'After' })).statusCode).toBe(200);
    const requests = await hook.waitFor(1);
    expect(requests.map((r) => r.body)).toContain('{"id":79,"name":"After"}');
  });

  it('writes an attempt-log batch whose endpoint is deleted while it is written, leaving it out', async () => {
    const t = await app();
    await t.dispatcher?.stop(0);
    const kept = await endpoint(t, 'http://127.0.0.1:9/kept', generateSecret());
    const deleted = await endpoint(t, 'http://127.0.0.1:9/deleted', generateSecret());
    const client = await connection(t);
    await client.query('begin');
    await client.query('delete from webhook_endpoints where id = $1', [deleted]);
    const record = (endpointKey: string) => ({
      endpoint: endpointKey,
      eventId: randomUUID(),
      plantId: '1',
      trigger: 'delivery' as const,
      eventType: 'newPlant',
      body: '{"id":1,"name":"Aloe"}',
      succeeded: true,
      durationMs: 3,
      attemptedAtMs: Date.now(),
      gone: false,
    });
    const statements = createOutcomeStatements(t.appDatabase.db, { disableAfterS: 3600 });
    const written = statements.record([
      { kind: 'released', id: '0', claim: '1', record: record(deleted) },
      { kind: 'released', id: '0', claim: '1', record: record(kept) },
    ]);
    await new Promise((resolve) => setTimeout(resolve, 200));
    await client.query('commit');
    await written;
    expect((await attempts(t)).map((row) => row.endpoint_id)).toStrictEqual([kept]);
  });

  it('leaves a claim made after a recover to its process when the claim before it ends late', async () => {
    const t = await app({ timeoutMs: 30_000 });
    await t.dispatcher?.stop(0);
    const key = await endpoint(t, 'http://127.0.0.1:9/claimed', generateSecret());
    await t.database.query(
      `insert into webhook_deliveries (event_id, endpoint_id, body) values ($1, $2, '{"id":1}')`,
      [randomUUID(), key],
    );
    // The lease the app's own statements were prepared with: the same text on a shared connection.
    const outbox = createOutbox(t.appDatabase.db, { leaseMs: leaseMsFor(30_000, ENGINE_TIMING) });
    const statements = createOutcomeStatements(t.appDatabase.db, { disableAfterS: 3600 });
    const [first] = await outbox.claim(10, key, []);
    const change = (method: 'PATCH' | 'POST', url: string, body: unknown) =>
      t.app.inject({
        method,
        url: `/webhooks/endpoints/${endpointIdOf(key)}${url}`,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        payload: JSON.stringify(body),
      });
    expect((await change('PATCH', '', { disabled: true })).statusCode).toBe(200);
    expect((await change('PATCH', '', { disabled: false })).statusCode).toBe(200);
    const since = new Date(Date.now() - 60_000).toISOString();
    expect((await change('POST', '/recover', { since })).statusCode).toBe(202);
    const [second] = await outbox.claim(10, key, []);
    expect(second?.attempt).toBe(first?.attempt);
    await statements.record([
      { kind: 'retry', id: first?.id ?? '', claim: first?.claim ?? '', delayMs: 0, error: 'late' },
    ]);
    expect(await outbox.claim(10, key, [])).toStrictEqual([]);
  });

  it('versions a change that waited for another after that one, though it began before', async () => {
    const t = await app();
    const key = await endpoint(t, 'http://127.0.0.1:9/versioned', generateSecret());
    const client = await connection(t);
    await client.query('begin');
    await client.query("update webhook_endpoints set description = 'first' where id = $1", [key]);
    const patched = t.app.inject({
      method: 'PATCH',
      url: `/webhooks/endpoints/${endpointIdOf(key)}`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      payload: JSON.stringify({ description: 'second' }),
    });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const { rows } = await client.query<{ ms: number }>(
      'select floor(extract(epoch from clock_timestamp()) * 1000)::float8 as ms',
    );
    await client.query('commit');
    const response = await patched;
    expect(response.statusCode, response.body).toBe(200);
    const updatedAt = Date.parse(response.json<{ updatedAt: string }>().updatedAt);
    expect(updatedAt).toBeGreaterThanOrEqual(rows[0]?.ms ?? Number.POSITIVE_INFINITY);
  });

  it.each([
    ['renewed', false],
    ['declared again', true],
  ])(
    'takes back a lapsed configured endpoint, %s, once a create that found no receiver has committed',
    async (_, seal) => {
      const t = await app();
      await t.dispatcher?.stop(0);
      const url = 'http://127.0.0.1:9/lapsed';
      const [row] = await t.database.query<{ id: string }>(
        `insert into webhook_endpoints (url, secret, configured, declared_until)
       values ($1, 'plain:whsec_unused', true, now() - interval '1 second') returning id::text`,
        [url],
      );
      const client = await connection(t);
      await client.query('begin');
      await recordEvent(client, 80);
      const declarations = createDeclarations(t.appDatabase.db);
      const sealFor = seal
        ? (key: string) => sealSecret(generateSecret(), [], secretOf(key))
        : undefined;
      let answered = false;
      const declared = declarations.declare([url], sealFor, 60_000).then(() => {
        answered = true;
      });
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(answered).toBe(false);
      await client.query('commit');
      await declared;
      const [endpointAfter] = await t.database.query<{ receiving: boolean; moved: boolean }>(
        `select declared_until > now() as receiving,
              since_event >= (select last_value from webhook_events_id_seq) as moved
         from webhook_endpoints where id = $1`,
        [row?.id],
      );
      expect(endpointAfter).toStrictEqual({ receiving: true, moved: true });
    },
  );
});
