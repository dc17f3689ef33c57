import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getPlant } from '../../clients/typescript/src/generated/sdk.gen.js';
import { PlantStore, PlantStoreError } from '../../clients/typescript/src/index.js';
import { startTestApp, type TestApp, TOKEN } from '../helpers/app.js';

// The replica URL is the test's own server: not in recovery, so never read from, but configured,
// so that the service answers and reads Consistency-Token as it does beside real replicas.

/** One request the client sent and what it answered, as seen on the wire. */
interface Exchange {
  method: string;
  path: string;
  sent: string | null;
  answered: string | null;
}

let withoutReplicas: TestApp;
let withReplicas: TestApp;
beforeAll(async () => {
  withoutReplicas = await startTestApp();
  await withoutReplicas.app.listen({ port: 0, host: '127.0.0.1' });
  withReplicas = await startTestApp({
    replicaOf: withoutReplicas,
    env: { DATABASE_REPLICA_URLS: withoutReplicas.database.url ?? '' },
  });
  await withReplicas.app.listen({ port: 0, host: '127.0.0.1' });
});
afterAll(async () => {
  await withReplicas?.close();
  await withoutReplicas?.close();
});

interface ClientOptions {
  consistencyToken?: string;
  /** Awaited after the service has answered `request`, before the client receives the answer. */
  holdBack?: (request: Request) => Promise<void>;
}

/** A client of `t` whose every request, and the answer to it, is written to `exchanges`. */
function recordedClient(t: TestApp, exchanges: Exchange[], options: ClientOptions = {}) {
  const recording: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    const response = await fetch(request);
    exchanges.push({
      method: request.method,
      path: new URL(request.url).pathname,
      sent: request.headers.get('consistency-token'),
      answered: response.headers.get('consistency-token'),
    });
    await options.holdBack?.(request);
    return response;
  };
  const { port } = t.app.server.address() as AddressInfo;
  return new PlantStore({
    baseUrl: `http://127.0.0.1:${port}`,
    token: TOKEN,
    fetch: recording,
    ...(options.consistencyToken !== undefined && { consistencyToken: options.consistencyToken }),
  });
}

describe('the TypeScript client’s Consistency-Token, from a service without replicas', () => {
  it('holds none and sends none, since the service answers none', async () => {
    const exchanges: Exchange[] = [];
    const store = recordedClient(withoutReplicas, exchanges);
    await store.createPlant({ id: 1n, name: 'Fern' });
    await store.getPlant(1n);
    await store.listPlants();
    expect(exchanges.map(({ sent, answered }) => [sent, answered])).toStrictEqual([
      [null, null],
      [null, null],
      [null, null],
    ]);
    expect(store.consistencyToken).toBeUndefined();
  });

  it('sends the token it was given with every read, and not with writes', async () => {
    const exchanges: Exchange[] = [];
    const store = recordedClient(withoutReplicas, exchanges, { consistencyToken: 't1-0/3000060' });
    expect(store.consistencyToken).toBe('t1-0/3000060');
    await store.createPlant({ id: 2n, name: 'Moss', tag: 'given' });
    await store.createPlant({ id: 3n, name: 'Ivy', tag: 'given' });
    await store.getPlant(2n);
    const sizes: number[] = [];
    for await (const page of store.pages({ tag: 'given', limit: 1 })) sizes.push(page.length);
    expect(sizes, 'a full page links the next, the last one empty').toStrictEqual([1, 1, 0]);
    await getPlant({ client: store.client, path: { id: 3n }, throwOnError: true });
    await store.client.head({ url: '/plants', security: [{ scheme: 'bearer', type: 'http' }] });
    await store.deletePlant(3n);
    expect(exchanges.map(({ method, path, sent }) => [method, path, sent])).toStrictEqual([
      ['POST', '/plants', null],
      ['POST', '/plants', null],
      ['GET', '/plants/2', 't1-0/3000060'],
      ['GET', '/plants', 't1-0/3000060'],
      ['GET', '/plants', 't1-0/3000060'],
      ['GET', '/plants', 't1-0/3000060'],
      ['GET', '/plants/3', 't1-0/3000060'],
      ['HEAD', '/plants', 't1-0/3000060'],
      ['DELETE', '/plants/3', null],
    ]);
    expect(store.consistencyToken).toBe('t1-0/3000060');
  });

  it('sends a token put on a request by its caller rather than the one it holds', async () => {
    const exchanges: Exchange[] = [];
    const store = recordedClient(withoutReplicas, exchanges, { consistencyToken: 't1-0/3000060' });
    await store.createPlant({ id: 4n, name: 'Aloe' });
    await getPlant({
      client: store.client,
      path: { id: 4n },
      headers: { 'consistency-token': 't1-0/4000000' },
      throwOnError: true,
    });
    expect(exchanges.at(-1)?.sent).toBe('t1-0/4000000');
  });

  it('keeps the token it was given off the other GETs', async () => {
    const exchanges: Exchange[] = [];
    const store = recordedClient(withoutReplicas, exchanges, { consistencyToken: 't1-0/3000060' });
    await store.client.get({ url: '/healthz' });
    expect(exchanges).toStrictEqual([
      { method: 'GET', path: '/healthz', sent: null, answered: null },
    ]);
  });
});

