import { sql } from 'drizzle-orm';
import fc from 'fast-check';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPlantRepository } from '../../src/plants/repository.js';
import { batching, postPlant, startTestApp, type TestApp, TOKEN } from '../helpers/app.js';
import { testEngine } from '../helpers/database.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const auth = { authorization: `Bearer ${TOKEN}` };

function get(url: string) {
  return t.app.inject({ method: 'GET', url, headers: auth });
}

/** Stores plants with SQL, beside the service: ids as text so that nothing rounds them. */
async function store(...plants: Array<{ id: string; name: string; tag?: string }>) {
  await t.database.query(
    'insert into plants (id, name, tag) select * from unnest($1::int8[], $2::text[], $3::text[])',
    [plants.map((p) => p.id), plants.map((p) => p.name), plants.map((p) => p.tag ?? null)],
  );
}

/** The ids of a page, read as bigints: JSON.parse would round those past 2^53. */
function ids(response: LightMyRequestResponse): bigint[] {
  return [...response.body.matchAll(/"id":(-?\d+)/g)].map((match) => BigInt(match[1] ?? ''));
}

/** The URL of the next page, from the Link header; undefined on the last page. */
function nextPage(response: LightMyRequestResponse): string | undefined {
  return /^<([^>]+)>; rel="next"$/.exec(String(response.headers.link ?? ''))?.[1];
}

function expectError(response: LightMyRequestResponse, status: number, message: string) {
  expect(response.statusCode).toBe(status);
  expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
  expect(response.headers['x-request-id']).toBeTruthy();
  expect(response.json()).toStrictEqual({ error: status, message });
}

