// Property-based fuzzing of POST /plants: thousands of generated requests (arbitrary JSON, near
// misses of a NewPlant written as raw text, arbitrary bytes, Authorization and Content-Type
// headers), each judged by an oracle written from the contract (test/helpers/oracle.ts), never by
// the service's own code. On every answer: no 5xx, no hang, the Error shape on every non-2xx, a
// 200 only for a valid NewPlant with a valid token (and then the row holds exactly what was sent),
// and a 200 for every valid NewPlant whose id is new.
//
// FUZZ_SCALE multiplies the number of runs (FUZZ_SCALE=20 for a long local session); FUZZ_SEED
// and FUZZ_PATH replay a failure that fast-check reported. The embedded engine's run is a share
// of the server's when both run (see runOptions).
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import type { LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HASHED_TOKEN, startTestApp, type TestApp, TOKEN } from '../helpers/app.js';
import { onSecondEngine, testEngine } from '../helpers/database.js';
import {
  arbitraryBytes,
  authorizationHeader,
  bodyLimitPlantText,
  contentTypeHeader,
  type FuzzRequest,
  jsonRequest,
  jsonValueText,
  newPlantText,
  validPlantText,
} from '../helpers/fuzz-arbitraries.js';
import {
  decodeUtf8,
  isAuthorized,
  JSON_MAX_DEPTH,
  judgeBody,
  judgeContentType,
  type PlantRow,
  scanJson,
} from '../helpers/oracle.js';

const BODY_LIMIT = 65536;
const INJECT_TIMEOUT_MS = 10_000;
const TOKENS = [TOKEN, HASHED_TOKEN];

const scale = Number(process.env.FUZZ_SCALE ?? '1');
if (!(scale > 0)) throw new Error('FUZZ_SCALE must be a positive number');
const runs = (count: number) => Math.max(1, Math.round(count * scale));
// About 15 s per property at scale 1 on a slow machine; shrinking a failure takes longer.
const propertyTimeout = 120_000 * Math.max(1, scale);
const replay = process.env.FUZZ_SEED
  ? { seed: Number(process.env.FUZZ_SEED), path: process.env.FUZZ_PATH }
  : {};

type StoredPlant = { name: string; tag: string | null };

let t: TestApp;
/** The plants in the table, as this test expects them: what the answers said was stored. */
const expectedTable = new Map<bigint, StoredPlant>();
let closeReader: () => Promise<void> = async () => {};
let sent = 0;
const statuses = new Map<number, number>();
let requestCounter = 0;

// Text is read as its UTF-8 bytes: a driver's decoding (the embedded engine's drops a leading
// U+FEFF) must not stand between the test and what the table holds.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const fromHex = (hex: string) => utf8.decode(Buffer.from(hex, 'hex'));
const SELECT_ROWS = `select id::text as id,
         encode(convert_to(name, 'UTF8'), 'hex') as name,
         encode(convert_to(tag, 'UTF8'), 'hex') as tag
    from plants`;

/** The rows of `ids`, or of the whole table. */
let readRows: (ids?: bigint[]) => Promise<Map<bigint, StoredPlant>>;

beforeAll(async () => {
  t = await startTestApp({
    env: { BODY_LIMIT: String(BODY_LIMIT), JSON_MAX_DEPTH: String(JSON_MAX_DEPTH) },
  });
  type Row = { id: string; name: string; tag: string | null };
  let query: (text: string, values: unknown[]) => Promise<Row[]>;
  if (t.database.url) {
    // A connection of the test's own, beside the app's pool.
    const client = new pg.Client({ connectionString: t.database.url });
    await client.connect();
    query = async (text, values) => (await client.query<Row>(text, values)).rows;
    closeReader = () => client.end();
  } else {
    query = (text, values) => t.database.query<Row>(text, values);
  }
  readRows = async (ids) => {
    if (ids?.length === 0) return new Map();
    const rows = ids
      ? await query(`${SELECT_ROWS} where id = any($1::text::int8[])`, [`{${ids.join(',')}}`])
      : await query(SELECT_ROWS, []);
    return new Map(
      rows.map((row) => [
        BigInt(row.id),
        { name: fromHex(row.name), tag: row.tag === null ? null : fromHex(row.tag) },
      ]),
    );
  };
});

