// Resends and tests of endpoints, and the trigger of every attempt in the attempt log: each
// through the management API, to a receiver on loopback that verifies every signature.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { redeliverFailed } from '../../../src/webhooks/delivery/recovery.js';
import { createUpkeep } from '../../../src/webhooks/delivery/upkeep.js';
import { generateSecret } from '../../../src/webhooks/security/secrets.js';
import { postPlant, type TestApp } from '../../helpers/app.js';
import { serverUrlOf, testEngine } from '../../helpers/database.js';
import { eventually } from '../../helpers/eventually.js';
import { type Answer, type ReceivedRequest, startReceiver } from '../../helpers/receiver.js';
import { webhookApps } from '../../helpers/webhook-apps.js';

const ADMIN = 'admin-token-replays-8c2d';

const { app, track } = webhookApps(ADMIN, { retrySchedule: [0.1] });

const admin = (t: TestApp, method: 'GET' | 'POST' | 'PATCH', url: string, body?: unknown) =>
  t.app.inject({
    method,
    url,
    headers: {
      authorization: `Bearer ${ADMIN}`,
      ...(body !== undefined && { 'content-type': 'application/json' }),
    },
    ...(body !== undefined && { payload: JSON.stringify(body) }),
  });

/** A receiver that verifies with its own new key, and an endpoint signed with that key. */
async function subscriber(
  t: TestApp,
  answer: (request: ReceivedRequest, n: number) => Answer = () => ({ status: 200 }),
  extra: Record<string, unknown> = {},
) {
  const secret = generateSecret();
  const hook = await startReceiver(answer, { secret });
  track(hook);
  const created = await admin(t, 'POST', '/webhooks/endpoints', {
    url: hook.url,
    secret,
    ...extra,
  });
  expect(created.statusCode, created.body).toBe(201);
  const { id } = created.json() as { id: string };
  return { hook, id, path: `/webhooks/endpoints/${id}` };
}

interface Attempt {
  eventId: string;
  trigger: string;
  status: string;
  plantId?: number;
  responseStatus?: number;
}

const log = async (t: TestApp, path: string) =>
  (await admin(t, 'GET', `${path}/attempts`)).json() as Attempt[];

const settle = (ms = 400) => new Promise((resolve) => setTimeout(resolve, ms));

const resend = (t: TestApp, path: string, eventId: string) =>
  admin(t, 'POST', `${path}/events/${eventId}/resend`);

