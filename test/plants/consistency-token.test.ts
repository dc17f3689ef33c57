import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePosition, type WalPosition } from '../../src/db/wal-position.js';
import { MALFORMED_TOKEN_MESSAGE } from '../../src/plants/consistency-token.js';
import { postPlant, startTestApp, type TestApp, TOKEN } from '../helpers/app.js';

// The HTTP side of reads from replicas, on one server: named as the only replica, the primary
// is never read from as one (it is not in recovery), so every read goes to the primary and
// says why. Real replicas are the fault suite's (test/faults/replicas.test.ts).

const authorized = { authorization: `Bearer ${TOKEN}` };

function read(app: TestApp, url: string, token?: string) {
  return app.app.inject({
    method: 'GET',
    url,
    headers: { ...authorized, ...(token !== undefined && { 'consistency-token': token }) },
  });
}

function tokenOf(response: LightMyRequestResponse): WalPosition {
  const token = response.headers['consistency-token'];
  expect(typeof token).toBe('string');
  const position = parsePosition(token as string);
  expect(position).toBeDefined();
  return position as WalPosition;
}

const notBefore = (later: WalPosition, earlier: WalPosition) =>
  later.timeline > earlier.timeline ||
  (later.timeline === earlier.timeline && later.lsn >= earlier.lsn);

async function readsTo(app: TestApp, reason: string): Promise<number> {
  const metric = app.metrics.registry.getSingleMetric('plant_store_db_reads_total');
  const values = ((await metric?.get())?.values ?? []) as {
    labels: Record<string, string>;
    value: number;
  }[];
  return values.find((value) => value.labels.reason === reason)?.value ?? 0;
}

describe('without DATABASE_REPLICA_URLS', () => {
  let testApp: TestApp;
  beforeAll(async () => {
    testApp = await startTestApp();
  });
  afterAll(() => testApp?.close());

  it('answers no Consistency-Token and ignores one sent, whatever it holds', async () => {
    const created = await postPlant(testApp.app, { id: 1, name: 'Fern' });
    expect(created.statusCode).toBe(200);
    expect(created.headers['consistency-token']).toBeUndefined();
    const answer = await read(testApp, '/plants/1', 'not a token');
    expect(answer.statusCode).toBe(200);
    expect(answer.headers['consistency-token']).toBeUndefined();
    expect((await read(testApp, '/plants', 'not a token')).statusCode).toBe(200);
  });

  it('answers no Consistency-Token to a conflict, a HEAD or a delete either', async () => {
    await postPlant(testApp.app, { id: 2, name: 'Moss' });
    const conflict = await postPlant(testApp.app, { id: 2, name: 'Lichen' });
    expect(conflict.statusCode).toBe(409);
    expect(conflict.headers['consistency-token']).toBeUndefined();
    const withGarbage = { ...authorized, 'consistency-token': 'not a token' };
    const head = await testApp.app.inject({
      method: 'HEAD',
      url: '/plants/2',
      headers: withGarbage,
    });
    expect(head.statusCode).toBe(200);
    expect(head.headers['consistency-token']).toBeUndefined();
    for (const status of [204, 404]) {
      const deleted = await testApp.app.inject({
        method: 'DELETE',
        url: '/plants/2',
        headers: authorized,
      });
      expect(deleted.statusCode).toBe(status);
      expect(deleted.headers['consistency-token']).toBeUndefined();
    }
  });
});