describe('GET /plants', () => {
  // A range of its own, 1e15 + 1 .. 1e15 + 250, with the extremes of int64 below it.
  const base = 10n ** 15n;
  const idOf = (i: number) => base + BigInt(i);
  const tags = ['fern', 'cactus', 'fern & moss', ''];
  /** Plant n (1 to 250): every fifth has no tag, the others cycle through `tags`. */
  const tagOf = (n: number) => ((n - 1) % 5 < 4 ? tags[(n - 1) % 5] : undefined);
  const numbers = (filter: (n: number) => boolean) =>
    Array.from({ length: 250 }, (_, i) => i + 1).filter(filter);
  beforeAll(() =>
    store(
      { id: '-9223372036854775808', name: 'Smallest' },
      { id: '0', name: 'Zero', tag: '' },
      ...numbers(() => true).map((n) => {
        const tag = tagOf(n);
        return { id: String(idOf(n)), name: `Plant ${n}`, ...(tag !== undefined && { tag }) };
      }),
    ),
  );

  it('answers plants in ascending id order, 100 by default, each as stored', async () => {
    const response = await get(`/plants?after=${base}`);
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(ids(response)).toStrictEqual(numbers((n) => n <= 100).map(idOf));
    const page = JSON.parse(response.body.replace(/"id":(\d+)/g, '"id":"$1"'));
    expect(page.slice(0, 5)).toStrictEqual([
      { id: String(idOf(1)), name: 'Plant 1', tag: 'fern' },
      { id: String(idOf(2)), name: 'Plant 2', tag: 'cactus' },
      { id: String(idOf(3)), name: 'Plant 3', tag: 'fern & moss' },
      { id: String(idOf(4)), name: 'Plant 4', tag: '' },
      { id: String(idOf(5)), name: 'Plant 5' },
    ]);
  });

  it('writes every plant of a page exactly as GET /plants/{id} writes it, whatever its text', async () => {
    const start = 5n * 10n ** 15n;
    const texts = [
      '"quoted" and \\ backslashed \\"',
      '\u0001\u001f\b\f\n\r\t controls',
      '\u007f delete, \u2028\u2029 separators',
      '\ufeffa leading byte order mark',
      'é ü 中文 😀 𝄞',
      '</script><b>',
    ];
    await store(
      ...texts.map((text, i) => ({
        id: String(start + BigInt(i) + 1n),
        name: text,
        ...(i % 2 === 0 && { tag: `${text} tag` }),
      })),
    );
    try {
      const page = await get(`/plants?after=${start}&limit=${texts.length}`);
      const each = await Promise.all(
        texts.map((_, i) => get(`/plants/${start + BigInt(i) + 1n}`).then((one) => one.body)),
      );
      expect(page.body).toBe(`[${each.join(',')}]`);
      const names = JSON.parse(page.body).map((plant: { name: string }) => plant.name);
      expect(names).toStrictEqual(texts);
    } finally {
      // The other tests count the plants of this table.
      await t.database.query('delete from plants where id > $1', [String(start)]);
    }
  });

  it('starts at the smallest id without after, writing each id as an exact JSON integer', async () => {
    const response = await get('/plants?limit=3');
    expect(response.body).toBe(
      `[{"id":-9223372036854775808,"name":"Smallest"},{"id":0,"name":"Zero","tag":""},{"id":${idOf(1)},"name":"Plant 1","tag":"fern"}]`,
    );
  });

  it('answers at most limit plants, all with ids greater than after', async () => {
    const response = await get(`/plants?limit=3&after=${idOf(10)}`);
    expect(ids(response)).toStrictEqual([idOf(11), idOf(12), idOf(13)]);
  });

  it('gives the next page in a Link header when the page is full', async () => {
    const response = await get(`/plants?limit=3&after=${idOf(10)}`);
    expect(response.headers.link).toBe(`</plants?limit=3&after=${idOf(13)}>; rel="next"`);
  });

  it('names the default limit in the Link header too', async () => {
    const response = await get(`/plants?after=${idOf(100)}`);
    expect(response.headers.link).toBe(`</plants?limit=100&after=${idOf(200)}>; rel="next"`);
  });

  it('gives no Link header when the page is not full', async () => {
    const response = await get(`/plants?limit=11&after=${idOf(240)}`);
    expect(ids(response)).toStrictEqual(numbers((n) => n > 240).map(idOf));
    expect(response.headers.link).toBeUndefined();
  });

  it('answers an empty array after the largest id', async () => {
    const response = await get('/plants?after=9223372036854775807');
    expect(response.statusCode).toBe(200);
    expect(response.body).toBe('[]');
    expect(response.headers.link).toBeUndefined();
  });

  it('gives no Link header when a full page ends at the largest id: nothing can follow it', async () => {
    await store({ id: '9223372036854775807', name: 'Largest', tag: 'the largest' });
    try {
      const response = await get('/plants?limit=1&tag=the+largest');
      expect(response.body).toBe(
        '[{"id":9223372036854775807,"name":"Largest","tag":"the largest"}]',
      );
      expect(response.headers.link).toBeUndefined();
    } finally {
      await t.database.query('delete from plants where id = 9223372036854775807');
    }
  });

  it('keeps only the plants with exactly the tag', async () => {
    const response = await get(`/plants?limit=1000&tag=fern`);
    expect(ids(response)).toStrictEqual(numbers((n) => tagOf(n) === 'fern').map(idOf));
    expect(ids(await get('/plants?tag=Fern'))).toStrictEqual([]);
  });

  it('keeps only the plants with an empty tag for tag=, not those without a tag', async () => {
    const response = await get(`/plants?limit=1000&tag=`);
    expect(ids(response)).toStrictEqual([0n, ...numbers((n) => tagOf(n) === '').map(idOf)]);
  });

  it('carries the tag, percent-encoded, into the Link of the next page', async () => {
    const response = await get(`/plants?limit=2&tag=fern+%26+moss`);
    expect(ids(response)).toStrictEqual([idOf(3), idOf(8)]);
    expect(response.headers.link).toBe(
      `</plants?limit=2&after=${idOf(8)}&tag=fern%20%26%20moss>; rel="next"`,
    );
  });

  it('pages through every plant with a tag by following Link, each once, in order', async () => {
    const seen: bigint[] = [];
    let url: string | undefined = '/plants?limit=7&tag=cactus';
    while (url) {
      const response = await get(url);
      expect(response.statusCode).toBe(200);
      seen.push(...ids(response));
      url = nextPage(response);
    }
    expect(seen).toStrictEqual(numbers((n) => tagOf(n) === 'cactus').map(idOf));
  });

  it('accepts limit 1 and 1000', async () => {
    expect(ids(await get(`/plants?limit=1&after=${base}`))).toStrictEqual([idOf(1)]);
    expect(ids(await get('/plants?limit=1000'))).toHaveLength(252);
  });

  it('ignores unknown parameters', async () => {
    const response = await get(`/plants?limit=1&after=${base}&sort=desc&page=%ZZ&x`);
    expect(ids(response)).toStrictEqual([idOf(1)]);
  });

  const badLimit = 'querystring/limit must be an integer from 1 to 1000, such as 100';
  const notCanonical = (name: string) =>
    `querystring/${name} must be an integer in canonical decimal form, such as 42 or -7`;
  it.each([
    ['limit=0', badLimit],
    ['limit=1001', badLimit],
    ['limit=-5', badLimit],
    ['limit=99999999999999999999', badLimit],
    ['limit=', badLimit],
    ['limit', badLimit],
    ['limit=007', badLimit],
    ['limit=%2B5', badLimit],
    ['limit=+5', badLimit],
    ['limit=1e2', badLimit],
    ['limit=10.0', badLimit],
    ['limit=1&limit=1', 'querystring/limit must not be given more than once'],
    ['after=-0', notCanonical('after')],
    ['after=', notCanonical('after')],
    ['after=9223372036854775808', 'querystring/after must be an integer in the int64 range'],
    ['after=1&after=2', 'querystring/after must not be given more than once'],
    ['tag=a&tag=b', 'querystring/tag must not be given more than once'],
    ['tag=a&tag=a', 'querystring/tag must not be given more than once'],
    ['tag=%ZZ', 'querystring/tag must be percent-encoded UTF-8'],
    ['tag=%C3', 'querystring/tag must be percent-encoded UTF-8'],
    ['tag=%ED%A0%80', 'querystring/tag must be percent-encoded UTF-8'],
    ['tag=a%00b', 'querystring/tag must not contain the character U+0000'],
  ])('answers 400 naming the parameter to ?%s', async (query, message) => {
    expectError(await get(`/plants?${query}`), 400, message);
  });

  it('answers 400 to a tag longer than any stored tag can be', async () => {
    expectError(
      await get(`/plants?tag=${'%F0%9F%8C%B5'.repeat(257)}`),
      400,
      'querystring/tag must be at most 256 characters long',
    );
  });

  it('accepts a tag of 256 characters', async () => {
    const response = await get(`/plants?tag=${'%F0%9F%8C%B5'.repeat(256)}`);
    expect(response.statusCode).toBe(200);
    expect(response.body).toBe('[]');
  });
});