describe('the trigger of each attempt', () => {
  it('logs delivery, retry, recover (API and operator), resend and test, with the bytes sent', async () => {
    let failing = true;
    const t = await app();
    const { hook, path, id } = await subscriber(t, () => ({ status: failing ? 500 : 200 }));
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const failed = await eventually(
      () => log(t, path),
      (rows) => rows.length === 2,
    );
    expect(failed.map((a) => [a.trigger, a.responseStatus])).toStrictEqual([
      ['retry', 500],
      ['delivery', 500],
    ]);

    failing = false;
    const since = new Date(Date.now() - 60_000).toISOString();
    expect((await admin(t, 'POST', `${path}/recover`, { since })).statusCode).toBe(202);
    await eventually(
      () => log(t, path),
      (rows) => rows.length === 3,
    );
    const event = failed[0]?.eventId as string;
    expect((await resend(t, path, event)).statusCode).toBe(202);
    await eventually(
      () => log(t, path),
      (rows) => rows.length === 4,
    );
    const tested = await admin(t, 'POST', `${path}/test`);
    expect(tested.statusCode, tested.body).toBe(200);

    // The operator's redeliver: a failed delivery, due again.
    failing = true;
    expect((await postPlant(t.app, { id: 2, name: 'Ivy' })).statusCode).toBe(200);
    await eventually(
      () => log(t, path),
      (rows) => rows.length === 7,
    );
    failing = false;
    expect(await redeliverFailed(t.appDatabase.db, {})).toBe(1);
    const rows = await eventually(
      () => log(t, path),
      (all) => all.length === 8,
    );
    expect(rows.map((a) => [a.trigger, a.plantId, a.status])).toStrictEqual([
      ['recover', 2, 'succeeded'],
      ['retry', 2, 'failed'],
      ['delivery', 2, 'failed'],
      // A test's example names no stored plant.
      ['test', undefined, 'succeeded'],
      ['resend', 1, 'succeeded'],
      ['recover', 1, 'succeeded'],
      ['retry', 1, 'failed'],
      ['delivery', 1, 'failed'],
    ]);
    expect(new Set(rows.slice(4).map((a) => a.eventId))).toStrictEqual(new Set([event]));
    expect(rows[3]?.eventId).toMatch(/^msg_test_[0-9a-f]{32}$/);
    expect(hook.requests.every((request) => request.verified)).toBe(true);

    const stored = await t.database.query<{ trigger: string; event_type: string; body: string }>(
      'select trigger, event_type, body from webhook_attempts where endpoint_id = $1 order by id',
      [BigInt(`0x${id.slice(3)}`).toString()],
    );
    expect(stored.slice(0, 5)).toStrictEqual([
      { trigger: 'delivery', event_type: 'newPlant', body: '{"id":1,"name":"Aloe"}' },
      { trigger: 'retry', event_type: 'newPlant', body: '{"id":1,"name":"Aloe"}' },
      { trigger: 'recover', event_type: 'newPlant', body: '{"id":1,"name":"Aloe"}' },
      { trigger: 'resend', event_type: 'newPlant', body: '{"id":1,"name":"Aloe"}' },
      {
        trigger: 'test',
        event_type: 'newPlant',
        body: '{"id":9007199254740991,"name":"Monstera","tag":"aroid"}',
      },
    ]);
  });

  it('logs what a disabled endpoint misses with its body, and resends it once enabled', async () => {
    const t = await app();
    const { hook, path } = await subscriber(t);
    expect((await admin(t, 'PATCH', path, { disabled: true })).statusCode).toBe(200);
    expect((await postPlant(t.app, { id: 5, name: 'Fern' })).statusCode).toBe(200);
    const [missed] = await eventually(
      () => log(t, path),
      (rows) => rows.length === 1,
    );
    expect(missed).toMatchObject({ trigger: 'delivery', plantId: 5, status: 'failed' });
    expect((await resend(t, path, missed?.eventId as string)).statusCode).toBe(409);
    expect((await admin(t, 'PATCH', path, { disabled: false })).statusCode).toBe(200);
    expect((await resend(t, path, missed?.eventId as string)).statusCode).toBe(202);
    const [request] = await hook.waitFor(1);
    expect(request).toMatchObject({ body: '{"id":5,"name":"Fern"}', verified: true });
    expect(request?.headers['webhook-id']).toBe(missed?.eventId);
  });
});

describe("the operator's redeliver", () => {
  it("recovers as the API's recover does: afresh, and never a disabled endpoint's", async () => {
    const t = await app();
    await t.dispatcher?.stop(0);
    const keyOf = async (body: Record<string, unknown>) => {
      const created = await admin(t, 'POST', '/webhooks/endpoints', body);
      expect(created.statusCode, created.body).toBe(201);
      return BigInt(`0x${created.json<{ id: string }>().id.slice(3)}`).toString();
    };
    const enabled = await keyOf({ url: 'http://127.0.0.1:9/enabled' });
    const disabled = await keyOf({ url: 'http://127.0.0.1:9/disabled', disabled: true });
    await t.database.query(
      `insert into webhook_deliveries (event_id, endpoint_id, body, attempts, failed_at, last_status,
                                       last_error)
       select gen_random_uuid(), id, '{"id":1}', 2, now(), 500, 'HTTP 500' from unnest($1::int8[]) as id`,
      [[enabled, disabled]],
    );
    expect(await redeliverFailed(t.appDatabase.db, {}, true)).toBe(1);
    expect(await redeliverFailed(t.appDatabase.db, {})).toBe(1);
    const rows = await t.database.query(
      `select endpoint_id::text as endpoint, failed_at is not null as failed, trigger, attempts,
              last_status, last_error
         from webhook_deliveries order by endpoint_id`,
    );
    expect(rows).toStrictEqual([
      {
        endpoint: enabled,
        failed: false,
        trigger: 'recover',
        attempts: 0,
        last_status: null,
        last_error: null,
      },
      // Nothing would send it: it waits, given up, for the endpoint to be enabled.
      {
        endpoint: disabled,
        failed: true,
        trigger: 'delivery',
        attempts: 2,
        last_status: 500,
        last_error: 'HTTP 500',
      },
    ]);
  });
});

