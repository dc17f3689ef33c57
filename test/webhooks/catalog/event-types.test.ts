// The event types: the catalog, each type's body as a receiver gets it (signed, in its
// envelope), the fan-out by `events`, the operational events the engine and the API record,
// WEBHOOK_EVENTS for the configured endpoints, and the refusal of unknown or empty lists.
import { Ajv2020 } from 'ajv/dist/2020.js';
import { Client } from 'pg';
import { describe, expect, it } from 'vitest';
import { plantJson } from '../../../src/plants/serialize.js';
import { EVENT_TYPE_NAMES, EVENT_TYPES } from '../../../src/webhooks/catalog/event-types.js';
import { createOutcomeStatements } from '../../../src/webhooks/delivery/outcomes.js';
import { generateSecret } from '../../../src/webhooks/security/secrets.js';
import type { WebhookSettings } from '../../../src/webhooks/settings.js';
import { postPlant, type TestApp, TOKEN } from '../../helpers/app.js';
import { testEngine } from '../../helpers/database.js';
import { type ReceivedRequest, WEBHOOK_SECRET } from '../../helpers/receiver.js';
import { webhookApps } from '../../helpers/webhook-apps.js';

const ADMIN = 'admin-token-event-types-51c0';
const admin = { authorization: `Bearer ${ADMIN}` };

/**
 * Apps with short retries, allowed to reach the receivers on loopback. Their poll is too slow to
 * matter: what they send, they send because a change woke them.
 */
const apps = webhookApps(ADMIN, { retrySchedule: [0.05, 0.05] }, { pollIntervalMs: 60_000 });
const { receiver, track } = apps;
const app = (overrides: Partial<WebhookSettings> = {}, replicaOf?: TestApp) =>
  apps.app(overrides, replicaOf && { replicaOf });

const json = (payload: unknown) => ({
  headers: { ...admin, 'content-type': 'application/json' },
  payload: JSON.stringify(payload),
});

/** An endpoint made through the API, signed with `secret`: its public id. */
async function endpoint(t: TestApp, body: Record<string, unknown>): Promise<string> {
  const response = await t.app.inject({
    method: 'POST',
    url: '/webhooks/endpoints',
    ...json(body),
  });
  expect(response.statusCode, response.body).toBe(201);
  return response.json().id;
}

const patch = (t: TestApp, id: string, body: unknown) =>
  t.app.inject({ method: 'PATCH', url: `/webhooks/endpoints/${id}`, ...json(body) });