describe('pages across the digit boundaries of plant ids', () => {
  // Ids of 1 to 4 digits, between the 0 and the 1e15 range above: 9 -> 10 -> 100 -> 1000.
  const starts = fc.constantFrom(1n, 7n, 95n, 996n);
  /** The ids a walk from `first` lists, up to and including `last`. */
  async function walkTo(first: string, last: bigint): Promise<bigint[]> {
    const seen: bigint[] = [];
    let url: string | undefined = first;
    while (url) {
      const response = await get(url);
      expect(response.statusCode).toBe(200);
      const page = ids(response);
      seen.push(...page.filter((id) => id <= last));
      url = page.some((id) => id > last) ? undefined : nextPage(response);
    }
    return seen;
  }

  it('lists every plant once, in order, whatever the page size, with and without a tag', async () => {
    await fc.assert(
      fc.asyncProperty(
        starts,
        fc.array(fc.boolean(), { minLength: 1, maxLength: 14 }),
        async (start, kept) => {
          const made = kept.map((_, i) => start + BigInt(i));
          const last = made.at(-1) ?? start;
          await t.database.query('delete from plants where id between 1 and 9999');
          await store(...made.map((id) => ({ id: String(id), name: 'digits', tag: 'digits' })));
          const gone = made.filter((_, i) => !kept[i]).map(String);
          await t.database.query('delete from plants where id = any($1::int8[])', [gone]);
          const expected = made.filter((_, i) => kept[i]);
          for (let limit = 1; limit <= 7; limit++) {
            expect(await walkTo(`/plants?limit=${limit}&after=0`, last)).toStrictEqual(expected);
            expect(await walkTo(`/plants?limit=${limit}&tag=digits`, last)).toStrictEqual(expected);
          }
        },
      ),
      { numRuns: 12 },
    );
  });
});

