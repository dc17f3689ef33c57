// The rate limit of an endpoint (`rateLimit`), as the claim paces it and the lanes keep to it:
// every event delivered, none failed, no more attempts started in any second than the limit
// allows, an endpoint without a limit not slowed beside it, a change applied from its answer.
// Across several processes: see test/faults/rate-limit.test.ts.
import { Client } from 'pg';
import { describe, expect, it } from 'vitest';
import { createOutbox } from '../../../src/webhooks/delivery/outbox.js';
import { ENGINE_TIMING, leaseMsFor } from '../../../src/webhooks/delivery/timing.js';
import { generateSecret } from '../../../src/webhooks/security/secrets.js';
import { endpointIdOf, endpointKeyOf } from '../../../src/webhooks/tables/ids.js';
import { postPlant, type TestApp } from '../../helpers/app.js';
import { testEngine } from '../../helpers/database.js';
import { eventually } from '../../helpers/eventually.js';
import { maxInAnySecond } from '../../helpers/rates.js';
import type { ReceivedRequest } from '../../helpers/receiver.js';
import { ATTEMPT_TIMEOUT_MS, webhookApps } from '../../helpers/webhook-apps.js';

const ADMIN_TOKEN = 'admin-token-paced-7c41';

const { app, receiver, track } = webhookApps(ADMIN_TOKEN, {
  retrySchedule: [0.1, 0.2],
  concurrency: 8,
});

/** Paced deliveries take their time: eventually, with a longer wait than its default. */
const eventuallyPaced = <T>(read: () => Promise<T>, until: (value: T) => boolean) =>
  eventually(read, until, 15_000);

const admin = (t: TestApp, method: 'POST' | 'PATCH', url: string, body: unknown) =>
  t.app.inject({
    method,
    url,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    payload: JSON.stringify(body),
  });

/** An endpoint made through the management API; returns its row key. */
async function endpoint(t: TestApp, url: string, secret: string, rateLimit: number | null) {
  const response = await admin(t, 'POST', '/webhooks/endpoints', { url, secret, rateLimit });
  expect(response.statusCode, response.body).toBe(201);
  expect(response.json<{ rateLimit: number | null }>().rateLimit).toBe(rateLimit);
  return String(endpointKeyOf(response.json<{ id: string }>().id));
}

async function createPlants(t: TestApp, from: number, count: number) {
  for (let id = from; id < from + count; id++) {
    expect((await postPlant(t.app, { id, name: `Paced ${id}` })).statusCode).toBe(200);
  }
}

/** The attempts to an endpoint, as its attempt log has them, in the order they started. */
const attemptsTo = (t: TestApp, key: string) =>
  t.database.query<{ at: number; succeeded: boolean }>(
    `select (extract(epoch from attempted_at) * 1000)::float8 as at, succeeded
       from webhook_attempts where endpoint_id = $1 order by attempted_at`,
    [key],
  );

/** Every webhook-id received, once each however often it came. */
const eventsOf = (requests: ReceivedRequest[]) =>
  new Set(requests.map((request) => request.headers['webhook-id']));