const deletePlant = async (t: TestApp, id: number | string) => {
  const response = await t.app.inject({
    method: 'DELETE',
    url: `/plants/${id}`,
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(response.statusCode).toBe(204);
};

async function eventually<T>(read: () => Promise<T>, until: (value: T) => boolean, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (until(value)) return value;
    if (Date.now() > deadline) throw new Error(`not reached in ${ms} ms: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/**
 * Resolves once nothing is left to fan out, and only `waiting` deliveries (those whose
 * receivers asked for time) are left to attempt (failed deliveries aside).
 */
const settled = (t: TestApp, waiting = 0) =>
  eventually(
    () =>
      t.database.query<{ count: number }>(
        `select (select count(*) from webhook_events)
                + (select count(*) from webhook_deliveries where failed_at is null) as count`,
      ),
    ([row]) => Number(row?.count) === waiting,
  );

const RFC3339_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/**
 * The body of an enveloped event: exactly `{"type","timestamp","data"}` in that order, compact;
 * `raw` is the data's JSON text as sent (an int64 id with all its digits).
 */
function envelopeOf(request: ReceivedRequest, type: string) {
  const [, sentType, timestamp = '', raw = ''] =
    /^\{"type":"([^"]*)","timestamp":"([^"]*)","data":(\{.*\})\}$/s.exec(request.body) ?? [];
  expect(sentType, request.body).toBe(type);
  expect(timestamp).toMatch(RFC3339_MS);
  const body = JSON.parse(request.body);
  expect(Object.keys(body)).toStrictEqual(['type', 'timestamp', 'data']);
  return { ...body, raw } as {
    type: string;
    timestamp: string;
    data: Record<string, unknown>;
    raw: string;
  };
}

/** `data` as sent is compact JSON, as JSON.stringify writes it (for ids exact as numbers). */
const expectCompact = ({ raw, data }: { raw: string; data: unknown }) =>
  expect(raw).toBe(JSON.stringify(data));

/** Checks `body` against the catalog's schema of `type`, as a receiver's validator would. */
function matchesCatalog(type: (typeof EVENT_TYPE_NAMES)[number], body: unknown) {
  // Formats are not checked here: the envelope's are, by envelopeOf.
  const ajv = new Ajv2020({
    strict: false,
    formats: { 'date-time': true, uri: true, int32: true, int64: true },
  });
  const valid = ajv.compile(EVENT_TYPES.get(type)?.schema ?? {});
  expect(valid(body), JSON.stringify(valid.errors)).toBe(true);
}

describe('GET /webhooks/event-types', () => {
  it('lists the catalog, each with its name, description and schema, to an admin token', async () => {
    const t = await app();
    const response = await t.app.inject({
      method: 'GET',
      url: '/webhooks/event-types',
      headers: admin,
    });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
    const types = response.json() as { name: string; description: string; schema: object }[];
    expect(types.map((type) => type.name)).toStrictEqual([
      'newPlant',
      'plantDeleted',
      'endpointDisabled',
      'deliveryExhausted',
    ]);
    for (const type of types) {
      expect(Object.keys(type)).toStrictEqual(['name', 'description', 'schema']);
      expect(type.description).not.toBe('');
      expect(JSON.stringify(type.schema)).not.toContain('$ref');
    }
    expect(types[1]?.schema).toMatchObject({
      type: 'object',
      required: ['type', 'timestamp', 'data'],
      properties: { type: { const: 'plantDeleted' } },
    });
    expect(types[3]?.schema).toMatchObject({
      properties: {
        data: {
          required: ['endpointId', 'eventId', 'eventType', 'attempts', 'lastError'],
        },
      },
    });
    // Every example of the catalog is a body its own schema accepts.
    for (const name of EVENT_TYPE_NAMES) matchesCatalog(name, EVENT_TYPES.get(name)?.example);
  });

  it('answers 403 insufficient_scope to a plant token, 401 without one', async () => {
    const t = await app();
    const plant = await t.app.inject({
      method: 'GET',
      url: '/webhooks/event-types',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(plant.statusCode).toBe(403);
    expect(plant.headers['www-authenticate']).toBe(
      'Bearer realm="plant-store", error="insufficient_scope"',
    );
    const none = await t.app.inject({ method: 'GET', url: '/webhooks/event-types' });
    expect(none.statusCode).toBe(401);
  });
});

describe('each type as a receiver gets it', () => {
  it('sends newPlant as the plant and plantDeleted in its envelope, both signed, each its own webhook-id', async () => {
    const secret = generateSecret();
    const hook = await receiver(secret);
    const t = await app();
    await endpoint(t, { url: hook.url, secret, events: ['newPlant', 'plantDeleted'] });
    // Characters that JSON escapes, a quote, a non-ASCII one; no tag.
    const name = 'Aloe "vera"\n\t\u0001\u007f é 🌵 \\';
    const created = await postPlant(
      t.app,
      `{"id":9223372036854775807,"name":${JSON.stringify(name)}}`,
    );
    expect(created.statusCode).toBe(200);
    await deletePlant(t, '9223372036854775807');
    // Both are fanned out together: in either order.
    const requests = await hook.waitFor(2);
    expect(hook.requests).toHaveLength(2);
    const added = requests.find((r) => r.body.startsWith('{"id":'));
    const deleted = requests.find((r) => r.body.startsWith('{"type":'));
    const stored = plantJson('9223372036854775807', name, undefined);
    expect(added?.body).toBe(stored);
    const body = envelopeOf(deleted as ReceivedRequest, 'plantDeleted');
    expect(deleted?.body).toBe(
      `{"type":"plantDeleted","timestamp":"${body.timestamp}","data":${stored}}`,
    );
    matchesCatalog('plantDeleted', JSON.parse(deleted?.body ?? ''));
    for (const request of [added, deleted]) {
      expect(request?.verified).toBe(true);
      expect(request?.headers['content-type']).toBe('application/json');
    }
    expect(added?.headers['webhook-id']).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(deleted?.headers['webhook-id']).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(deleted?.headers['webhook-id']).not.toBe(added?.headers['webhook-id']);
    // The timestamp is the delete's, give or take the clocks of this test and the database.
    expect(Math.abs(Date.parse(body.timestamp) - (deleted?.at ?? 0))).toBeLessThan(5000);
  });

  it('writes a tag, an empty one too, into plantDeleted as GET /plants/{id} shows it', async () => {
    const secret = generateSecret();
    const hook = await receiver(secret);
    const t = await app();
    await endpoint(t, { url: hook.url, secret, events: ['plantDeleted'] });
    for (const [id, tag] of [
      [1, 'aroid'],
      [2, ''],
    ] as const) {
      expect((await postPlant(t.app, { id, name: 'Monstera', tag })).statusCode).toBe(200);
      const shown = await t.app.inject({
        method: 'GET',
        url: `/plants/${id}`,
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      await deletePlant(t, id);
      const requests = await hook.waitFor(id);
      const body = envelopeOf(requests[id - 1] as ReceivedRequest, 'plantDeleted');
      expect(body.raw).toBe(JSON.stringify({ id, name: 'Monstera', tag }));
      expect(body.raw).toBe(shown.body);
    }
  });
});

describe('the fan-out by event type', () => {
  it('sends each endpoint only the types it lists, and writes the type on each delivery', async () => {
    const [secretA, secretB, secretC] = [generateSecret(), generateSecret(), generateSecret()];
    const deletes = await receiver(secretA);
    const creates = await receiver(secretB);
    // Answers 503 asking for a minute: its delivery stays, to be read.
    const slow = await receiver(secretC, () => ({ status: 503, headers: { 'retry-after': '60' } }));
    const t = await app();
    const a = await endpoint(t, { url: deletes.url, secret: secretA, events: ['plantDeleted'] });
    const b = await endpoint(t, { url: creates.url, secret: secretB });
    await endpoint(t, { url: slow.url, secret: secretC, events: ['plantDeleted'] });
    expect((await postPlant(t.app, { id: 7, name: 'Fern' })).statusCode).toBe(200);
    await deletePlant(t, 7);
    await deletes.waitFor(1);
    await creates.waitFor(1);
    await slow.waitFor(1);
    await settled(t, 1);
    expect(deletes.requests.map((r) => JSON.parse(r.body).type)).toStrictEqual(['plantDeleted']);
    expect(creates.requests.map((r) => r.body)).toStrictEqual(['{"id":7,"name":"Fern"}']);
    // The attempt log is written a little after the answers.
    const logged = await eventually(
      () =>
        t.database.query<{ endpoint: string; count: number }>(
          `select 'ep_' || lpad(to_hex(endpoint_id), 16, '0') as endpoint, count(*)::int4 as count
             from webhook_attempts group by endpoint_id order by endpoint_id`,
        ),
      (rows) => rows.length === 3,
    );
    expect(logged.filter((row) => row.endpoint === a || row.endpoint === b)).toStrictEqual([
      { endpoint: a, count: 1 },
      { endpoint: b, count: 1 },
    ]);
    const waiting = await t.database.query<{ event_type: string; body: string }>(
      'select event_type, body from webhook_deliveries',
    );
    expect(waiting).toHaveLength(1);
    expect(waiting[0]?.event_type).toBe('plantDeleted');
    expect(waiting[0]?.body).toBe(slow.requests[0]?.body);
  });

  it('writes no event row for a delete no endpoint receives, and one once an endpoint lists plantDeleted', async () => {
    const t = await app();
    // Every event row ever written, whatever the fan-out does with it after.
    await t.database.query('create table written_events (type text not null)');
    await t.database.query(`
      create function note_event() returns trigger language plpgsql as $$
      begin
        insert into written_events values (new.type);
        return null;
      end $$`);
    await t.database.query(
      'create trigger webhook_events_noted after insert on webhook_events for each row execute function note_event()',
    );
    const hook = await receiver(generateSecret());
    await endpoint(t, { url: hook.url, events: ['newPlant'] });
    expect((await postPlant(t.app, { id: 1, name: 'Fern' })).statusCode).toBe(200);
    await deletePlant(t, 1);
    const noted = () => t.database.query<{ type: string }>('select type from written_events');
    expect(await noted()).toStrictEqual([{ type: 'newPlant' }]);
    await endpoint(t, { url: hook.url, events: ['plantDeleted'] });
    expect((await postPlant(t.app, { id: 2, name: 'Ivy' })).statusCode).toBe(200);
    await deletePlant(t, 2);
    expect(await noted()).toStrictEqual([
      { type: 'newPlant' },
      { type: 'newPlant' },
      { type: 'plantDeleted' },
    ]);
  });
});

describe('the operational events', () => {
  it('sends endpointDisabled when a 410 disables an endpoint, and no deliveryExhausted for it', async () => {
    const [goneSecret, watchSecret] = [generateSecret(), generateSecret()];
    const gone = await receiver(goneSecret, () => ({ status: 410 }));
    const watcher = await receiver(watchSecret);
    const t = await app();
    const goneId = await endpoint(t, { url: gone.url, secret: goneSecret });
    const watcherId = await endpoint(t, {
      url: watcher.url,
      secret: watchSecret,
      events: ['endpointDisabled', 'deliveryExhausted'],
    });
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const [request] = await watcher.waitFor(1);
    expect(request?.verified).toBe(true);
    const body = envelopeOf(request as ReceivedRequest, 'endpointDisabled');
    expect(body.data).toStrictEqual({
      endpointId: goneId,
      url: gone.url,
      reason: 'the receiver answered 410 Gone',
      disabledAt: body.timestamp,
    });
    expectCompact(body);
    matchesCatalog('endpointDisabled', body);
    const shown = await t.app.inject({
      method: 'GET',
      url: `/webhooks/endpoints/${goneId}`,
      headers: admin,
    });
    expect(shown.json()).toMatchObject({ disabled: true, updatedAt: body.timestamp });
    await settled(t);
    expect(watcher.requests).toHaveLength(1);
    expect(gone.requests).toHaveLength(1);
    expect(watcherId).not.toBe(goneId);
  });

  it('sends endpointDisabled when failing for WEBHOOK_DISABLE_AFTER_S disables an endpoint', async () => {
    const watchSecret = generateSecret();
    const failing = await receiver(generateSecret(), () => ({ status: 500 }));
    const watcher = await receiver(watchSecret);
    const t = await app({ disableAfterS: 60 });
    const failingId = await endpoint(t, { url: failing.url });
    await endpoint(t, { url: watcher.url, secret: watchSecret, events: ['endpointDisabled'] });
    await t.database.query(
      `update webhook_endpoints set failing_since = now() - interval '61 seconds' where id = $1`,
      [String(BigInt(`0x${failingId.slice(3)}`))],
    );
    expect((await postPlant(t.app, { id: 1, name: 'Aloe' })).statusCode).toBe(200);
    const [request] = await watcher.waitFor(1);
    const body = envelopeOf(request as ReceivedRequest, 'endpointDisabled');
    expect(body.data).toStrictEqual({
      endpointId: failingId,
      url: failing.url,
      reason: 'every attempt failed for 60 seconds (WEBHOOK_DISABLE_AFTER_S)',
      disabledAt: body.timestamp,
    });
  });

  it('sends endpointDisabled when a PATCH disables an enabled endpoint, once', async () => {
    const watchSecret = generateSecret();
    const watcher = await receiver(watchSecret);
    const t = await app();
    await endpoint(t, { url: watcher.url, secret: watchSecret, events: ['endpointDisabled'] });
    const other = await endpoint(t, { url: 'https://receiver.example.com/plants' });
    const disabled = await patch(t, other, { disabled: true });
    expect(disabled.statusCode).toBe(200);
    // Disabled already: no second event; a change of something else: none either.
    expect((await patch(t, other, { disabled: true })).statusCode).toBe(200);
    expect((await patch(t, other, { description: 'still off' })).statusCode).toBe(200);
    const [request] = await watcher.waitFor(1);
    const body = envelopeOf(request as ReceivedRequest, 'endpointDisabled');
    expect(body.data).toStrictEqual({
      endpointId: other,
      url: 'https://receiver.example.com/plants',
      reason: 'disabled through the API',
      disabledAt: disabled.json().updatedAt,
    });
    expectCompact(body);
    await settled(t);
    expect(watcher.requests).toHaveLength(1);
  });

  it('sends deliveryExhausted after the last retry failed, and none about its own delivery', async () => {
    const [failingSecret, watchSecret] = [generateSecret(), generateSecret()];
    const failing = await receiver(failingSecret, () => ({ status: 500 }));
    // The watcher fails too: its deliveryExhausted is given up without another event.
    const watcher = await receiver(watchSecret, () => ({ status: 502 }));
    const t = await app();
    const failingId = await endpoint(t, { url: failing.url, secret: failingSecret });
    const watcherId = await endpoint(t, {
      url: watcher.url,
      secret: watchSecret,
      events: ['deliveryExhausted'],
    });
    expect((await postPlant(t.app, { id: 3, name: 'Cactus' })).statusCode).toBe(200);
    await failing.waitFor(3);
    const requests = await watcher.waitFor(3);
    await settled(t);
    expect(failing.requests).toHaveLength(3);
    expect(watcher.requests).toHaveLength(3);
    const body = envelopeOf(requests[0] as ReceivedRequest, 'deliveryExhausted');
    expect(body.data).toStrictEqual({
      endpointId: failingId,
      eventId: failing.requests[0]?.headers['webhook-id'],
      eventType: 'newPlant',
      attempts: 3,
      lastError: 'the receiver answered 500',
    });
    expectCompact(body);
    matchesCatalog('deliveryExhausted', body);
    // The same event on every attempt, and signed.
    expect(new Set(requests.map((r) => r.body)).size).toBe(1);
    expect(requests.every((r) => r.verified)).toBe(true);
    const failed = await t.database.query<{ endpoint: string; event_type: string }>(
      `select 'ep_' || lpad(to_hex(endpoint_id), 16, '0') as endpoint, event_type
         from webhook_deliveries where failed_at is not null order by id`,
    );
    expect(failed).toStrictEqual([
      { endpoint: failingId, event_type: 'newPlant' },
      { endpoint: watcherId, event_type: 'deliveryExhausted' },
    ]);
  });

  it('names the error when the receiver did not answer', async () => {
    const watchSecret = generateSecret();
    const watcher = await receiver(watchSecret);
    const t = await app({ retrySchedule: [0.05] });
    // Nothing listens on port 9 of loopback: the connection is refused.
    const refusedId = await endpoint(t, { url: 'http://127.0.0.1:9/hook' });
    await endpoint(t, { url: watcher.url, secret: watchSecret, events: ['deliveryExhausted'] });
    expect((await postPlant(t.app, { id: 4, name: 'Moss' })).statusCode).toBe(200);
    const [request] = await watcher.waitFor(1);
    const body = envelopeOf(request as ReceivedRequest, 'deliveryExhausted');
    expect(body.data).toMatchObject({ endpointId: refusedId, attempts: 2 });
    const [attempt] = await t.database.query<{ error: string }>(
      `select error from webhook_attempts where endpoint_id = $1 order by id desc limit 1`,
      [String(BigInt(`0x${refusedId.slice(3)}`))],
    );
    expect(body.data.lastError).toBe(attempt?.error);
    expect(body.data.lastError).not.toMatch(/answered/);
  });
});

describe('WEBHOOK_EVENTS', () => {
  it('sets the events of the WEBHOOK_URLS endpoints, at each start', async () => {
    const hook = await receiver(WEBHOOK_SECRET);
    const t = await app({ urls: [hook.url], secret: WEBHOOK_SECRET, events: ['plantDeleted'] });
    const listed = async (on: TestApp) =>
      (await on.app.inject({ method: 'GET', url: '/webhooks/endpoints', headers: admin })).json();
    expect(await listed(t)).toMatchObject([
      { url: hook.url, configured: true, events: ['plantDeleted'] },
    ]);
    expect((await postPlant(t.app, { id: 5, name: 'Sage' })).statusCode).toBe(200);
    await deletePlant(t, 5);
    const [request] = await hook.waitFor(1);
    expect(request?.verified).toBe(true);
    expect(envelopeOf(request as ReceivedRequest, 'plantDeleted').data).toStrictEqual({
      id: 5,
      name: 'Sage',
    });
    await settled(t);
    expect(hook.requests).toHaveLength(1);
    // Another replica, declaring the same URL with other types, updates the row.
    const replica = await app(
      { urls: [hook.url], secret: WEBHOOK_SECRET, events: ['newPlant', 'plantDeleted'] },
      t,
    );
    expect(await listed(replica)).toMatchObject([
      { url: hook.url, configured: true, events: ['newPlant', 'plantDeleted'] },
    ]);
    expect((await postPlant(t.app, { id: 6, name: 'Thyme' })).statusCode).toBe(200);
    const requests = await hook.waitFor(2);
    expect(requests[1]?.body).toBe('{"id":6,"name":"Thyme"}');
  });
});

describe('events in POST and PATCH', () => {
  it.each([
    [
      'an unknown name',
      ['newPlant', 'plantRenamed'],
      'body/events names an unknown event type "plantRenamed": one of newPlant, plantDeleted, endpointDisabled, deliveryExhausted',
    ],
    [
      'a number',
      ['newPlant', 5],
      'body/events names an event type that is not a string (a number): one of newPlant, plantDeleted, endpointDisabled, deliveryExhausted',
    ],
    ['an empty list', [], 'body/events must name at least one event type'],
  ])('answers 400 naming the problem for %s', async (_, events, message) => {
    const t = await app();
    const created = await t.app.inject({
      method: 'POST',
      url: '/webhooks/endpoints',
      ...json({ url: 'https://receiver.example.com/plants', events }),
    });
    expect(created.statusCode).toBe(400);
    expect(created.json()).toStrictEqual({ error: 400, message });
    const id = await endpoint(t, { url: 'https://receiver.example.com/plants' });
    const patched = await patch(t, id, { events });
    expect(patched.statusCode).toBe(400);
    expect(patched.json()).toStrictEqual({ error: 400, message });
    const shown = await t.app.inject({
      method: 'GET',
      url: `/webhooks/endpoints/${id}`,
      headers: admin,
    });
    expect(shown.json().events).toStrictEqual(['newPlant']);
  });
});

describe.runIf(testEngine() === 'postgres')('the lock order of a delivery given up', () => {
  it('takes the subscription lock before the delivery rows, as a PATCH that disables does', async () => {
    const t = await app();
    const watcher = await endpoint(t, {
      url: 'https://receiver.example.com/plants',
      events: ['deliveryExhausted'],
    });
    const key = String(BigInt(`0x${watcher.slice(3)}`));
    // A delivery at its last attempt, claimed (claim 5) and not due, so no dispatcher takes it.
    const [row] = await t.database.query<{ id: string }>(
      `insert into webhook_deliveries (event_id, endpoint_id, body, attempts, claims, next_attempt_at)
       values (gen_random_uuid(), $1, '{"id":1,"name":"Fern"}', 3, 5, now() + interval '1 hour')
       returning id::text`,
      [key],
    );
    const id = row?.id ?? '';
    const connection = async () => {
      const client = new Client({ connectionString: t.database.url });
      await client.connect();
      track({ close: () => client.end() });
      return client;
    };
    // A change that holds the lock exclusively, as a PATCH of `events` does.
    const change = await connection();
    await change.query('begin');
    await change.query('select pg_advisory_xact_lock(7308604714553418611)');
    const statements = createOutcomeStatements(t.appDatabase.db, { disableAfterS: 3600 });
    const recording = statements.record([
      { kind: 'failed', id, claim: '5', status: 500, error: 'HTTP 500' },
    ]);
    await eventually(
      () =>
        t.database.query<{ waiting: number }>(
          `select count(*)::int4 as waiting from pg_locks
            where locktype = 'advisory' and mode = 'ShareLock' and not granted`,
        ),
      ([waiting]) => waiting?.waiting === 1,
    );
    // Waiting for the lock, it holds no delivery row: the change could give them up and commit.
    const other = await connection();
    await other.query('begin');
    const locked = await other.query(
      'select id from webhook_deliveries where id = $1 for update nowait',
      [id],
    );
    expect(locked.rowCount).toBe(1);
    await other.query('rollback');
    await change.query('commit');
    await recording;
    const [given] = await t.database.query<{ failed: boolean; events: number }>(
      `select failed_at is not null as failed,
              (select count(*)::int4 from webhook_events where type = 'deliveryExhausted')
              + (select count(*)::int4 from webhook_deliveries where event_type = 'deliveryExhausted')
                as events
         from webhook_deliveries where id = $1`,
      [id],
    );
    expect(given).toStrictEqual({ failed: true, events: 1 });
  });
});
