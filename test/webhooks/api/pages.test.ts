// Keyset pages of the management API hold across the digit boundaries of their row keys
// (9 -> 10 -> 100 in decimal, 0xf -> 0x10 in the ids): a walk with any small limit lists
// exactly what one full page lists, in order.
import { sql } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import fc from 'fast-check';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  endpointIdOf,
  endpointIdSql,
  webhookId,
  webhookIdSql,
} from '../../../src/webhooks/tables/ids.js';
import { startTestApp, type TestApp } from '../../helpers/app.js';

const ADMIN = 'admin-token-5e02b7';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { ADMIN_TOKENS: ADMIN } });
  // Rows as the API leaves them: nothing delivers meanwhile.
  await t.dispatcher?.stop(0);
});
afterAll(() => t.close());

const call = (method: 'GET' | 'POST' | 'DELETE', url: string, body?: unknown) =>
  t.app.inject({
    method,
    url,
    headers: {
      authorization: `Bearer ${ADMIN}`,
      ...(body !== undefined && { 'content-type': 'application/json' }),
    },
    ...(body !== undefined && { payload: JSON.stringify(body) }),
  });

const nextPage = (response: LightMyRequestResponse) =>
  /^<([^>]+)>; rel="next"$/.exec(String(response.headers.link ?? ''))?.[1];

/** Every id a walk from `first` by its Link headers lists, page after page. */
async function walk(first: string): Promise<string[]> {
  const ids: string[] = [];
  let url: string | undefined = first;
  while (url !== undefined) {
    const response = await call('GET', url);
    expect(response.statusCode, response.body).toBe(200);
    const page = response.json() as Array<{ id: string }>;
    ids.push(...page.map((item) => item.id));
    url = nextPage(response);
    expect(ids.length).toBeLessThanOrEqual(200);
  }
  return ids;
}

/** Where the next row key starts: just below a boundary of decimal or hex digits. */
const startKey = fc.constantFrom(1, 7, 8, 14, 95, 250, 996, 4090);
/** Which of the rows made are deleted again. */
const survivors = fc.array(fc.boolean(), { minLength: 14, maxLength: 14 });

/** Makes the next identity of `table` be `key`. */
const startAt = (table: string, key: number) =>
  t.database.query(`select setval(pg_get_serial_sequence('${table}', 'id'), $1::int8, false)`, [
    key,
  ]);

/** The walks with every limit from 1 to 7 equal the full list. */
async function expectWalksEqual(path: string, full: string[]) {
  const separator = path.includes('?') ? '&' : '?';
  for (let limit = 1; limit <= 7; limit++) {
    expect(await walk(`${path}${separator}limit=${limit}`), `limit ${limit}`).toStrictEqual(full);
  }
}

describe('pages across the digit boundaries of their keys', () => {
  it('lists every endpoint once, in ascending id order, whatever the page size', async () => {
    await fc.assert(
      fc.asyncProperty(
        startKey,
        fc.integer({ min: 1, max: 14 }),
        survivors,
        async (start, made, kept) => {
          await t.database.query('delete from webhook_endpoints');
          await startAt('webhook_endpoints', start);
          const ids: string[] = [];
          for (let i = 0; i < made; i++) {
            const response = await call('POST', '/webhooks/endpoints', {
              url: `https://receiver.example.com/${i}`,
            });
            expect(response.statusCode, response.body).toBe(201);
            ids.push((response.json() as { id: string }).id);
          }
          const gone = ids
            .filter((_, i) => !kept[i])
            .map((id) => BigInt(`0x${id.slice(3)}`).toString());
          await t.database.query('delete from webhook_endpoints where id = any($1::int8[])', [
            gone,
          ]);
          const expected = ids.filter((_, i) => kept[i]).sort();
          expect(await walk('/webhooks/endpoints?limit=100')).toStrictEqual(expected);
          await expectWalksEqual('/webhooks/endpoints', expected);
        },
      ),
      { numRuns: 12 },
    );
  });

  it('lists every attempt of an endpoint once, newest first, whatever the page size', async () => {
    const created = await call('POST', '/webhooks/endpoints', {
      url: 'https://receiver.example.com/a',
    });
    const endpoint = (created.json() as { id: string }).id;
    const key = BigInt(`0x${endpoint.slice(3)}`).toString();
    await fc.assert(
      fc.asyncProperty(
        startKey,
        fc.integer({ min: 1, max: 14 }),
        survivors,
        async (start, made, kept) => {
          await t.database.query('delete from webhook_attempts');
          await startAt('webhook_attempts', start);
          const rows = await t.database.query<{ id: string }>(
            `insert into webhook_attempts (endpoint_id, event_id, succeeded, duration_ms)
           select $1::int8, gen_random_uuid(), n % 2 = 0, n from generate_series(1, $2::int) as n
           returning id::text`,
            [key, made],
          );
          const gone = rows.filter((_, i) => !kept[i]).map((row) => row.id);
          await t.database.query('delete from webhook_attempts where id = any($1::int8[])', [gone]);
          const expected = rows
            .filter((_, i) => kept[i])
            .map((row) => `att_${BigInt(row.id).toString(16).padStart(16, '0')}`)
            .sort()
            .reverse();
          const path = `/webhooks/endpoints/${endpoint}/attempts`;
          expect(await walk(`${path}?limit=100`)).toStrictEqual(expected);
          await expectWalksEqual(path, expected);
        },
      ),
      { numRuns: 12 },
    );
  });
});

describe('ids written in SQL', () => {
  it('are the ids the service writes in TypeScript, for any row key and event', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.bigInt({ min: 1n, max: 2n ** 63n - 1n }),
        fc.uuid(),
        async (key, uuid) => {
          const query = new PgDialect().sqlToQuery(
            sql`select ${endpointIdSql(sql`${key.toString()}::int8`)} as endpoint,
                     ${webhookIdSql(sql`${uuid}::uuid`)} as event`,
          );
          const [row] = await t.database.query(query.sql, query.params);
          expect(row).toStrictEqual({ endpoint: endpointIdOf(key), event: webhookId(uuid) });
        },
      ),
      { numRuns: 50 },
    );
  });
});