describe('POST /webhooks/endpoints/{id}/events/{eventId}/resend', () => {
  it('sends a delivered event and a failed one again, with their webhook-id, signed', async () => {
    let status = 200;
    const t = await app({ retrySchedule: [] });
    const { hook, path } = await subscriber(t, () => ({ status }));
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const [delivered] = await hook.waitFor(1);
    status = 503;
    expect((await postPlant(t.app, { id: 2, name: 'Ivy' })).statusCode).toBe(200);
    await hook.waitFor(2);
    const attempts = await eventually(
      () => log(t, path),
      (rows) => rows.length === 2,
    );
    expect(attempts.map((a) => [a.plantId, a.status])).toStrictEqual([
      [2, 'failed'],
      [1, 'succeeded'],
    ]);
    status = 200;

    // A body means nothing to a resend: whatever its type, it is ignored.
    const first = await t.app.inject({
      method: 'POST',
      url: `${path}/events/${delivered?.headers['webhook-id']}/resend`,
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'text/plain' },
      payload: 'ignored',
    });
    expect(first.statusCode, first.body).toBe(202);
    expect(first.body).toBe('');
    const [, , again] = await hook.waitFor(3);
    expect(again).toMatchObject({ body: '{"id":1,"name":"Aloe"}', verified: true });
    expect(again?.headers['webhook-id']).toBe(delivered?.headers['webhook-id']);

    expect((await resend(t, path, attempts[0]?.eventId as string)).statusCode).toBe(202);
    const [, , , fourth] = await hook.waitFor(4);
    expect(fourth).toMatchObject({ body: '{"id":2,"name":"Ivy"}', verified: true });
    expect(fourth?.headers['webhook-id']).toBe(attempts[0]?.eventId);
    const rows = await eventually(
      () => log(t, path),
      (all) => all.length === 4,
    );
    expect(rows.slice(0, 2).map((a) => [a.trigger, a.plantId, a.status])).toStrictEqual([
      ['resend', 2, 'succeeded'],
      ['resend', 1, 'succeeded'],
    ]);
    // Both resends delivered: what stays is the failed delivery, for a recover.
    expect(
      await t.database.query(
        'select trigger, failed_at is not null as failed from webhook_deliveries',
      ),
    ).toStrictEqual([{ trigger: 'delivery', failed: true }]);
  });

  it('resends an event whose delivery is still pending', async () => {
    const t = await app();
    // The engine stopped: the fan-out's delivery waits, unattempted, as a row.
    const { hook, path, id } = await subscriber(t);
    await t.dispatcher?.stop(0);
    const key = BigInt(`0x${id.slice(3)}`).toString();
    const [row] = await t.database.query<{ event_id: string }>(
      `insert into webhook_deliveries (event_id, endpoint_id, body, next_attempt_at)
       values (gen_random_uuid(), $1, '{"id":7,"name":"Yucca"}', now() + interval '1 hour')
       returning replace(event_id::text, '-', '') as event_id`,
      [key],
    );
    expect((await resend(t, path, `msg_${row?.event_id}`)).statusCode).toBe(202);
    const rows = await t.database.query<{ trigger: string; body: string; due: boolean }>(
      'select trigger, body, next_attempt_at <= now() as due from webhook_deliveries order by id',
    );
    expect(rows).toStrictEqual([
      { trigger: 'delivery', body: '{"id":7,"name":"Yucca"}', due: false },
      { trigger: 'resend', body: '{"id":7,"name":"Yucca"}', due: true },
    ]);
    expect(hook.requests).toHaveLength(0);
  });

  // A second connection holds the PATCH's row lock: only a server has one.
  it.skipIf(testEngine() === 'pglite')(
    'waits for a PATCH that disables the endpoint, then answers 409 and adds no delivery',
    async () => {
      const t = await app();
      const { path, id } = await subscriber(t);
      await t.dispatcher?.stop(0);
      const key = BigInt(`0x${id.slice(3)}`).toString();
      const [row] = await t.database.query<{ event_id: string }>(
        `insert into webhook_deliveries (event_id, endpoint_id, body, failed_at)
         values (gen_random_uuid(), $1, '{"id":8,"name":"Agave"}', now())
         returning replace(event_id::text, '-', '') as event_id`,
        [key],
      );
      const patch = new pg.Client({ connectionString: serverUrlOf(t.database) });
      await patch.connect();
      try {
        await patch.query('begin');
        await patch.query('update webhook_endpoints set disabled = true where id = $1', [key]);
        const answer = resend(t, path, `msg_${row?.event_id}`);
        await settle(300);
        await patch.query('commit');
        expect((await answer).statusCode).toBe(409);
      } finally {
        await patch.end();
      }
      const rows = await t.database.query<{ trigger: string }>(
        'select trigger from webhook_deliveries order by id',
      );
      expect(rows).toStrictEqual([{ trigger: 'delivery' }]);
    },
  );

  it('answers 404 for an unknown event, another endpoint’s, a malformed id, a test’s, and one older than the retention', async () => {
    const t = await app({ logRetentionS: 3600 });
    const a = await subscriber(t);
    const b = await subscriber(t);
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    await a.hook.waitFor(1);
    const [fromB] = await b.hook.waitFor(1);
    const eventId = fromB?.headers['webhook-id'] as string;
    await eventually(
      () => log(t, a.path),
      (rows) => rows.length === 1,
    );
    const tested = (await admin(t, 'POST', `${a.path}/test`)).json() as { eventId: string };

    for (const id of [
      'msg_00000000000000000000000000000000',
      'msg_XYZ',
      `${eventId}0`,
      eventId.toUpperCase(),
      tested.eventId,
    ]) {
      const response = await resend(t, a.path, id);
      expect(response.statusCode, id).toBe(404);
      expect(response.json(), id).toStrictEqual({
        error: 404,
        message: 'this endpoint has no event with this id in its attempt log',
      });
    }
    // b's event is a's too (both receive every plant); a third endpoint made after it has none.
    const c = await subscriber(t);
    expect((await resend(t, c.path, eventId)).statusCode).toBe(404);
    const missing = await resend(t, '/webhooks/endpoints/ep_00000000000000ff', eventId);
    expect(missing.json()).toStrictEqual({
      error: 404,
      message: 'no webhook endpoint has this id',
    });

    expect((await resend(t, a.path, eventId)).statusCode).toBe(202);
    await a.hook.waitFor(2);
    await eventually(
      () => log(t, a.path),
      (rows) => rows.length === 3,
    );
    await t.database.query(
      `update webhook_attempts set attempted_at = attempted_at - interval '3601 seconds'`,
    );
    expect((await resend(t, a.path, eventId)).statusCode).toBe(404);
  });

  it('refuses other methods with Allow, and needs an admin token', async () => {
    const t = await app();
    const path =
      '/webhooks/endpoints/ep_0000000000000001/events/msg_00000000000000000000000000000000/resend';
    const get = await admin(t, 'GET', path);
    expect(get.statusCode).toBe(405);
    expect(get.headers.allow).toBe('POST');
    const anonymous = await t.app.inject({ method: 'POST', url: path });
    expect(anonymous.statusCode).toBe(401);
  });
});

