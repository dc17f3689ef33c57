import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPlantQueries } from '../../src/plants/queries.js';
import { type CreatePlantResult, createPlantRepository } from '../../src/plants/repository.js';
import type { NewPlant } from '../../src/plants/schemas.js';
import {
  batching,
  postPlant,
  startTestApp,
  storedPlant,
  type TestApp,
  TOKEN,
} from '../helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const auth = { authorization: `Bearer ${TOKEN}` };
const plantOf = ({ name, tag }: { name: string; tag?: string | undefined }) =>
  tag === undefined ? { name } : { name, tag };

describe('a create whose conflicting row is deleted before it is read back', () => {
  // A statement trigger deletes the doomed ids at the end of the next INSERT: that INSERT found
  // the row and did nothing, and the read-back that follows finds it gone.
  beforeAll(async () => {
    await t.database.query('create table doomed (id int8 primary key)');
    await t.database.query(`
      create function delete_doomed() returns trigger language plpgsql as $$
      begin
        delete from plants where id in (select id from doomed);
        delete from doomed;
        return null;
      end $$`);
    await t.database.query(
      'create trigger plants_delete_doomed after insert on plants for each statement execute function delete_doomed()',
    );
  });
  afterAll(async () => {
    await t.database.query('drop trigger plants_delete_doomed on plants');
    await t.database.query('drop function delete_doomed');
    await t.database.query('drop table doomed');
  });

  it('stores the plant afresh and answers it created', async () => {
    const repository = createPlantRepository(t.appDatabase.db, batching);
    await repository.createPlant({ id: 10n, name: 'Before', tag: 'old' });
    await t.database.query('insert into doomed values (10)');
    const result = await repository.createPlant({ id: 10n, name: 'After' });
    expect(result).toStrictEqual({ outcome: 'created', plant: { name: 'After' } });
    expect(await storedPlant(t.database, 10)).toStrictEqual({ id: '10', name: 'After', tag: null });
    expect(await t.database.query('select id from doomed')).toStrictEqual([]);
  });
});

describe('the insert that locks what is stored', () => {
  it('inserts new ids, and answers the stored row of the others without changing it', async () => {
    const queries = createPlantQueries(t.appDatabase.db, batching);
    await queries.insertNew([{ id: 20n, name: 'Stored', tag: '\ufeffkept' }]);
    const [before] = await t.database.query('select created_at from plants where id = 20');
    const { rows: answer } = await queries.insertOrLock([
      { id: 20n, name: 'Other' },
      { id: 21n, name: 'New', tag: '' },
    ]);
    expect(answer.sort((a, b) => Number(a.id - b.id))).toStrictEqual([
      { id: 20n, name: 'Stored', tag: '\ufeffkept', inserted: false },
      { id: 21n, name: 'New', tag: '', inserted: true },
    ]);
    expect(await storedPlant(t.database, 20)).toStrictEqual({
      id: '20',
      name: 'Stored',
      tag: '\ufeffkept',
    });
    expect(await t.database.query('select created_at from plants where id = 20')).toStrictEqual([
      before,
    ]);
  });
});

describe('deletes sent together', () => {
  it('answer as if sent one after the other: of two deletes of one id, the first finds the plant', async () => {
    const repository = createPlantRepository(t.appDatabase.db, batching);
    for (const id of [30n, 31n, 32n]) await repository.createPlant({ id, name: 'Doomed' });
    const sent = [30n, 31n, 30n, 33n, 32n];
    const answers = await Promise.all(sent.map((id) => repository.deletePlant(id)));
    expect(answers).toStrictEqual([true, true, false, false, true]);
    expect(
      await t.database.query('select id from plants where id between 30 and 33'),
    ).toStrictEqual([]);
    expect(repository.stats().deletes).toStrictEqual({ queued: 0, inFlight: 0 });
  });
});

describe('deletes racing creates of the same ids', () => {
  const variants = [{ name: 'Fern' }, { name: 'Fern', tag: 'green' }, { name: 'Moss' }];
  const ids = [100n, 101n, 102n, 103n];

  it('leave every create an answer that matches what was stored, and never a 5xx', async () => {
    const repository = createPlantRepository(t.appDatabase.db, batching);
    type Event =
      | { kind: 'create'; sent: NewPlant; result: CreatePlantResult }
      | { kind: 'delete'; id: bigint; deleted: boolean };
    const events: Event[] = [];
    const client = async (seed: number) => {
      for (let i = 0; i < 150; i++) {
        const id = ids[(seed * 7 + i * 3) % ids.length] as bigint;
        if ((seed + i) % 3 === 0) {
          events.push({ kind: 'delete', id, deleted: await repository.deletePlant(id) });
        } else {
          const sent = { id, ...variants[(seed + i * 5) % variants.length] } as NewPlant;
          events.push({ kind: 'create', sent, result: await repository.createPlant(sent) });
        }
      }
    };
    await Promise.all(Array.from({ length: 24 }, (_, seed) => client(seed)));

    for (const id of ids) {
      const creates = events.filter((e) => e.kind === 'create' && e.sent.id === id);
      const deletes = events.filter((e) => e.kind === 'delete' && e.id === id && e.deleted);
      const stored = await storedPlant(t.database, id);
      const created = creates.filter((e) => e.kind === 'create' && e.result.outcome === 'created');
      // Every row that was ever stored was created by exactly one create: the deleted ones, and
      // the one still there.
      expect(created.length).toBe(deletes.length + (stored ? 1 : 0));
      expect(created.length).toBeGreaterThan(5);
      for (const event of creates) {
        if (event.kind !== 'create') continue;
        const sent = plantOf(event.sent);
        if (event.result.outcome === 'conflict') {
          expect(event.result.plant).not.toStrictEqual(sent);
          expect(variants).toContainEqual(event.result.plant);
        } else {
          expect(event.result.plant).toStrictEqual(sent);
        }
      }
      if (stored)
        expect(variants).toContainEqual(plantOf({ ...stored, tag: stored.tag ?? undefined }));
    }
  });

  it('over HTTP, answer 200 or 409 to creates and 204 or 404 to deletes, the 200s as sent', async () => {
    const answers: Array<{ status: number; body: string; sent?: object }> = [];
    const client = async (seed: number) => {
      for (let i = 0; i < 60; i++) {
        const id = ids[(seed + i) % ids.length] as bigint;
        if ((seed * 5 + i) % 3 === 0) {
          const response = await t.app.inject({
            method: 'DELETE',
            url: `/plants/${id}`,
            headers: auth,
          });
          answers.push({ status: response.statusCode, body: response.body });
        } else {
          const sent = variants[(seed + i) % variants.length] as { name: string; tag?: string };
          const response = await postPlant(t.app, { id: Number(id), ...sent });
          answers.push({ status: response.statusCode, body: response.body, sent });
        }
      }
    };
    await Promise.all(Array.from({ length: 24 }, (_, seed) => client(seed)));
    const creates = answers.filter((a) => a.sent);
    const deletes = answers.filter((a) => !a.sent);
    expect(creates.filter((a) => a.status !== 200 && a.status !== 409)).toStrictEqual([]);
    expect(deletes.filter((a) => a.status !== 204 && a.status !== 404)).toStrictEqual([]);
    for (const answer of creates.filter((a) => a.status === 200)) {
      expect(JSON.parse(answer.body)).toStrictEqual(answer.sent);
    }
    expect(deletes.filter((a) => a.status === 204).length).toBeGreaterThan(20);
    expect(deletes.filter((a) => a.status === 204).length).toBeLessThanOrEqual(
      creates.filter((a) => a.status === 200).length,
    );
  });
});