describe('with DATABASE_REPLICA_URLS', () => {
  let testApp: TestApp;
  beforeAll(async () => {
    testApp = await startTestApp({
      env: (url) => ({ DATABASE_REPLICA_URLS: url ?? '' }),
    });
  });
  afterAll(() => testApp?.close());

  it('answers a create, a replay and a conflict with a token that reads back what they stored', async () => {
    const created = await postPlant(testApp.app, { id: 10, name: 'Ivy', tag: 'climber' });
    expect(created.statusCode).toBe(200);
    const written = tokenOf(created);
    const replayed = await postPlant(testApp.app, { id: 10, name: 'Ivy', tag: 'climber' });
    expect(replayed.statusCode).toBe(200);
    expect(notBefore(tokenOf(replayed), written)).toBe(true);
    const conflict = await postPlant(testApp.app, { id: 10, name: 'Moss' });
    expect(conflict.statusCode).toBe(409);
    expect(notBefore(tokenOf(conflict), written)).toBe(true);

    const sent = created.headers['consistency-token'] as string;
    const one = await read(testApp, '/plants/10', sent);
    expect(one.statusCode).toBe(200);
    expect(one.json()).toStrictEqual({ id: 10, name: 'Ivy', tag: 'climber' });
    expect(notBefore(tokenOf(one), written)).toBe(true);
    const page = await read(testApp, '/plants?after=9&limit=1', sent);
    expect(page.statusCode).toBe(200);
    expect(page.json()).toStrictEqual([{ id: 10, name: 'Ivy', tag: 'climber' }]);
    expect(notBefore(tokenOf(page), written)).toBe(true);
  });

  it('answers a delete and the 404 after it with tokens, the later one no earlier', async () => {
    await postPlant(testApp.app, { id: 20, name: 'Doomed' });
    const deleted = await testApp.app.inject({
      method: 'DELETE',
      url: '/plants/20',
      headers: authorized,
    });
    expect(deleted.statusCode).toBe(204);
    const gone = await read(testApp, '/plants/20', deleted.headers['consistency-token'] as string);
    expect(gone.statusCode).toBe(404);
    expect(notBefore(tokenOf(gone), tokenOf(deleted))).toBe(true);
    const again = await testApp.app.inject({
      method: 'DELETE',
      url: '/plants/20',
      headers: authorized,
    });
    expect(again.statusCode).toBe(404);
    tokenOf(again);
  });

  it('answers a read without a token with one, and HEAD as GET', async () => {
    await postPlant(testApp.app, { id: 30, name: 'Sage' });
    tokenOf(await read(testApp, '/plants/30'));
    const head = await testApp.app.inject({
      method: 'HEAD',
      url: '/plants/30',
      headers: authorized,
    });
    expect(head.statusCode).toBe(200);
    tokenOf(head);
  });

  it('refuses a malformed token with a 400 that names the header', async () => {
    for (const token of ['garbage', 't1-0/1, t1-0/2', 't0-0/1', 'x'.repeat(200)]) {
      for (const url of ['/plants/1', '/plants']) {
        const answer = await read(testApp, url, token);
        expect(answer.statusCode).toBe(400);
        expect(answer.json()).toStrictEqual({ error: 400, message: MALFORMED_TOKEN_MESSAGE });
      }
    }
    expect(MALFORMED_TOKEN_MESSAGE).toContain('consistency-token');
  });

  it('serves a token no server has reached, or of another timeline, from the primary, never older', async () => {
    await postPlant(testApp.app, { id: 40, name: 'Aloe' });
    const now = tokenOf(await read(testApp, '/plants/40'));
    const future = { timeline: now.timeline, lsn: now.lsn + (1n << 40n) };
    const ahead = await read(testApp, '/plants/40', `t${future.timeline}-100/0`);
    expect(ahead.statusCode).toBe(200);
    expect(notBefore(tokenOf(ahead), { timeline: now.timeline, lsn: 0x100n << 32n })).toBe(true);
    const otherTimeline = await read(testApp, '/plants/40', `t${now.timeline + 1}-0/1`);
    expect(otherTimeline.statusCode).toBe(200);
    expect(tokenOf(otherTimeline).timeline).toBe(now.timeline + 1);
    expect(future.lsn).toBeGreaterThan(now.lsn);
  });

  it('counts each read by where it went: the primary, since the one replica named is not a standby', async () => {
    const before = await readsTo(testApp, 'none');
    await read(testApp, '/plants/1');
    await read(testApp, '/plants');
    expect((await readsTo(testApp, 'none')) - before).toBe(2);
    expect(testApp.logs.some((line) => line.includes('is not in the rotation'))).toBe(true);
  });
});
