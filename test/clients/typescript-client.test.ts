import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addPlant } from '../../clients/typescript/src/generated/sdk.gen.js';
import { type NewPlant, PlantStore, PlantStoreError } from '../../clients/typescript/src/index.js';
import { startTestApp, type TestApp, TOKEN } from '../helpers/app.js';

let t: TestApp;
let baseUrl: string;
let store: PlantStore;
beforeAll(async () => {
  t = await startTestApp();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  baseUrl = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
  store = new PlantStore({ baseUrl, token: TOKEN });
});
afterAll(() => t.close());

/** What `promise` rejects with, which must be a PlantStoreError. */
async function failure(promise: Promise<unknown>): Promise<PlantStoreError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(PlantStoreError);
  return error as PlantStoreError;
}

describe('the TypeScript client, over HTTP', () => {
  it('creates a plant and answers it as stored', async () => {
    await expect(store.createPlant({ id: 1n, name: 'Fern', tag: 'fern' })).resolves.toStrictEqual({
      name: 'Fern',
      tag: 'fern',
    });
  });

  it('answers 200 with the stored plant when the same plant is created again', async () => {
    const plant = { id: 2n, name: 'Ivy' };
    await store.createPlant(plant);
    const replay = await addPlant({ client: store.client, body: plant, throwOnError: true });
    expect(replay.response.status).toBe(200);
    expect(replay.data).toStrictEqual({ name: 'Ivy' });
  });

  it('throws a PlantStoreError with the 409 Error body for the same id with another name', async () => {
    await store.createPlant({ id: 3n, name: 'Moss' });
    const error = await failure(store.createPlant({ id: 3n, name: 'Lichen' }));
    expect(error.status).toBe(409);
    expect(error.body).toStrictEqual({ error: 409, message: error.message });
    expect(error.message).toMatch(/\S/);
    expect(error.requestId).toBeTruthy();
  });

  it.each([9223372036854775807n, 9007199254740993n, -9223372036854775808n])(
    'sends and reads the id %s exactly, as a bigint',
    async (id) => {
      await store.createPlant({ id, name: `Plant ${id}` });
      await expect(store.getPlant(id)).resolves.toStrictEqual({ id, name: `Plant ${id}` });
    },
  );

  it.each([42, 2 ** 53 + 2, '43'])(
    'refuses the id %s, which is not a bigint, with a TypeError and sends nothing',
    async (id) => {
      const shown = typeof id === 'string' ? `string "${id}"` : `number ${id}`;
      const refusal = `must be a bigint, such as 42n; got the ${shown}`;
      const plant = { id, name: 'Never sent' } as unknown as NewPlant;
      await expect(store.createPlant(plant)).rejects.toThrow(new TypeError(`plant.id ${refusal}`));
      const asId = id as unknown as bigint;
      await expect(store.getPlant(asId)).rejects.toThrow(new TypeError(`id ${refusal}`));
      await expect(store.deletePlant(asId)).rejects.toThrow(new TypeError(`id ${refusal}`));
      await expect(store.listPlants({ after: asId })).rejects.toThrow(
        new TypeError(`query.after ${refusal}`),
      );
      expect((await failure(store.getPlant(BigInt(id)))).status).toBe(404);
    },
  );

  it('pages through every plant by following the Link header', async () => {
    const ids = [
      -9223372036854775807n,
      10n,
      9007199254740997n,
      9007199254740998n,
      9007199254740999n,
      9223372036854775805n,
      9223372036854775806n,
    ];
    const plants: NewPlant[] = ids.map((id) => ({ id, name: `Paged ${id}`, tag: 'paged' }));
    for (const plant of plants) await store.createPlant(plant);
    const pages: NewPlant[][] = [];
    for await (const page of store.pages({ tag: 'paged', limit: 3 })) pages.push(page);
    expect(pages).toStrictEqual([plants.slice(0, 3), plants.slice(3, 6), plants.slice(6)]);
    const all: bigint[] = [];
    for await (const plant of store.plants({ tag: 'paged', limit: 2 })) all.push(plant.id);
    expect(all).toStrictEqual(ids);
  });

  it('deletes a plant, after which reading or deleting it throws a 404 PlantStoreError', async () => {
    await store.createPlant({ id: 9007199254740995n, name: 'Cactus' });
    await store.deletePlant(9007199254740995n);
    const read = await failure(store.getPlant(9007199254740995n));
    expect(read.status).toBe(404);
    expect(read.body.error).toBe(404);
    const deleted = await failure(store.deletePlant(9007199254740995n));
    expect(deleted.status).toBe(404);
  });

  it('throws a 401 PlantStoreError for a token the service does not know', async () => {
    const stranger = new PlantStore({ baseUrl, token: 'not-a-valid-token' });
    const error = await failure(stranger.getPlant(1n));
    expect(error.status).toBe(401);
    expect(error.body.error).toBe(401);
    expect(error.headers.get('www-authenticate')).toContain('error="invalid_token"');
  });
});