describe('the rate limit of an endpoint', () => {
  it('is an integer from 1 to 10000, or null', async () => {
    const t = await app();
    await t.dispatcher?.stop(0);
    for (const rateLimit of [1, 10_000, null]) {
      await endpoint(t, 'http://127.0.0.1:9/hook', generateSecret(), rateLimit);
    }
    for (const rateLimit of [0, 10_001, 1.5, '5', -1]) {
      const response = await admin(t, 'POST', '/webhooks/endpoints', {
        url: 'http://127.0.0.1:9/hook',
        rateLimit,
      });
      expect(response.statusCode, String(rateLimit)).toBe(400);
      expect(response.json<{ message: string }>().message).toBe(
        'body/rateLimit must be an integer from 1 to 10000, or null for no limit',
      );
    }
    const [row] = await t.database.query<{ rate_limit: number }>(
      'select rate_limit from webhook_endpoints order by id limit 1',
    );
    expect(row?.rate_limit).toBe(1);
  });

  it('delivers every event to a limited endpoint no faster than its limit, and does not slow one without a limit', async () => {
    const RATE = 20;
    const EVENTS = 60;
    const [limitedSecret, freeSecret] = [generateSecret(), generateSecret()];
    const [limited, free] = [await receiver(limitedSecret), await receiver(freeSecret)];
    const t = await app();
    const limitedKey = await endpoint(t, limited.url, limitedSecret, RATE);
    const freeKey = await endpoint(t, free.url, freeSecret, null);
    await createPlants(t, 1, EVENTS);
    await free.waitFor(EVENTS, 5000);
    const limitedThen = limited.requests.length;
    await limited.waitFor(EVENTS, 15_000);
    const log = await eventuallyPaced(
      () => attemptsTo(t, limitedKey),
      (rows) => rows.length >= EVENTS,
    );
    expect(eventsOf(limited.requests).size).toBe(EVENTS);
    expect(limited.requests.every((request) => request.verified)).toBe(true);
    // Nothing failed: one attempt per event, each a success.
    expect(log).toHaveLength(EVENTS);
    expect(log.filter((row) => !row.succeeded)).toStrictEqual([]);
    const [{ count } = { count: -1 }] = await t.database.query<{ count: number }>(
      'select count(*)::int4 as count from webhook_deliveries where endpoint_id = $1',
      [limitedKey],
    );
    expect(count).toBe(0);
    const starts = log.map((row) => row.at);
    const most = maxInAnySecond(starts);
    const spanS = ((starts.at(-1) as number) - (starts[0] as number)) / 1000;
    console.log(
      `[rate limit] one process, rateLimit ${RATE}: ${EVENTS} attempts in ${spanS.toFixed(2)} s, mean ${((EVENTS - 1) / spanS).toFixed(1)}/s, at most ${most} in any 1 s`,
    );
    expect(most).toBeLessThanOrEqual(RATE + 1);
    // One process alone about reaches the limit: the slots follow one another (less the slots
    // a busy machine makes it miss).
    expect((EVENTS - 1) / spanS).toBeGreaterThan(RATE * 0.7);
    // The endpoint without a limit had everything while the limited one had a fraction of it:
    // its last attempt started before the limited one's slots reached half of the events.
    const freeLog = await eventually(
      () => attemptsTo(t, freeKey),
      (rows) => rows.length >= EVENTS,
    );
    expect(freeLog.at(-1)?.at).toBeLessThan(starts[EVENTS / 2] as number);
    expect(limitedThen).toBeLessThan(EVENTS);
    expect(eventsOf(free.requests).size).toBe(EVENTS);
  });

  it('applies a change of rateLimit from its answer', async () => {
    const secret = generateSecret();
    const hook = await receiver(secret);
    const t = await app();
    const key = await endpoint(t, hook.url, secret, 1);
    const path = `/webhooks/endpoints/${endpointIdOf(key)}`;
    await createPlants(t, 1, 10);
    await hook.waitFor(1, 5000);
    await new Promise((resolve) => setTimeout(resolve, 1200));
    // One a second: the first, the one a second later, maybe a third at the edge.
    expect(hook.requests.length).toBeLessThanOrEqual(3);
    const lifted = await admin(t, 'PATCH', path, { rateLimit: null });
    expect(lifted.statusCode, lifted.body).toBe(200);
    expect(lifted.json<{ rateLimit: number | null }>().rateLimit).toBeNull();
    const [{ changedAt } = { changedAt: Number.NaN }] = await t.database.query<{
      changedAt: number;
    }>(
      `select (extract(epoch from updated_at) * 1000)::float8 as "changedAt"
         from webhook_endpoints where id = $1`,
      [key],
    );
    await hook.waitFor(10, 5000);
    // By the database's clock: the deliveries the limit held back started within a second of
    // the change, none waiting for a slot of the old limit.
    const afterLift = await eventuallyPaced(
      () => attemptsTo(t, key),
      (rows) => rows.length >= 10,
    );
    expect(Math.max(...afterLift.slice(0, 10).map((row) => row.at)) - changedAt).toBeLessThan(1000);

    const limited = await admin(t, 'PATCH', path, { rateLimit: 3 });
    expect(limited.json<{ rateLimit: number | null }>().rateLimit).toBe(3);
    const before = hook.requests.length;
    await createPlants(t, 11, 9);
    await hook.waitFor(before + 9, 10_000);
    const starts = (
      await eventuallyPaced(
        () => attemptsTo(t, key),
        (rows) => rows.length >= 19,
      )
    ).slice(10);
    expect(starts).toHaveLength(9);
    expect(maxInAnySecond(starts.map((row) => row.at))).toBeLessThanOrEqual(4);
  });

  it("honours a receiver's Retry-After on a limited endpoint, and fails nothing", async () => {
    const secret = generateSecret();
    const hook = await receiver(secret, (_request, n) =>
      n === 0 ? { status: 429, headers: { 'retry-after': '1' } } : { status: 200 },
    );
    const t = await app();
    const key = await endpoint(t, hook.url, secret, 10);
    await createPlants(t, 1, 5);
    await hook.waitFor(6, 10_000);
    const [first] = hook.requests;
    const again = hook.requests.filter(
      (request) => request.headers['webhook-id'] === first?.headers['webhook-id'],
    );
    expect(again).toHaveLength(2);
    expect((again[1]?.at ?? 0) - (first?.at ?? 0)).toBeGreaterThanOrEqual(950);
    expect(eventsOf(hook.requests).size).toBe(5);
    const log = await eventuallyPaced(
      () => attemptsTo(t, key),
      (rows) => rows.length >= 6,
    );
    expect(log.filter((row) => !row.succeeded)).toHaveLength(1);
    const [{ count } = { count: -1 }] = await t.database.query<{ count: number }>(
      'select count(*)::int4 as count from webhook_deliveries where endpoint_id = $1',
      [key],
    );
    expect(count).toBe(0);
  });
});