describe('POST /webhooks/endpoints/{id}/test', () => {
  it('sends an example at once, signed, as msg_test_, and answers how it went', async () => {
    const t = await app();
    const { hook, path } = await subscriber(t, () => ({ status: 204 }));
    const response = await admin(t, 'POST', `${path}/test`, {});
    expect(response.statusCode, response.body).toBe(200);
    const outcome = response.json();
    expect(outcome).toStrictEqual({
      eventId: expect.stringMatching(/^msg_test_[0-9a-f]{32}$/),
      status: 'succeeded',
      responseStatus: 204,
      durationMs: expect.any(Number),
    });
    expect(hook.requests).toHaveLength(1);
    expect(hook.requests[0]).toMatchObject({
      body: '{"id":9007199254740991,"name":"Monstera","tag":"aroid"}',
      verified: true,
    });
    expect(hook.requests[0]?.headers['webhook-id']).toBe(outcome.eventId);
    // In the attempt log as soon as it is answered; no delivery stays behind.
    const [logged] = await log(t, path);
    expect(logged).toMatchObject({
      eventId: outcome.eventId,
      trigger: 'test',
      status: 'succeeded',
      responseStatus: 204,
    });
    expect(await t.database.query('select 1 from webhook_deliveries')).toHaveLength(0);
  });

  it('sends the example of the type asked for, in the envelope', async () => {
    const t = await app();
    const { hook, path } = await subscriber(t);
    const before = Date.now();
    const response = await admin(t, 'POST', `${path}/test`, { eventType: 'endpointDisabled' });
    expect(response.statusCode, response.body).toBe(200);
    const body = JSON.parse(hook.requests[0]?.body ?? '{}');
    expect(body).toStrictEqual({
      type: 'endpointDisabled',
      timestamp: expect.any(String),
      data: {
        endpointId: expect.stringMatching(/^ep_/),
        url: expect.any(String),
        reason: expect.any(String),
        disabledAt: body.timestamp,
      },
    });
    expect(Date.parse(body.timestamp)).toBeGreaterThanOrEqual(before - 1000);
    const [logged] = await log(t, path);
    expect(logged?.trigger).toBe('test');
    expect(logged).not.toHaveProperty('plantId');
  });

  it('answers a failure, never retries it, and does not count it toward disabling the endpoint', async () => {
    const t = await app({ retrySchedule: [0.05, 0.05], disableAfterS: 60 });
    const { hook, path, id } = await subscriber(t, (_, n) => ({ status: n === 0 ? 500 : 410 }));
    const key = BigInt(`0x${id.slice(3)}`).toString();
    await t.database.query(
      `update webhook_endpoints set failing_since = now() - interval '61 seconds' where id = $1`,
      [key],
    );
    const failed = await admin(t, 'POST', `${path}/test`);
    expect(failed.statusCode, failed.body).toBe(200);
    expect(failed.json()).toStrictEqual({
      eventId: expect.stringMatching(/^msg_test_/),
      status: 'failed',
      responseStatus: 500,
      durationMs: expect.any(Number),
    });
    const gone = await admin(t, 'POST', `${path}/test`);
    expect(gone.json()).toMatchObject({ status: 'failed', responseStatus: 410 });
    await settle();
    expect(hook.requests).toHaveLength(2);
    expect(await t.database.query('select 1 from webhook_deliveries')).toHaveLength(0);
    const [endpoint] = await t.database.query<{ disabled: boolean }>(
      'select disabled from webhook_endpoints where id = $1',
      [key],
    );
    expect(endpoint).toStrictEqual({ disabled: false });
    const since = new Date(Date.now() - 60_000).toISOString();
    expect((await admin(t, 'POST', `${path}/recover`, { since })).json()).toStrictEqual({
      recovering: 0,
    });
    expect((await log(t, path)).map((a) => [a.trigger, a.responseStatus])).toStrictEqual([
      ['test', 410],
      ['test', 500],
    ]);
  });

  it('leaves the row of a test whose process died to the retention: no claim, recover, redeliver or count takes it', async () => {
    const t = await app();
    const { hook, path, id } = await subscriber(t);
    const key = BigInt(`0x${id.slice(3)}`).toString();
    // As the test statement leaves it, had its process died before the outcome.
    await t.database.query(
      `insert into webhook_deliveries (event_id, endpoint_id, body, trigger, attempts, claims,
                                       failed_at, next_attempt_at)
       values (gen_random_uuid(), $1, '{"id":1,"name":"Test"}', 'test', 1, 1, now(),
               now() - interval '1 hour')`,
      [key],
    );
    const since = new Date(Date.now() - 60_000).toISOString();
    expect((await admin(t, 'POST', `${path}/recover`, { since })).json()).toStrictEqual({
      recovering: 0,
    });
    expect(await redeliverFailed(t.appDatabase.db, {})).toBe(0);
    expect(await createUpkeep(t.appDatabase.db, { logRetentionS: 3600 }).stats()).toMatchObject({
      failed: 0,
      pending: 0,
    });
    await settle(1500);
    expect(hook.requests).toHaveLength(0);
  });

  it('answers no answer as an error without a status', async () => {
    const t = await app({ timeoutMs: 200 });
    const { path } = await subscriber(t, () => ({ status: 200, delayMs: 2000 }));
    const response = await admin(t, 'POST', `${path}/test`);
    expect(response.json()).toStrictEqual({
      eventId: expect.stringMatching(/^msg_test_/),
      status: 'failed',
      error: 'timeout',
      durationMs: expect.any(Number),
    });
  });

  it('answers 409 for a disabled endpoint, 404 for none, 400 for an unknown type', async () => {
    const t = await app();
    const { hook, path } = await subscriber(t, undefined, { disabled: true });
    const disabled = await admin(t, 'POST', `${path}/test`);
    expect(disabled.statusCode).toBe(409);
    expect(disabled.json()).toStrictEqual({
      error: 409,
      message: 'the endpoint is disabled: enable it (PATCH disabled false) before sending to it',
    });
    expect(
      (await admin(t, 'POST', '/webhooks/endpoints/ep_00000000000000ff/test')).json(),
    ).toStrictEqual({
      error: 404,
      message: 'no webhook endpoint has this id',
    });
    const unknown = await admin(t, 'POST', `${path}/test`, { eventType: 'plantWatered' });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().message).toBe(
      'body/eventType names an unknown event type "plantWatered": one of newPlant, plantDeleted, endpointDisabled, deliveryExhausted',
    );
    const number = await admin(t, 'POST', `${path}/test`, { eventType: 5 });
    expect(number.statusCode).toBe(400);
    expect(number.json().message).toBe(
      'body/eventType names an event type that is not a string (a number): one of newPlant, plantDeleted, endpointDisabled, deliveryExhausted',
    );
    const get = await admin(t, 'GET', `${path}/test`);
    expect(get.statusCode).toBe(405);
    expect(get.headers.allow).toBe('POST');
    expect(hook.requests).toHaveLength(0);
    expect(await t.database.query('select 1 from webhook_deliveries')).toHaveLength(0);
  });
});