describe('paging while others write', () => {
  // A range of its own: stable plants at 3e15 + 10k, plants that come and go at 3e15 + 10k + 5.
  const base = 3n * 10n ** 15n;
  const stable = Array.from({ length: 300 }, (_, k) => base + 10n * BigInt(k + 1));
  beforeAll(() =>
    store(
      ...stable.map((id, k) => ({ id: String(id), name: 'stable', tag: k % 2 ? 'odd' : 'even' })),
    ),
  );

  /** Four clients that create plants between the stable ones and delete them again. */
  function startChurn() {
    let running = true;
    let next = 0;
    const statuses: number[] = [];
    const writer = async () => {
      const created: bigint[] = [];
      while (running) {
        const id = base + 10n * BigInt((next++ % 300) + 1) + 5n;
        const response = await postPlant(t.app, `{"id":${id},"name":"passing","tag":"odd"}`);
        statuses.push(response.statusCode);
        created.push(id);
        if (created.length > 3) {
          const doomed = created.splice(Math.floor(Math.random() * created.length), 1)[0];
          const deleted = await t.app.inject({
            method: 'DELETE',
            url: `/plants/${doomed}`,
            headers: auth,
          });
          statuses.push(deleted.statusCode);
        }
      }
    };
    const writers = Promise.all([1, 2, 3, 4].map(writer));
    return {
      writes: () => statuses.length,
      async stop() {
        running = false;
        await writers;
        return statuses;
      },
    };
  }

  /** Follows Link from `first` to the last page; others write between every two pages. */
  async function pageThrough(first: string, writes: () => number) {
    const seen: bigint[] = [];
    for (let url: string | undefined = first; url; ) {
      const response = await get(url);
      expect(response.statusCode).toBe(200);
      seen.push(...ids(response));
      url = nextPage(response);
      const mark = writes();
      while (writes() < mark + 8) await new Promise((resolve) => setTimeout(resolve, 1));
    }
    return seen;
  }

  it.each([
    ['every plant', '', stable],
    ['one tag', '&tag=odd', stable.filter((_, k) => k % 2 === 1)],
  ])(
    'never repeats or skips a plant that exists throughout, listing %s',
    async (_, filter, expected) => {
      const churn = startChurn();
      let seen: bigint[];
      try {
        seen = await pageThrough(`/plants?limit=13&after=${base}${filter}`, churn.writes);
      } finally {
        const statuses = await churn.stop();
        expect(statuses.filter((status) => status === 200).length).toBeGreaterThan(40);
        expect(statuses.filter((status) => status === 204).length).toBeGreaterThan(20);
        expect(statuses.filter((status) => ![200, 204, 404].includes(status))).toStrictEqual([]);
      }
      // Strictly ascending: nothing repeated, and the order is the ids' order.
      for (let i = 1; i < seen.length; i++) expect(seen[i]).toBeGreaterThan(seen[i - 1] as bigint);
      const seenSet = new Set(seen);
      expect(expected.filter((id) => !seenSet.has(id))).toStrictEqual([]);
      // Anything else seen is one of the plants that come and go.
      const others = seen.filter((id) => !expected.includes(id));
      expect(others.every((id) => (id - base) % 10n === 5n)).toBe(true);
    },
  );
});