// A second connection holds rows locked: a server's, which the embedded engine has not.
describe.runIf(testEngine() === 'postgres')('the paced claim', () => {
  async function connection(t: TestApp) {
    const client = new Client({ connectionString: t.database.url });
    await client.connect();
    track({ close: () => client.end() });
    return client;
  }

  const due = (t: TestApp, key: string, count: number) =>
    t.database.query(
      `insert into webhook_deliveries (event_id, endpoint_id, body)
       select gen_random_uuid(), $1, '{"id":1}' from generate_series(1, $2::int4)`,
      [key, count],
    );

  it('leaves the deliveries of a limited endpoint due at the fan-out, for a claim to pace', async () => {
    const t = await app();
    await t.dispatcher?.stop(0);
    const limited = await endpoint(t, 'http://127.0.0.1:9/limited', generateSecret(), 5);
    const free = await endpoint(t, 'http://127.0.0.1:9/free', generateSecret(), null);
    await t.database.query(
      `select record_events('newPlant', array['{"id":1,"name":"a"}', '{"id":2,"name":"b"}'], null)`,
    );
    const outbox = createOutbox(t.appDatabase.db, {
      leaseMs: leaseMsFor(ATTEMPT_TIMEOUT_MS, ENGINE_TIMING),
    });
    const { deliveries, paced } = await outbox.fanOut(10, 0n);
    expect(deliveries.map((delivery) => delivery.endpoint.key)).toStrictEqual([free, free]);
    expect(paced).toStrictEqual([limited]);
    const rows = await t.database.query<{ attempts: number; claims: string; due: boolean }>(
      `select attempts, claims::text, next_attempt_at <= now() as due from webhook_deliveries
        where endpoint_id = $1`,
      [limited],
    );
    expect(rows).toStrictEqual([
      { attempts: 0, claims: '0', due: true },
      { attempts: 0, claims: '0', due: true },
    ]);
  });

  it('gives slots 1/rateLimit apart within the window, skips a limited endpoint another claim holds, and never locks the row of one without a limit', async () => {
    const RATE = 4;
    const t = await app();
    await t.dispatcher?.stop(0);
    const limited = await endpoint(t, 'http://127.0.0.1:9/limited', generateSecret(), RATE);
    const free = await endpoint(t, 'http://127.0.0.1:9/free', generateSecret(), null);
    await due(t, limited, 6);
    await due(t, free, 3);
    // Slots as the database gave them (ms since the epoch, its clock), not moved to this one's.
    const outbox = createOutbox(t.appDatabase.db, {
      leaseMs: leaseMsFor(ATTEMPT_TIMEOUT_MS, ENGINE_TIMING),
      clock: { observe: () => {}, local: (ms) => ms },
    });
    const databaseNow = async () =>
      (
        await t.database.query<{ ms: number }>(
          'select (extract(epoch from clock_timestamp()) * 1000)::float8 as ms',
        )
      )[0]?.ms ?? Number.NaN;
    const client = await connection(t);
    await client.query('begin');
    await client.query('select 1 from webhook_endpoints for update');
    // Both rows are locked: the limited one is skipped, not waited for; the other is claimed
    // as ever, its row never locked.
    const whileLocked = await outbox.claim(10, undefined, [], 750);
    expect(whileLocked.map((delivery) => delivery.endpoint.key)).toStrictEqual([free, free, free]);
    expect(whileLocked.map((delivery) => delivery.pacing)).toStrictEqual([
      undefined,
      undefined,
      undefined,
    ]);
    await client.query('commit');

    // 750 ms hold the slots at 0, 250 and 500 ms: three of the six.
    const before = await databaseNow();
    const first = await outbox.claim(10, limited, [], 750);
    const after = await databaseNow();
    expect(first).toHaveLength(3);
    // A moment later, the slot at 750 ms has come within the window.
    const second = await outbox.claim(10, limited, [], 750);
    const claimed = [...first, ...second];
    expect(claimed.length).toBeGreaterThanOrEqual(4);
    const slots = claimed.map((delivery) => delivery.pacing);
    expect(slots.every((slot) => slot?.spacingMs === 1000 / RATE)).toBe(true);
    const starts = slots.map((slot) => slot?.startAt ?? Number.NaN).toSorted((a, b) => a - b);
    for (let i = 1; i < starts.length; i++) {
      expect((starts[i] as number) - (starts[i - 1] as number)).toBeCloseTo(250, 2);
    }
    // The first slot began during the claim; the next free slot is after the last one taken,
    // and the endpoint's row keeps it.
    expect(starts[0]).toBeGreaterThanOrEqual(before);
    expect(starts[0]).toBeLessThanOrEqual(after);
    const nextAt = second[0]?.pacing?.nextAt ?? Number.NaN;
    expect(nextAt - (starts.at(-1) as number)).toBeCloseTo(250, 2);
    const [row] = await t.database.query<{ paced_until: number }>(
      `select (extract(epoch from paced_until) * 1000)::float8 as paced_until
         from webhook_endpoints where id = $1`,
      [limited],
    );
    expect(row?.paced_until).toBeCloseTo(nextAt, 2);
    const [unpaced] = await t.database.query<{ paced_until: Date | null }>(
      'select paced_until from webhook_endpoints where id = $1',
      [free],
    );
    expect(unpaced?.paced_until).toBeNull();
  });
});
