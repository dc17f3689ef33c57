// Reads from streaming replicas (PRODUCT.md, "Reads from replicas"), on real servers: a primary,
// replica A that replays at once, replica B that applies every commit 3 s late on purpose, and
// the built service in front of them. B is where a stale read would come from: a test that
// reads while B lacks what the read must see fails if the service ever answers from B.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, TOKEN_ENTRIES } from '../helpers/app.js';
import {
  type Cluster,
  createCluster,
  createClusterDatabase,
  createStandby,
  delayReplay,
  destroyCluster,
  queryUrl,
  startCluster,
  stopCluster,
  switchTimeline,
  waitForStreaming,
} from '../helpers/cluster.js';
import { startTcpRoundRobin, type TcpRoundRobin } from '../helpers/haproxy.js';
import {
  killIfRunning,
  type RunningServer,
  startServer,
  waitUntilReady,
} from '../helpers/process.js';

// Replica B's recovery_min_apply_delay: far longer than the lag a read without a token allows.
const APPLY_DELAY_MS = 3000;
// DB_REPLICA_MAX_LAG_MS, left at its default.
const MAX_LAG_MS = 1000;
// Slack for clocks and scheduling on busy cores, on either side of a bound.
const MARGIN_MS = 300;
// Bounds on every poll: outcomes are asserted, these only keep a broken run from hanging.
const WITHIN_MS = 15_000;
const CLIENT_TIMEOUT_MS = 10_000;

let primary: Cluster;
let replicaA: Cluster;
let replicaB: Cluster;
let databaseName: string;
let serviceEnv: Record<string, string>;
// Two processes of the service on the same servers, sharing nothing but them.
let s1: RunningServer;
let s2: RunningServer;
// Plants created before the tests, for the tests that need one every replica has.
let settled: Plant[] = [];

/** The service's database on `cluster`, reached directly. */
function databaseUrl(cluster: Cluster): string {
  const url = new URL(cluster.url);
  url.pathname = `/${databaseName}`;
  return url.toString();
}

/** How the service's metrics and log name a replica. */
const serverName = (cluster: Cluster) => `127.0.0.1:${cluster.port}`;

beforeAll(async () => {
  // On timeline 2: a token of timeline 1 is one from before a failover, as a client holding one
  // across a real failover would send it.
  primary = await createCluster();
  await switchTimeline(primary);
  databaseName = new URL(await createClusterDatabase(primary)).pathname.slice(1);
  [replicaA, replicaB] = await Promise.all([
    createStandby(primary, { name: 'replica_a' }),
    createStandby(primary, { name: 'replica_b' }),
  ]);
  await delayReplay(replicaB, `${APPLY_DELAY_MS}ms`);
  serviceEnv = {
    DATABASE_URL: databaseUrl(primary),
    DATABASE_REPLICA_URLS: [replicaA, replicaB].map(databaseUrl).join(','),
    API_TOKENS: TOKEN_ENTRIES.join(','),
  };
  // One after the other: both would migrate the same database at once.
  s1 = await startServer(serviceEnv);
  s2 = await startServer(serviceEnv);
  settled = [await create(s1, 'settled'), await create(s1, 'settled'), await create(s1, 'settled')];
});

afterAll(async () => {
  for (const service of [s1, s2]) if (service) await killIfRunning(service);
  for (const cluster of [replicaA, replicaB, primary]) if (cluster) destroyCluster(cluster);
});

interface Answer {
  status: number;
  body: unknown;
  /** The Consistency-Token response header. */
  token: string | null;
  retryAfter: string | null;
  contentType: string | null;
}