describe('the TypeScript client’s Consistency-Token, from a service with replicas', () => {
  it('holds the token a write answers, sends it with the next read, then holds the read’s', async () => {
    const exchanges: Exchange[] = [];
    const store = recordedClient(withReplicas, exchanges);
    expect(store.consistencyToken).toBeUndefined();
    await store.createPlant({ id: 101n, name: 'Fern' });
    const created = exchanges[0]?.answered;
    expect(created).toMatch(/^[\x20-\x7e]{1,128}$/);
    expect(store.consistencyToken).toBe(created);
    await expect(store.getPlant(101n)).resolves.toStrictEqual({ id: 101n, name: 'Fern' });
    expect(exchanges[1]?.sent).toBe(created);
    expect(exchanges[1]?.answered).toMatch(/\S/);
    expect(store.consistencyToken).toBe(exchanges[1]?.answered);
  });

  it('sends the newest token with every read, pages and HEAD too, and none with writes', async () => {
    const exchanges: Exchange[] = [];
    const store = recordedClient(withReplicas, exchanges);
    await store.createPlant({ id: 102n, name: 'Moss', tag: 'replicated' });
    await store.createPlant({ id: 103n, name: 'Ivy', tag: 'replicated' });
    const sizes: number[] = [];
    for await (const page of store.pages({ tag: 'replicated', limit: 1 })) sizes.push(page.length);
    expect(sizes).toStrictEqual([1, 1, 0]);
    await getPlant({ client: store.client, path: { id: 103n }, throwOnError: true });
    await store.client.head({ url: '/plants', security: [{ scheme: 'bearer', type: 'http' }] });
    await store.deletePlant(103n);
    await expect(store.getPlant(102n)).resolves.toStrictEqual({
      id: 102n,
      name: 'Moss',
      tag: 'replicated',
    });
    expect(exchanges.map(({ method, path }) => `${method} ${path}`)).toStrictEqual([
      'POST /plants',
      'POST /plants',
      'GET /plants',
      'GET /plants',
      'GET /plants',
      'GET /plants/103',
      'HEAD /plants',
      'DELETE /plants/103',
      'GET /plants/102',
    ]);
    // One client asking one after another: every answer is as new as any before it.
    exchanges.forEach((exchange, index) => {
      expect(exchange.answered, `${exchange.method} ${exchange.path}`).toMatch(/\S/);
      const reads = exchange.method === 'GET' || exchange.method === 'HEAD';
      expect(exchange.sent).toBe(reads ? (exchanges[index - 1]?.answered ?? null) : null);
    });
    expect(store.consistencyToken).toBe(exchanges.at(-1)?.answered);
  });

  it('takes the token of answers that are errors: a 409 create, a 404 read and delete', async () => {
    const exchanges: Exchange[] = [];
    const store = recordedClient(withReplicas, exchanges);
    await store.createPlant({ id: 104n, name: 'Aloe' });
    for (const failing of [
      () => store.createPlant({ id: 104n, name: 'Agave' }),
      () => store.getPlant(404n),
      () => store.deletePlant(404n),
    ]) {
      const before = store.consistencyToken;
      const error = await failing().catch((reason: unknown) => reason);
      expect(error).toBeInstanceOf(PlantStoreError);
      const answered = exchanges.at(-1)?.answered;
      expect(answered).toMatch(/\S/);
      expect(store.consistencyToken).toBe(answered);
      if (exchanges.at(-1)?.method === 'GET') expect(exchanges.at(-1)?.sent).toBe(before);
    }
  });

  it('keeps the newer token when the answer to an earlier read arrives after a write’s', async () => {
    const exchanges: Exchange[] = [];
    let readAnswered!: () => void;
    const answered = new Promise<void>((resolve) => {
      readAnswered = resolve;
    });
    let deliver!: () => void;
    const delivered = new Promise<void>((resolve) => {
      deliver = resolve;
    });
    const store = recordedClient(withReplicas, exchanges, {
      holdBack: async (request) => {
        if (request.method !== 'GET') return;
        readAnswered();
        await delivered;
      },
    });
    await store.createPlant({ id: 105n, name: 'Cactus' });
    const lateRead = store.getPlant(105n);
    await answered;
    await store.createPlant({ id: 106n, name: 'Sedum' });
    const written = store.consistencyToken;
    deliver();
    await lateRead;
    const [, read, write] = exchanges;
    expect([read?.method, write?.method]).toStrictEqual(['GET', 'POST']);
    expect(written).toBe(write?.answered);
    expect(read?.answered).not.toBe(written);
    expect(store.consistencyToken).toBe(written);
  });

  it('starts from a token handed over by another client, which its first read sends', async () => {
    const writer = recordedClient(withReplicas, []);
    await writer.createPlant({ id: 107n, name: 'Pothos' });
    const handed = writer.consistencyToken;
    expect(handed).toMatch(/\S/);
    const exchanges: Exchange[] = [];
    const reader = recordedClient(withReplicas, exchanges, { consistencyToken: handed ?? '' });
    expect(reader.consistencyToken).toBe(handed);
    await expect(reader.getPlant(107n)).resolves.toStrictEqual({ id: 107n, name: 'Pothos' });
    expect(exchanges[0]?.sent).toBe(handed);
  });

  it('reaches the service with the token it was given: a malformed one is a 400 naming the header', async () => {
    const store = recordedClient(withReplicas, [], { consistencyToken: 'malformed' });
    const error = await store.getPlant(107n).catch((reason: unknown) => reason);
    expect(error).toBeInstanceOf(PlantStoreError);
    expect((error as PlantStoreError).status).toBe(400);
    expect((error as PlantStoreError).message).toContain('Consistency-Token');
  });
});
