// Without DATABASE_REPLICA_URLS the service reads where it writes: Consistency-Token means
// nothing to it, neither answered nor judged. The reads from replicas are tested on real ones in
// test/faults/replicas.test.ts.
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postPlant, startTestApp, type TestApp, TOKEN } from '../helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

// Malformed for any service that reads the header: a 400 if this one did.
const GARBAGE = 'garbage, not a token';

function send(method: 'GET' | 'HEAD' | 'DELETE', url: string) {
  return t.app.inject({
    method,
    url,
    headers: { authorization: `Bearer ${TOKEN}`, 'consistency-token': GARBAGE },
  });
}

function expectNoToken(response: LightMyRequestResponse) {
  expect(response.headers).not.toHaveProperty('consistency-token');
}

describe('without DATABASE_REPLICA_URLS', () => {
  it('answers no Consistency-Token, and a garbage one sent with a request changes nothing', async () => {
    const created = await postPlant(t.app, { id: 7101, name: 'Unreplicated', tag: 'solo' });
    expect(created.statusCode).toBe(200);
    expectNoToken(created);
    const conflict = await postPlant(t.app, { id: 7101, name: 'Other' });
    expect(conflict.statusCode).toBe(409);
    expectNoToken(conflict);

    const byId = await send('GET', '/plants/7101');
    expect(byId.statusCode).toBe(200);
    expect(byId.json()).toStrictEqual({ id: 7101, name: 'Unreplicated', tag: 'solo' });
    expectNoToken(byId);
    const head = await send('HEAD', '/plants/7101');
    expect(head.statusCode).toBe(200);
    expectNoToken(head);
    const page = await send('GET', '/plants?tag=solo');
    expect(page.statusCode).toBe(200);
    expect(page.json()).toStrictEqual([{ id: 7101, name: 'Unreplicated', tag: 'solo' }]);
    expectNoToken(page);

    const deleted = await send('DELETE', '/plants/7101');
    expect(deleted.statusCode).toBe(204);
    expectNoToken(deleted);
    const gone = await send('GET', '/plants/7101');
    expect(gone.statusCode).toBe(404);
    expectNoToken(gone);
    const again = await send('DELETE', '/plants/7101');
    expect(again.statusCode).toBe(404);
    expectNoToken(again);
  });
});