describe.runIf(testEngine() === 'postgres')('the query plan of a page', () => {
  // 100,000 plants of their own, from 2e15 on, with 20 tags; the statistics are fresh.
  const base = 2n * 10n ** 15n;
  beforeAll(async () => {
    await t.database.query(
      `insert into plants (id, name, tag)
         select $1::int8 + g, 'Plant ' || g, 'tag-' || (g % 20) from generate_series(1, 100000) g
       union all select $1::int8 + 100001, 'The rare one', 'rare'`,
      [String(base)],
    );
    await t.database.query('analyze plants');
  });

  type PlanNode = Record<string, unknown> & { 'Node Type': string; Plans?: PlanNode[] };
  const flatten = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(flatten)];

  /**
   * The plans of the statements a page runs, as the service prepared them: one connection, so
   * that EXPLAIN EXECUTE finds the service's own prepared statements, with PostgreSQL choosing
   * a plan for the values (custom) or one for any value (generic, as after a few executions).
   */
  async function explainPages(mode: 'force_custom_plan' | 'force_generic_plan') {
    const handle = t.database.open({ poolMax: 1 });
    try {
      const repository = createPlantRepository(handle.db, batching);
      await repository.listPlants({ limit: 100, after: base + 500n, tag: undefined });
      await repository.listPlants({ limit: 100, after: base + 500n, tag: 'tag-7' });
      const run = async (text: string) => {
        const result = (await handle.db.execute(sql.raw(text))) as unknown;
        return (result as { rows: Record<string, unknown>[] }).rows;
      };
      const prepared = await run(
        "select name, parameter_types::text as types from pg_prepared_statements where name like 'plants_%page'",
      );
      expect(prepared).toStrictEqual(
        expect.arrayContaining([
          { name: 'plants_page', types: '{bigint,bigint}' },
          { name: 'plants_tagged_page', types: '{text,bigint,text,bigint}' },
        ]),
      );
      await run(`set plan_cache_mode = ${mode}`);
      const explain = async (execute: string) => {
        const [row] = (await run(`explain (analyze, buffers, format json) ${execute}`)) as [
          { 'QUERY PLAN': [{ Plan: PlanNode }] },
        ];
        return row['QUERY PLAN'][0].Plan;
      };
      return {
        all: await explain(`execute plants_page(${base + 50_001n}, 100)`),
        tagged: await explain(
          `execute plants_tagged_page('tag-7', ${base + 50_001n}, 'tag-7', 100)`,
        ),
        rare: await explain(`execute plants_tagged_page('rare', ${base}, 'rare', 100)`),
      };
    } finally {
      await handle.close();
    }
  }

  it.each(['force_custom_plan', 'force_generic_plan'] as const)(
    'is an index range scan that reads only the page, with %s',
    async (mode) => {
      const plans = await explainPages(mode);
      for (const [plan, index, rows] of [
        [plans.all, 'plants_pkey', 100],
        [plans.tagged, 'plants_tag_id_idx', 100],
        // One plant of 100,001 has this tag: the scan still reads only what the page holds.
        [plans.rare, 'plants_tag_id_idx', 1],
      ] as const) {
        expect(plan['Node Type']).toBe('Limit');
        const scan = plan.Plans?.[0] as PlanNode;
        expect(scan).toMatchObject({
          'Node Type': 'Index Scan',
          'Index Name': index,
          'Scan Direction': 'Forward',
          'Actual Rows': rows,
        });
        expect(scan['Rows Removed by Filter'] ?? 0).toBe(0);
        expect(flatten(plan).map((node) => node['Node Type'])).toStrictEqual([
          'Limit',
          'Index Scan',
        ]);
        // 100 rows of a 100,000-row table: a handful of index and heap pages, not a scan.
        expect(Number(scan['Shared Hit Blocks']) + Number(scan['Shared Read Blocks'])).toBeLessThan(
          40,
        );
      }
      // The scan starts at (tag, after) and stops after the tag's last plant.
      expect(plans.tagged.Plans?.[0]?.['Index Cond']).toMatch(
        /^\(\(ROW\(tag, id\) >= ROW\(.+\)\) AND \(tag <= .+\)\)$/,
      );
    },
  );
});