async function send(
  service: RunningServer,
  method: string,
  path: string,
  { token, body }: { token?: string | null; body?: object } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` };
  if (token != null) headers['consistency-token'] = token;
  if (body) headers['content-type'] = 'application/json';
  const response = await fetch(`${service.baseUrl}${path}`, {
    method,
    headers,
    ...(body && { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
  });
  const text = await response.text();
  return {
    status: response.status,
    body: text === '' ? undefined : JSON.parse(text),
    token: response.headers.get('consistency-token'),
    retryAfter: response.headers.get('retry-after'),
    contentType: response.headers.get('content-type'),
  };
}

interface Plant {
  id: number;
  name: string;
  tag: string;
  /** The Consistency-Token its create answered. */
  token: string;
  /** When its create was answered (Date.now()): it was committed by then. */
  at: number;
}

let lastId = 0;

/** Creates a plant with a fresh id through `service`; fails unless it is answered 200 with a token. */
async function create(service: RunningServer, tag: string): Promise<Plant> {
  const id = ++lastId;
  const name = `Plant ${id}`;
  const answer = await send(service, 'POST', '/plants', { body: { id, name, tag } });
  expect(answer).toMatchObject({ status: 200, body: { name, tag } });
  expectToken(answer.token);
  return { id, name, tag, token: answer.token, at: Date.now() };
}

const stored = ({ id, name, tag }: Plant) => ({ id, name, tag });

// Opaque to clients: printable ASCII, at most 128 characters.
const TOKEN_TEXT = /^[\x20-\x7e]{1,128}$/;

function expectToken(token: string | null): asserts token is string {
  expect(token).toMatch(TOKEN_TEXT);
}

// Tokens are opaque, but judging "at least as new" and forging a well-formed one need the form
// the contract gives them today: `t<timeline>-<WAL position as PostgreSQL writes it>`.
const TOKEN_FORM = /^t(\d+)-([0-9A-F]{1,8})\/([0-9A-F]{1,8})$/;

function parseToken(token: string): { timeline: number; position: bigint } {
  const match = TOKEN_FORM.exec(token);
  if (!match) throw new Error(`not a token of today's form t<timeline>-<hi>/<lo>: ${token}`);
  const [, timeline = '', hi = '', lo = ''] = match;
  return { timeline: Number(timeline), position: (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`) };
}

/** `answered` covers at least what `sent` covers: a later timeline, or a later position on it. */
function atLeastAsNew(answered: string, sent: string): boolean {
  const a = parseToken(answered);
  const s = parseToken(sent);
  return a.timeline > s.timeline || (a.timeline === s.timeline && a.position >= s.position);
}

function expectAnsweredToken(answer: Answer, sent: string | null | undefined) {
  expectToken(answer.token);
  if (sent != null)
    expect(atLeastAsNew(answer.token, sent), `${answer.token} < ${sent}`).toBe(true);
}

interface ReadCounts {
  replica: number;
  behind: number;
  timeline: number;
  fault: number;
  none: number;
}

/** plant_store_db_reads_total of `service`, by where the reads went and why. */
async function readCounts(service: RunningServer): Promise<ReadCounts> {
  const text = await (await fetch(`${service.baseUrl}/metrics`)).text();
  const counts: ReadCounts = { replica: 0, behind: 0, timeline: 0, fault: 0, none: 0 };
  for (const line of text.split('\n')) {
    const match = /^plant_store_db_reads_total\{([^}]*)\} (\S+)$/.exec(line);
    if (!match) continue;
    const labels = Object.fromEntries(
      [...(match[1] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map(([, name, value]) => [name, value]),
    );
    const key = labels.server === 'replica' ? 'replica' : labels.reason;
    if (key !== undefined && key in counts) counts[key as keyof ReadCounts] += Number(match[2]);
  }
  return counts;
}

function countsSince(before: ReadCounts, after: ReadCounts): ReadCounts {
  return {
    replica: after.replica - before.replica,
    behind: after.behind - before.behind,
    timeline: after.timeline - before.timeline,
    fault: after.fault - before.fault,
    none: after.none - before.none,
  };
}

/** plant_store_db_replica_lag_seconds of `replica`, as `service` sees it. */
async function lagSeconds(service: RunningServer, replica: Cluster): Promise<number | undefined> {
  const text = await (await fetch(`${service.baseUrl}/metrics`)).text();
  const line = text
    .split('\n')
    .find((candidate) =>
      candidate.startsWith(`plant_store_db_replica_lag_seconds{server="${serverName(replica)}"}`),
    );
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

/** Whether the plant `id` is in the service's database on `cluster`, asked directly. */
async function hasPlant(cluster: Cluster, id: number): Promise<boolean> {
  try {
    const rows = await queryUrl<{ found: boolean }>(
      databaseUrl(cluster),
      'select exists (select 1 from plants where id = $1) as found',
      [id],
    );
    return rows[0]?.found === true;
  } catch (error) {
    // B applies the migration that makes the table 3 s late too.
    if ((error as { code?: string }).code === '42P01') return false;
    throw error;
  }
}

/** Resolves with the time (Date.now()) at which `cluster` was first seen to have the plant. */
async function untilStored(cluster: Cluster, id: number): Promise<number> {
  const deadline = Date.now() + WITHIN_MS;
  while (!(await hasPlant(cluster, id))) {
    if (Date.now() > deadline) throw new Error(`${serverName(cluster)} never had plant ${id}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return Date.now();
}

/** The first line of `service`'s log about `replica` whose message says `event`, once it is there. */
async function rotationLine(
  service: RunningServer,
  replica: Cluster,
  event: 'left the rotation' | 'rejoined the rotation',
): Promise<Record<string, unknown>> {
  const deadline = Date.now() + WITHIN_MS;
  for (;;) {
    for (const line of service.stdout) {
      if (!line.includes(event)) continue;
      const entry = JSON.parse(line) as Record<string, unknown>;
      if (entry.server === serverName(replica) && String(entry.msg).includes(event)) return entry;
    }
    if (Date.now() > deadline) {
      throw new Error(`no log line says ${serverName(replica)} ${event}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** The sum of each service's reads since `before` (in the same order). */
async function readsSince(services: RunningServer[], before: ReadCounts[]): Promise<ReadCounts> {
  const after = await Promise.all(services.map(readCounts));
  return after
    .map((counts, index) => countsSince(before[index] as ReadCounts, counts))
    .reduce((sum, counts) => ({
      replica: sum.replica + counts.replica,
      behind: sum.behind + counts.behind,
      timeline: sum.timeline + counts.timeline,
      fault: sum.fault + counts.fault,
      none: sum.none + counts.none,
    }));
}

/**
 * Creates 10 plants, each through the next of `writers`, and reads each back with its token
 * through the next of `readers`: at once (by id, HEAD, in a page), then all of them again, many
 * at a time, for `rereadMs`, while A catches up with them and B, 3 s behind, has none of them.
 * Every answer must be the plant; resolves with where the reads went.
 */
async function expectReadYourWrites(
  writers: RunningServer[],
  readers: RunningServer[],
  tag: string,
  rereadMs: number,
): Promise<ReadCounts> {
  const before = await Promise.all(readers.map(readCounts));
  const plants: Plant[] = [];
  const reader = (index: number) => readers[index % readers.length] as RunningServer;
  for (let i = 0; i < 10; i++) {
    const plant = await create(writers[i % writers.length] as RunningServer, tag);
    plants.push(plant);
    const byId = await send(reader(i), 'GET', `/plants/${plant.id}`, { token: plant.token });
    expect(byId).toMatchObject({ status: 200, body: stored(plant) });
    expectAnsweredToken(byId, plant.token);
    const head = await send(reader(i), 'HEAD', `/plants/${plant.id}`, { token: plant.token });
    expect(head.status).toBe(200);
    expectAnsweredToken(head, plant.token);
    const page = await send(reader(i), 'GET', `/plants?after=${plant.id - 1}&limit=1`, {
      token: plant.token,
    });
    expect(page).toMatchObject({ status: 200, body: [stored(plant)] });
    expectAnsweredToken(page, plant.token);
  }
  const until = Date.now() + rereadMs;
  for (let pass = 0; Date.now() < until; pass++) {
    const answers = await Promise.all(
      plants.flatMap((plant, i) => [
        send(reader(pass + i), 'GET', `/plants/${plant.id}`, { token: plant.token }),
        send(reader(pass + i + 1), 'GET', `/plants?after=${plant.id - 1}&limit=1`, {
          token: plant.token,
        }),
      ]),
    );
    for (const [index, answer] of answers.entries()) {
      const plant = plants[Math.floor(index / 2)] as Plant;
      const what = `${index % 2 === 0 ? 'GET /plants/{id}' : 'a page'} of plant ${plant.id} with ${plant.token}, ${Date.now() - plant.at} ms after its create`;
      expect(answer, what).toMatchObject({
        status: 200,
        body: index % 2 === 0 ? stored(plant) : [stored(plant)],
      });
      expectAnsweredToken(answer, plant.token);
    }
  }
  // All of it while B lacked even the first plant: any read B answered would have missed it.
  expect(await hasPlant(replicaB, plants[0]?.id ?? 0)).toBe(false);
  return readsSince(readers, before);
}

interface MonotonicReport {
  seen: Set<number>;
  /** Plants seen once and missing from a later answer. */
  lost: string[];
  /** Answers with a token older than the one sent. */
  backwards: string[];
}

/**
 * A client that reads, alternating between s1 and s2, always with the newest token it holds,
 * until `done` and then twice more. `read` answers with its answers (all sent with the same
 * token), the plants they found, and the ids they asked for (all of them, for a page).
 */
async function monotonicClient(
  done: () => boolean,
  read: (
    reader: RunningServer,
    token: string | null,
    seen: Set<number>,
  ) => Promise<[Answer[], number[], number[]?]>,
): Promise<MonotonicReport> {
  const report: MonotonicReport = { seen: new Set(), lost: [], backwards: [] };
  let token: string | null = null;
  for (let reads = 0, after = 0; after < 2; reads++) {
    if (done()) after++;
    const sent = token;
    const [answers, found, asked] = await read(reads % 2 === 0 ? s1 : s2, sent, report.seen);
    for (const { token: answered } of answers) {
      expectToken(answered);
      if (sent !== null && !atLeastAsNew(answered, sent)) {
        report.backwards.push(`read ${reads}: sent ${sent}, answered ${answered}`);
      } else if (token === null || atLeastAsNew(answered, token)) token = answered;
    }
    const present = new Set(found);
    for (const id of asked ?? report.seen) {
      if (report.seen.has(id) && !present.has(id)) report.lost.push(`read ${reads}: plant ${id}`);
    }
    for (const id of found) report.seen.add(id);
    // A client's pace, not a flood: two cores run the servers, both service processes and this.
    await sleep(20);
  }
  return report;
}

describe('the topology under test', () => {
  it('replica A applies a commit at once, and replica B only about 3 s after the primary made it', async () => {
    const plant = await create(s1, 'topology');
    const [atA, atB] = await Promise.all([
      untilStored(replicaA, plant.id),
      untilStored(replicaB, plant.id),
    ]);
    expect(atA - plant.at).toBeLessThan(MAX_LAG_MS);
    expect(atB - plant.at).toBeGreaterThan(APPLY_DELAY_MS - MARGIN_MS);
  });
});

describe('with a Consistency-Token', () => {
  it('a read that sends the token of a create sees the plant at once, on either service process', async () => {
    // B caught up first: close enough for reads without a token, yet without any plant below.
    await untilStored(replicaB, settled.at(-1)?.id ?? 0);
    const reads = await expectReadYourWrites([s1, s2], [s2, s1], 'read-your-writes', 500);
    // Some were A's to answer: the replica path was taken, not only the primary's.
    expect(reads.replica).toBeGreaterThan(0);
    expect(reads.timeline + reads.fault + reads.none).toBe(0);
  });

  it('a create of an existing id with another name answers 409 with a token too', async () => {
    const [plant] = settled;
    if (!plant) throw new Error('no settled plant');
    const answer = await send(s2, 'POST', '/plants', {
      body: { id: plant.id, name: 'Another name' },
    });
    expect(answer).toMatchObject({ status: 409, body: { error: 409 } });
    expectToken(answer.token);
  });

  it('a read that sends the token of a delete no longer sees the plant, though replica B still has it', async () => {
    const plant = settled[1];
    if (!plant) throw new Error('no settled plant');
    await untilStored(replicaB, plant.id);
    const deleted = await send(s1, 'DELETE', `/plants/${plant.id}`);
    expect(deleted).toMatchObject({ status: 204, body: undefined });
    expectToken(deleted.token);
    for (let i = 0; i < 10; i++) {
      const reader = i % 2 === 0 ? s1 : s2;
      const byId = await send(reader, 'GET', `/plants/${plant.id}`, { token: deleted.token });
      expect(byId).toMatchObject({
        status: 404,
        body: { error: 404, message: `no plant has the id ${plant.id}` },
      });
      expectAnsweredToken(byId, deleted.token);
      const page = await send(reader, 'GET', `/plants?tag=${plant.tag}`, { token: deleted.token });
      expect(page.status).toBe(200);
      expect((page.body as Array<{ id: number }>).map(({ id }) => id)).not.toContain(plant.id);
      expectAnsweredToken(page, deleted.token);
    }
    // Every read above came while B still had the plant: answered from B, it would have shown.
    expect(await hasPlant(replicaB, plant.id)).toBe(true);
    const again = await send(s2, 'DELETE', `/plants/${plant.id}`);
    expect(again.status).toBe(404);
    expectToken(again.token);
  });

  it('a client that always sends the newest token it holds never sees a plant disappear, alternating between service processes while plants are created', async () => {
    const tag = 'monotonic';
    const created: number[] = [];
    let writing = true;
    // Longer than B's delay: B then has the positions of a client's first tokens, but not the
    // plants it saw since, and a token that failed to advance would let B answer.
    const writer = (async () => {
      for (let i = 0; i < 24; i++) {
        created.push((await create(i % 2 === 0 ? s1 : s2, tag)).id);
        await sleep(150);
      }
      writing = false;
    })();
    // Two clients, each on one kind of read only: each kind must answer a token of its own.
    const [pages, byId] = await Promise.all([
      monotonicClient(
        () => !writing,
        async (reader, token) => {
          const page = await send(reader, 'GET', `/plants?tag=${tag}&limit=1000`, { token });
          expect(page.status).toBe(200);
          return [[page], (page.body as Array<{ id: number }>).map(({ id }) => id)];
        },
      ),
      monotonicClient(
        () => !writing,
        async (reader, token, seen) => {
          // The newest plant it has seen, which must still be there, and the newest created.
          const ids = [...new Set([Math.max(0, ...seen), created.at(-1) ?? 0])];
          const answers = await Promise.all(
            ids.map((id) => send(reader, 'GET', `/plants/${id}`, { token })),
          );
          const found = ids.filter((_, index) => answers[index]?.status === 200);
          return [answers, found, ids];
        },
      ),
    ]);
    await writer;
    for (const client of [pages, byId]) {
      expect(client.lost).toStrictEqual([]);
      expect(client.backwards).toStrictEqual([]);
      expect(client.seen.size).toBeGreaterThan(0);
    }
  });
});

describe('without a Consistency-Token', () => {
  it('a read sees every plant created more than DB_REPLICA_MAX_LAG_MS ago and is served by replica A, not by B, which lacks it', async () => {
    const plant = await create(s1, 'no-token');
    // The bound of the contract is the point: wait past it, then read before B has the plant.
    await sleep(plant.at + MAX_LAG_MS + MARGIN_MS - Date.now());
    const before = await readCounts(s1);
    for (let i = 0; i < 5; i++) {
      const byId = await send(s1, 'GET', `/plants/${plant.id}`);
      expect(byId).toMatchObject({ status: 200, body: stored(plant) });
      expectToken(byId.token);
      const page = await send(s1, 'GET', `/plants?tag=${plant.tag}`);
      expect(page).toMatchObject({ status: 200, body: [stored(plant)] });
      expectToken(page.token);
    }
    const lagA = await lagSeconds(s1, replicaA);
    const lagB = await lagSeconds(s1, replicaB);
    const reads = countsSince(before, await readCounts(s1));
    // All of that while B still lacked the plant: a read B served would have been a 404.
    expect(await hasPlant(replicaB, plant.id)).toBe(false);
    // Served by A, or by the primary while this process had not yet seen A pass the bound
    // (its polls run late on busy cores); never by B, and never for a fault.
    expect(reads.replica + reads.behind).toBe(10);
    expect(reads).toMatchObject({ timeline: 0, fault: 0, none: 0 });
    expect(lagA).toBeLessThan(lagB as number);
    expect(lagB).toBeGreaterThan(MAX_LAG_MS / 1000);
  });
});

describe('tokens the service did not answer', () => {
  it.each([
    ["not of the service's form", 'garbage'],
    ['with a position that is not hexadecimal', 't2-0/XYZ'],
    ['longer than 128 characters', `t2-0/${'1'.repeat(130)}`],
  ])(
    'a Consistency-Token %s is a 400 in the Error shape that names the header',
    async (_, token) => {
      const [plant] = settled;
      if (!plant) throw new Error('no settled plant');
      for (const path of [`/plants/${plant.id}`, '/plants']) {
        const answer = await send(s1, 'GET', path, { token });
        expect(answer.status).toBe(400);
        expect(answer.contentType).toBe('application/json; charset=utf-8');
        expect(Object.keys(answer.body as object).sort()).toStrictEqual(['error', 'message']);
        expect(answer.body).toMatchObject({
          error: 400,
          message: expect.stringContaining('Consistency-Token'),
        });
      }
    },
  );

  it('a well-formed token of a position no server has reached is answered by the primary at once', async () => {
    const plant = settled[2];
    if (!plant) throw new Error('no settled plant');
    const { timeline } = parseToken(plant.token);
    const future = `t${timeline}-FFFF/0`;
    const before = await readCounts(s1);
    const byId = await send(s1, 'GET', `/plants/${plant.id}`, { token: future });
    expect(byId).toMatchObject({ status: 200, body: stored(plant) });
    expectAnsweredToken(byId, future);
    const after = countsSince(before, await readCounts(s1));
    expect(after).toStrictEqual({ replica: 0, behind: 1, timeline: 0, fault: 0, none: 0 });
  });

  it.each([
    ['before the failover (timeline 1)', 't1-0/3000060'],
    ['a timeline yet to come (timeline 9)', 't9-0/3000060'],
  ])('a token from %s is answered by the primary', async (_, token) => {
    const plant = settled[2];
    if (!plant) throw new Error('no settled plant');
    // Timeline 2: the primary was promoted once, and its tokens say so.
    expect(parseToken(plant.token).timeline).toBe(2);
    const before = await readCounts(s1);
    const byId = await send(s1, 'GET', `/plants/${plant.id}`, { token });
    expect(byId).toMatchObject({ status: 200, body: stored(plant) });
    expectToken(byId.token);
    const after = countsSince(before, await readCounts(s1));
    expect(after).toStrictEqual({ replica: 0, behind: 0, timeline: 1, fault: 0, none: 0 });
  });
});

describe('faults of a replica', () => {
  it('with replica A stopped, reads are answered by B or the primary; once A is back it rejoins the rotation', async () => {
    const [plant] = settled;
    if (!plant) throw new Error('no settled plant');
    await stopCluster(replicaA, 'fast');
    try {
      for (let i = 0; i < 6; i++) {
        const service = i % 2 === 0 ? s1 : s2;
        const fresh = await create(s1, 'replica-down');
        const withToken = await send(service, 'GET', `/plants/${fresh.id}`, {
          token: fresh.token,
        });
        expect(withToken).toMatchObject({ status: 200, body: stored(fresh) });
        expectAnsweredToken(withToken, fresh.token);
        const withoutToken = await send(service, 'GET', `/plants/${plant.id}`);
        expect(withoutToken).toMatchObject({ status: 200, body: stored(plant) });
      }
      for (const service of [s1, s2]) {
        const left = await rotationLine(service, replicaA, 'left the rotation');
        expect(left.reason).toEqual(expect.any(String));
      }
    } finally {
      await startCluster(replicaA);
    }
    await waitForStreaming(primary, 'replica_a');
    for (const service of [s1, s2]) {
      await rotationLine(service, replicaA, 'rejoined the rotation');
    }
    // Back in use: a fresh create's token only A can serve within 3 s, B being that far behind.
    const fresh = await create(s1, 'replica-back');
    await untilReadFromReplica(s1, fresh);
    expect(await hasPlant(replicaB, fresh.id)).toBe(false);
  });

  it.each([
    ['cancels the query (pg_cancel_backend)', 'pg_cancel_backend'],
    ['drops the connection during the query (pg_terminate_backend)', 'pg_terminate_backend'],
  ])('a read whose replica %s is answered by the primary', async (_, kill) => {
    const plant = await create(s1, 'cancelled');
    // Until s1 knows A has the plant (it asks ten times a second): then A is where its read goes.
    await untilReadFromReplica(s1, plant);
    // The read must still be running when its backend is killed: a lock taken on the primary,
    // replayed on the replicas, holds every read of plants until it is released.
    const locker = new pg.Client({ connectionString: databaseUrl(primary) });
    await locker.connect();
    let read: Promise<Answer> | undefined;
    const before = await readCounts(s1);
    try {
      await locker.query('begin');
      await locker.query('lock table plants in access exclusive mode');
      // The lock is in the WAL but not yet flushed, so not yet sent: a commit after it flushes it.
      await queryUrl(databaseUrl(primary), 'select txid_current()');
      await untilLocked(replicaA);
      // With the create's token: only A has it, B is 3 s behind.
      read = send(s1, 'GET', `/plants/${plant.id}`, { token: plant.token });
      const waiting = await untilWaiting([replicaA, replicaB, primary]);
      expect(serverName(waiting.cluster)).toBe(serverName(replicaA));
      const [killed] = await queryUrl<{ done: boolean }>(
        databaseUrl(replicaA),
        `select ${kill}($1) as done`,
        [waiting.pid],
      );
      expect(killed?.done).toBe(true);
      // Retried on the primary, where the lock still holds it.
      expect(serverName((await untilWaiting([primary])).cluster)).toBe(serverName(primary));
    } finally {
      await locker.query('rollback');
      await locker.end();
    }
    const answer = await read;
    expect(answer).toMatchObject({ status: 200, body: stored(plant) });
    expectAnsweredToken(answer, plant.token);
    expect(countsSince(before, await readCounts(s1))).toStrictEqual({
      replica: 0,
      behind: 0,
      timeline: 0,
      fault: 1,
      none: 0,
    });
  });
});

/** Reads `plant` with its token through `service` until a replica answers it. */
async function untilReadFromReplica(service: RunningServer, plant: Plant): Promise<void> {
  const deadline = Date.now() + WITHIN_MS;
  for (;;) {
    const before = await readCounts(service);
    const read = await send(service, 'GET', `/plants/${plant.id}`, { token: plant.token });
    expect(read).toMatchObject({ status: 200, body: stored(plant) });
    if (countsSince(before, await readCounts(service)).replica === 1) return;
    if (Date.now() > deadline) throw new Error(`no replica answers plant ${plant.id}`);
    await sleep(20);
  }
}

/** Resolves once the replayed lock on plants holds on `replica`. */
async function untilLocked(replica: Cluster): Promise<void> {
  const deadline = Date.now() + WITHIN_MS;
  for (;;) {
    const [row] = await queryUrl<{ locked: boolean }>(
      databaseUrl(replica),
      `select exists (select 1 from pg_locks
                       where relation = 'plants'::regclass
                         and mode = 'AccessExclusiveLock' and granted) as locked`,
    );
    if (row?.locked) return;
    if (Date.now() > deadline) throw new Error(`the lock never reached ${serverName(replica)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The first of `clusters` where a query of the service waits for a lock, and its backend. */
async function untilWaiting(clusters: Cluster[]): Promise<{ cluster: Cluster; pid: number }> {
  const deadline = Date.now() + WITHIN_MS;
  for (;;) {
    for (const cluster of clusters) {
      const [row] = await queryUrl<{ pid: number }>(
        databaseUrl(cluster),
        `select pid from pg_stat_activity
          where application_name like 'plant-store%' and wait_event_type = 'Lock'`,
      );
      if (row) return { cluster, pid: row.pid };
    }
    if (Date.now() > deadline) throw new Error('no query of the service waits for the lock');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('through one round-robin address over both replicas', () => {
  let balancer: TcpRoundRobin;
  let s3: RunningServer;
  beforeAll(async () => {
    balancer = await startTcpRoundRobin([replicaA.port, replicaB.port]);
    s3 = await startServer({
      ...serviceEnv,
      DATABASE_REPLICA_URLS: balancer.via(databaseUrl(replicaA)),
    });
  });
  afterAll(async () => {
    if (s3) await killIfRunning(s3);
    await balancer?.stop();
  });

  it('a read that sends the token of a create sees the plant at once, though half the connections lead to B', async () => {
    // Longer: each connection is to A or B in turn, and the reads must meet every mix of them.
    const reads = await expectReadYourWrites([s3], [s3], 'round-robin', 1500);
    console.log(`[faults] reads through one round-robin address: ${JSON.stringify(reads)}`);
    // The address was read from: a stale answer could have come back, had the service trusted it.
    expect(reads.replica + reads.fault).toBeGreaterThan(0);
  });

  it('a read without a token sees every plant created more than DB_REPLICA_MAX_LAG_MS ago', async () => {
    const plant = await create(s3, 'round-robin-no-token');
    await sleep(plant.at + MAX_LAG_MS + MARGIN_MS - Date.now());
    for (let i = 0; i < 5; i++) {
      const answers = await Promise.all([
        send(s3, 'GET', `/plants/${plant.id}`),
        send(s3, 'GET', `/plants?tag=${plant.tag}`),
      ]);
      expect(answers[0]).toMatchObject({ status: 200, body: stored(plant) });
      expect(answers[1]).toMatchObject({ status: 200, body: [stored(plant)] });
    }
    expect(await hasPlant(replicaB, plant.id)).toBe(false);
  });
});

describe('while the primary is down', () => {
  it('reads of settled plants are answered by the replicas, creates 503 with Retry-After, /readyz 503; then writes succeed again', async () => {
    const plant = settled[2];
    if (!plant) throw new Error('no settled plant');
    await Promise.all([untilStored(replicaA, plant.id), untilStored(replicaB, plant.id)]);
    const before = await Promise.all([readCounts(s1), readCounts(s2)]);
    await stopCluster(primary, 'fast');
    try {
      for (const service of [s1, s2]) {
        for (const token of [undefined, plant.token]) {
          const byId = await send(service, 'GET', `/plants/${plant.id}`, { token });
          expect(byId).toMatchObject({ status: 200, body: stored(plant) });
          expectAnsweredToken(byId, token);
          const page = await send(service, 'GET', `/plants?tag=${plant.tag}`, { token });
          expect(page.status).toBe(200);
          expect(page.body).toContainEqual(stored(plant));
        }
        const created = await send(service, 'POST', '/plants', {
          body: { id: ++lastId, name: 'While the primary is down' },
        });
        expect(created).toMatchObject({
          status: 503,
          body: { error: 503, message: 'the database is unavailable; retry later' },
          retryAfter: '2',
        });
        const readyz = await send(service, 'GET', '/readyz');
        expect(readyz).toMatchObject({ status: 503, body: { error: 503 } });
      }
      const reads = await Promise.all([readCounts(s1), readCounts(s2)]);
      for (const [index, after] of reads.entries()) {
        const since = countsSince(before[index] as ReadCounts, after);
        expect(since.replica).toBe(4);
      }
    } finally {
      await startCluster(primary);
    }
    for (const service of [s1, s2]) {
      const deadline = Date.now() + WITHIN_MS;
      for (;;) {
        const id = ++lastId;
        const created = await send(service, 'POST', '/plants', { body: { id, name: 'Back' } });
        if (created.status === 200) break;
        expect(created.status).toBe(503);
        if (Date.now() > deadline) throw new Error('creates did not succeed again');
        await sleep(100);
      }
      await waitUntilReady(service.baseUrl, WITHIN_MS);
    }
    await Promise.all([
      waitForStreaming(primary, 'replica_a'),
      waitForStreaming(primary, 'replica_b'),
    ]);
  });
});
