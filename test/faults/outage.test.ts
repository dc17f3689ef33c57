import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { migratePostgres } from '../../src/db/postgres.js';
import { TOKEN_ENTRIES } from '../helpers/app.js';
import {
  createClusterDatabase,
  ensureClusterRunning,
  queryUrl,
  startCluster,
  stopCluster,
} from '../helpers/cluster.js';
import { type FaultProxy, startFaultProxy } from '../helpers/fault-proxy.js';
import {
  type Answer,
  type Attempt,
  checkDurability,
  expectedAnswer,
  plantFor,
  type StoredRow,
  sendPlant,
  startLoad,
} from '../helpers/load.js';
import { killIfRunning, type RunningServer, startServer } from '../helpers/process.js';

const cluster = inject('cluster');

// Low, so that an outage shows quickly; every answer must come within BOUND_MS of its request.
const CONNECT_TIMEOUT_MS = 1000;
const STATEMENT_TIMEOUT_MS = 1000;
const BOUND_MS = 3 * Math.max(CONNECT_TIMEOUT_MS, STATEMENT_TIMEOUT_MS);
// A client gives up here; an answer this late counts as a hang.
const CLIENT_TIMEOUT_MS = 15_000;
const RECOVERY_WITHIN_MS = 30_000;

const unavailable = { error: 503, message: 'the database is unavailable; retry later' };

function serviceEnv(databaseUrl: string, extra: Record<string, string> = {}) {
  return {
    DATABASE_URL: databaseUrl,
    API_TOKENS: TOKEN_ENTRIES.join(','),
    DB_CONNECT_TIMEOUT_MS: String(CONNECT_TIMEOUT_MS),
    DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    ...extra,
  };
}

interface ProbeAnswer {
  status: number | string;
  body: unknown;
  retryAfter: string | null;
  contentType: string | null;
  ms: number;
}

async function get(baseUrl: string, path: string): Promise<ProbeAnswer> {
  const started = performance.now();
  try {
    const response = await fetch(`${baseUrl}${path}`, {
      signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
    });
    return {
      status: response.status,
      body: await response.json(),
      retryAfter: response.headers.get('retry-after'),
      contentType: response.headers.get('content-type'),
      ms: performance.now() - started,
    };
  } catch (error) {
    return {
      status: (error as Error).name,
      body: undefined,
      retryAfter: null,
      contentType: null,
      ms: performance.now() - started,
    };
  }
}

/** Ids for the creates of one test, never reused. */
function idSource(first: bigint) {
  let next = first;
  return () => next++;
}

/**
 * What clients see during an outage: a burst of creates at once, a stream of creates one every
 * 100 ms (they queue behind each other in the service), and the two probes.
 */