afterAll(async () => {
  const counts = [...statuses].sort(([a], [b]) => a - b).map(([s, n]) => `${s}: ${n}`);
  console.log(`fuzz (${testEngine()}): ${sent} requests; statuses ${counts.join(', ')}`);
  await closeReader();
  await t?.close();
});

// ---- sending ----

/** A distinct loopback address per request: no address piles up failed authentications. */
function nextRemoteAddress(): string {
  const n = ++requestCounter;
  return `127.${(n >> 16) & 0xff}.${(n >> 8) & 0xff}.${n & 0xff || 1}`;
}

async function send(request: FuzzRequest): Promise<LightMyRequestResponse> {
  const headers: Record<string, string> = {};
  if (request.authorization !== undefined) headers.authorization = request.authorization;
  if (request.contentType !== undefined) headers['content-type'] = request.contentType;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no answer within ${INJECT_TIMEOUT_MS} ms`)),
      INJECT_TIMEOUT_MS,
    );
  });
  try {
    const response = await Promise.race([
      t.app.inject({
        method: 'POST',
        url: '/plants',
        headers,
        payload: request.body,
        remoteAddress: nextRemoteAddress(),
      }),
      timeout,
    ]);
    sent++;
    statuses.set(response.statusCode, (statuses.get(response.statusCode) ?? 0) + 1);
    return response;
  } finally {
    clearTimeout(timer);
  }
}

// ---- what the contract says ----

interface Expectation {
  /** Answers allowed besides the outcome of a create. */
  statuses: number[];
  /** A valid NewPlant that may be created: 200 when its id is new or its content matches, else 409. */
  plant?: PlantRow;
}

function expectationFor(request: FuzzRequest): Expectation {
  // Authentication comes first, whatever the body or content type; a 429 may stand for a 401.
  if (!isAuthorized(request.authorization, TOKENS)) return { statuses: [401, 429] };
  const contentType = judgeContentType(request.contentType);
  const hasBody = request.body.length > 0;
  if (contentType === 'unsupported' || (contentType === 'missing' && hasBody)) {
    return { statuses: [415] };
  }
  const orUnsupported = contentType === 'unclear' ? [415] : [];
  if (request.body.length > BODY_LIMIT) return { statuses: [413, ...orUnsupported] };
  const verdict = judgeBody(request.body);
  if (!verdict.valid) return { statuses: [400, ...orUnsupported] };
  return { statuses: orUnsupported, plant: verdict.plant };
}

/** The oracle's JSON scanner must agree with JSON.parse on what is JSON, or it is the bug. */
function checkOracleAgainstJsonParse(body: Buffer): void {
  let text = decodeUtf8(body);
  if (text === undefined) return;
  if (text.startsWith('\uFEFF')) text = text.slice(1);
  let parses = true;
  try {
    JSON.parse(text);
  } catch {
    parses = false;
  }
  if ((scanJson(text) !== undefined) !== parses) {
    throw new Error(`the oracle and JSON.parse disagree on ${JSON.stringify(text)}`);
  }
}

// ---- checking the answers ----

/** JSON text with everything outside printable ASCII escaped, so that no character hides. */
function visible(value: string | undefined): string {
  if (value === undefined) return 'none';
  const shown = value.length > 2000 ? `${value.slice(0, 2000)}...` : value;
  return JSON.stringify(shown).replace(
    /[^\x20-\x7e]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

function describeExchange(request: FuzzRequest, response: LightMyRequestResponse): string {
  const text = decodeUtf8(request.body);
  return [
    `authorization: ${visible(request.authorization)}`,
    `content-type: ${visible(request.contentType)}`,
    text === undefined ? `body (hex): ${request.body.toString('hex')}` : `body: ${visible(text)}`,
    `-> ${response.statusCode} ${JSON.stringify(response.headers)} ${response.body.slice(0, 500)}`,
  ].join('\n  ');
}

const plantView = ({ name, tag }: StoredPlant) => (tag === null ? { name } : { name, tag });

/** The invariants every answer keeps, whatever was sent. */
function checkShape(response: LightMyRequestResponse, fail: (why: string) => never): void {
  const status = response.statusCode;
  if (status >= 500) fail('a 5xx');
  if (!response.headers['x-request-id']) fail('no x-request-id');
  if (!/^application\/json(;|$)/.test(String(response.headers['content-type']))) {
    fail('the content type is not application/json');
  }
  let body: unknown;
  try {
    body = JSON.parse(response.body);
  } catch {
    fail('the body is not JSON');
  }
  if (status === 200) return;
  if (status >= 200 && status < 300) fail('a 2xx other than 200');
  const error = body as Record<string, unknown>;
  if (
    typeof error !== 'object' ||
    error === null ||
    Object.keys(error).sort().join() !== 'error,message' ||
    error.error !== status ||
    typeof error.message !== 'string' ||
    error.message.trim() === '' ||
    /\n\s+at /.test(error.message)
  ) {
    fail('not the Error shape');
  }
  if (
    status === 401 &&
    !/^Bearer realm="plant-store"/.test(`${response.headers['www-authenticate']}`)
  ) {
    fail('a 401 without the Bearer challenge');
  }
  if (status === 429 && !/^\d+$/.test(`${response.headers['retry-after']}`)) {
    fail('a 429 without Retry-After');
  }
}

/**
 * Sends the requests at once (so creates are coalesced as in production) and checks every
 * answer against the oracle, then the rows of every id a create could have touched.
 */
async function exchange(requests: FuzzRequest[]): Promise<void> {
  for (const request of requests) checkOracleAgainstJsonParse(request.body);
  const expectations = requests.map(expectationFor);
  const responses = await Promise.all(requests.map(send));
  const failure =
    (index: number) =>
    (why: string): never => {
      const request = requests[index] as FuzzRequest;
      const response = responses[index] as LightMyRequestResponse;
      throw new Error(`${why}\n  ${describeExchange(request, response)}`);
    };

  const ids = [...new Set(expectations.flatMap((e) => (e.plant ? [e.plant.id] : [])))];
  const before = new Map(ids.map((id) => [id, expectedTable.get(id)]));
  const rows = await readRows(ids);
  // Whatever happens below, later runs judge replays by what the table really holds.
  for (const [id, row] of rows) expectedTable.set(id, row);

  responses.forEach((response, index) => {
    const fail: (why: string) => never = failure(index);
    checkShape(response, fail);
    const { statuses: allowed, plant } = expectations[index] as Expectation;
    const status = response.statusCode;
    if (allowed.includes(status)) return;
    if (!plant) fail(`expected ${allowed.join(' or ')}`);
    if (status !== 200 && status !== 409) {
      fail(
        `expected the outcome of a create${allowed.length ? ` or ${allowed.join(' or ')}` : ''}`,
      );
    }
    const row = rows.get(plant.id);
    if (!row) fail(`answered ${status}, but no row holds id ${plant.id}`);
    const matches = row.name === plant.name && row.tag === plant.tag;
    if (status === 409 && matches) fail(`answered 409, but the row holds what was sent`);
    if (status === 200) {
      if (!matches) fail(`answered 200, but the row holds ${JSON.stringify(row)}`);
      if (!isDeepStrictEqual(response.json(), plantView(row))) fail('the 200 body is not the row');
    }
  });

  // The rows of these ids: one that was there stays as it was; one that appeared holds the
  // content of a request answered 200.
  for (const id of ids) {
    const row = rows.get(id);
    const prior = before.get(id);
    if (prior) {
      if (!row || row.name !== prior.name || row.tag !== prior.tag) {
        throw new Error(
          `the row of id ${id} changed from ${JSON.stringify(prior)} to ${JSON.stringify(row)}`,
        );
      }
    } else if (row) {
      const created = expectations.some(
        ({ plant }, index) =>
          plant?.id === id &&
          plant.name === row.name &&
          plant.tag === row.tag &&
          responses[index]?.statusCode === 200,
      );
      if (!created) {
        throw new Error(`a row for id ${id} appeared with no 200 for it: ${JSON.stringify(row)}`);
      }
    }
  }
}

// The request handling before the database is the same code on either engine: when the server's
// run has fuzzed it in full, the embedded engine's run takes a share of each property, the
// largest of those whose valid plants reach its driver.
const runOptions = (numRuns: number, onSecond: number) => ({
  numRuns: runs(onSecondEngine() ? onSecond : numRuns),
  ...replay,
});
const batch = <T>(arbitrary: fc.Arbitrary<T>) =>
  fc.array(arbitrary, { minLength: 1, maxLength: 6 });

describe('fuzzing POST /plants', () => {
  it('answers arbitrary JSON values as the contract says', {
    timeout: propertyTimeout,
  }, async () => {
    const body = fc.oneof(
      jsonValueText,
      fc.jsonValue({ maxDepth: 40, depthSize: 'large' }).map((value) => JSON.stringify(value)),
      // Objects with the right keys and arbitrary values.
      fc
        .record(
          {
            id: fc.jsonValue({ maxDepth: 1 }),
            name: fc.jsonValue({ maxDepth: 1 }),
            tag: fc.jsonValue({ maxDepth: 1 }),
          },
          { requiredKeys: [] },
        )
        .map((value) => JSON.stringify(value)),
    );
    await fc.assert(
      fc.asyncProperty(batch(body), (bodies) => exchange(bodies.map((text) => jsonRequest(text)))),
      runOptions(600, 60),
    );
  });

  it('answers near misses of a NewPlant as the contract says', {
    timeout: propertyTimeout,
  }, async () => {
    await fc.assert(
      fc.asyncProperty(
        batch(
          fc.oneof(
            { weight: 20, arbitrary: newPlantText },
            { weight: 5, arbitrary: validPlantText },
            { weight: 1, arbitrary: bodyLimitPlantText(BODY_LIMIT) },
          ),
        ),
        (bodies) => exchange(bodies.map((text) => jsonRequest(text))),
      ),
      runOptions(2000, 500),
    );
  });

  it('answers arbitrary bytes sent as JSON as the contract says', {
    timeout: 180_000,
  }, async () => {
    await fc.assert(
      fc.asyncProperty(batch(arbitraryBytes), (bodies) => exchange(bodies.map(jsonRequest))),
      runOptions(800, 80),
    );
  });

  it('creates a plant only with a valid bearer token', { timeout: propertyTimeout }, async () => {
    const request = fc
      .tuple(authorizationHeader, fc.oneof(validPlantText, newPlantText))
      .map(([authorization, text]): FuzzRequest => ({ ...jsonRequest(text), authorization }));
    await fc.assert(fc.asyncProperty(batch(request), exchange), runOptions(1000, 100));
  });

  it('answers odd content types as the contract says', { timeout: propertyTimeout }, async () => {
    const body = fc.oneof(
      validPlantText,
      newPlantText,
      fc.constant(''),
      fc.uint8Array({ maxLength: 40 }).map((bytes) => Buffer.from(bytes)),
    );
    const request = fc
      .tuple(contentTypeHeader, body)
      .map(([contentType, text]): FuzzRequest => ({ ...jsonRequest(text), contentType }));
    await fc.assert(fc.asyncProperty(batch(request), exchange), runOptions(800, 80));
  });

  it('leaves in the table exactly the plants it answered 200 for', async () => {
    expect(await readRows()).toStrictEqual(expectedTable);
    expect(sent).toBeGreaterThan(1000);
  });
});