async function duringOutage(baseUrl: string, nextId: () => bigint) {
  const attempts: Attempt[] = [];
  const send = async (id: bigint) => {
    const plant = plantFor(id);
    const answer = await sendPlant(baseUrl, plant, CLIENT_TIMEOUT_MS);
    attempts.push({ plant, answer });
  };
  const burst = Array.from({ length: 16 }, () => send(nextId()));
  const stream = (async () => {
    const sent: Promise<void>[] = [];
    for (let i = 0; i < 30; i++) {
      sent.push(send(nextId()));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await Promise.all(sent);
  })();
  const [readyz, healthz] = await Promise.all([
    get(baseUrl, '/readyz'),
    get(baseUrl, '/healthz'),
    ...burst,
    stream,
  ]);
  return { attempts, readyz, healthz };
}

function expectUnavailable({
  attempts,
  readyz,
  healthz,
}: Awaited<ReturnType<typeof duringOutage>>) {
  const slowest = Math.max(...attempts.map(({ answer }) => answer.ms));
  console.log(
    `[faults] outage: ${attempts.length} creates, slowest answer ${slowest} ms (bound ${BOUND_MS} ms); /readyz ${readyz.status} in ${Math.round(readyz.ms)} ms`,
  );
  for (const { answer } of attempts) {
    expect(answer).toMatchObject({
      kind: 'status',
      status: 503,
      body: unavailable,
      retryAfter: '2',
    });
    expect(answer.ms).toBeLessThan(BOUND_MS);
  }
  expect(readyz.contentType).toMatch(/^application\/json/);
  expect(readyz).toMatchObject({
    status: 503,
    body: { error: 503, message: 'the database is unavailable' },
    retryAfter: '2',
  });
  expect(readyz.ms).toBeLessThan(BOUND_MS);
  expect(healthz).toMatchObject({ status: 200, body: { status: 'ok' } });
}

/** Polls with fresh creates until one is acknowledged and /readyz answers 200. */
async function expectRecovery(service: RunningServer, nextId: () => bigint): Promise<Attempt[]> {
  const attempts: Attempt[] = [];
  const deadline = Date.now() + RECOVERY_WITHIN_MS;
  for (;;) {
    const plant = plantFor(nextId());
    const answer: Answer = await sendPlant(service.baseUrl, plant, CLIENT_TIMEOUT_MS);
    attempts.push({ plant, answer });
    if (answer.kind === 'status' && answer.status === 200) {
      expect(answer.body).toStrictEqual(expectedAnswer(plant));
      if ((await get(service.baseUrl, '/readyz')).status === 200) break;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `the service did not recover within ${RECOVERY_WITHIN_MS} ms; last answer ${JSON.stringify(answer)}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  // By itself: the process that saw the outage is the one that serves now.
  expect(service.child.exitCode).toBeNull();
  expect(service.child.signalCode).toBeNull();
  return attempts;
}

/** Every create answered 200 is stored as sent; the others are absent or stored as sent. */
async function expectConsistent(databaseUrl: string, attempts: Attempt[]) {
  const rows = await queryUrl<StoredRow & Record<string, unknown>>(
    databaseUrl,
    'select id::text as id, name, tag from plants',
  );
  const report = checkDurability(attempts, rows);
  expect(report.examples).toStrictEqual([]);
  expect(report.lost + report.corrupted + report.phantoms).toBe(0);
  expect(report.acknowledged).toBeGreaterThan(0);
}

async function stopService(service: RunningServer) {
  service.child.kill('SIGTERM');
  expect(await service.exited).toBe(0);
}

describe('while PostgreSQL is down', () => {
  let service: RunningServer | undefined;
  afterEach(async () => {
    if (service) await killIfRunning(service);
    service = undefined;
    // Started again even when the test failed while it was down: the next tests need it.
    await ensureClusterRunning(cluster);
  });

  it('creates answer 503 with Retry-After in bounded time, /readyz 503, /healthz 200; then the service recovers by itself', async () => {
    await ensureClusterRunning(cluster);
    const databaseUrl = await createClusterDatabase(cluster);
    service = await startServer(serviceEnv(databaseUrl));
    const nextId = idSource(1n);
    const attempts = await expectRecovery(service, nextId);

    await stopCluster(cluster, 'fast');
    const outage = await duringOutage(service.baseUrl, nextId);
    // A second round: the pool has no connection left to lose, every create must connect.
    const again = await duringOutage(service.baseUrl, nextId);
    expectUnavailable(outage);
    expectUnavailable(again);

    await startCluster(cluster);
    attempts.push(
      ...outage.attempts,
      ...again.attempts,
      ...(await expectRecovery(service, nextId)),
    );
    await expectConsistent(databaseUrl, attempts);
    await stopService(service);
  });
});

describe('when the database accepts connections but never answers', () => {
  let databaseUrl: string;
  let proxy: FaultProxy | undefined;
  let service: RunningServer | undefined;
  beforeEach(async () => {
    await ensureClusterRunning(cluster);
    databaseUrl = await createClusterDatabase(cluster);
    await migratePostgres(databaseUrl, 10_000);
  });
  afterEach(async () => {
    if (service) await killIfRunning(service);
    await proxy?.close();
    service = undefined;
    proxy = undefined;
  });

  it('from the start (a black hole): creates answer 503 in bounded time, never hang', async () => {
    proxy = await startFaultProxy({ host: '127.0.0.1', port: cluster.port }, 'blackhole');
    service = await startServer(serviceEnv(proxy.via(databaseUrl), { MIGRATE_ON_START: 'false' }));
    const nextId = idSource(1n);

    const outage = await duringOutage(service.baseUrl, nextId);
    expectUnavailable(outage);
    // The service did reach the black hole: the 503s come from its timeouts, not a refusal.
    expect(proxy.accepted()).toBeGreaterThan(0);

    proxy.forward();
    const recovered = await expectRecovery(service, nextId);
    await expectConsistent(databaseUrl, [...outage.attempts, ...recovered]);
    await stopService(service);
  });

  it('on connections that served a moment ago (the network goes silent): creates answer 503 in bounded time', async () => {
    proxy = await startFaultProxy({ host: '127.0.0.1', port: cluster.port }, 'forward');
    service = await startServer(serviceEnv(proxy.via(databaseUrl), { MIGRATE_ON_START: 'false' }));
    // Readiness checks at once fill the pool (DB_POOL_MAX, 10) with open connections, and load
    // from many clients uses several of them; then every one of them goes silent.
    const { baseUrl } = service;
    const probes = await Promise.all(Array.from({ length: 10 }, () => get(baseUrl, '/readyz')));
    for (const probe of probes) expect(probe.status).toBe(200);
    const load = startLoad({ baseUrl, clients: 32, firstId: 1n });
    await load.moreAcknowledged(200, 30_000).finally(() => load.stop());
    const before = [...load.attempts];
    const nextId = idSource(1_000_000n);

    proxy.blackhole();
    const outage = await duringOutage(service.baseUrl, nextId);
    expectUnavailable(outage);

    proxy.forward();
    const recovered = await expectRecovery(service, nextId);
    await expectConsistent(databaseUrl, [...before, ...outage.attempts, ...recovered]);
    await stopService(service);
  });
});
