import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN_ENTRIES } from '../helpers/app.js';
import {
  type Cluster,
  createCluster,
  createClusterDatabase,
  createStandby,
  destroyCluster,
  promoteCluster,
  queryUrl,
  requireSynchronousStandby,
  stopCluster,
} from '../helpers/cluster.js';
import { startTcpProxy, type TcpProxy } from '../helpers/haproxy.js';
import {
  type Attempt,
  checkDurability,
  formatReport,
  type Load,
  type StoredRow,
  startLoad,
  summarize,
} from '../helpers/load.js';
import { type Replica, startReplica } from '../helpers/replica.js';

// Small, so that every wait the contract bounds is short.
const STATEMENT_TIMEOUT_MS = 2000;
// What an answer may take beyond the statement timeout: the service's own work, on busy cores.
const ANSWER_MARGIN_MS = 1000;
// Clients per replica, each sending one create after another.
const CLIENTS = 6;
// Acknowledged creates to see before a scenario's event, and again after it.
const ACKNOWLEDGED_AROUND = 150;
// How long the address leads to the read-only standby.
const READ_ONLY_MS = 5000;
// After the address changes, the time a request already under way may still take to finish.
const SETTLE_MS = 500;
// How soon after the address is right again creates must succeed. HAProxy holds a connection
// opened while its server was down for its 3 retries, a second apart, before closing it.
const RECOVERY_MS = 5000;
// Well within the 30 s after which the service closes an idle connection anyway.
const DROPPED_WITHIN_MS = 5000;
// Generous bounds on every wait: outcomes are asserted, these only keep a broken run from hanging.
const WITHIN_MS = 60_000;

let primary: Cluster;
let standby: Cluster;
let proxy: TcpProxy;
let databaseName: string;
const replicas: Replica[] = [];

beforeAll(async () => {
  primary = await createCluster();
  const databaseUrl = await createClusterDatabase(primary);
  databaseName = new URL(databaseUrl).pathname.slice(1);
  standby = await createStandby(primary);
  await requireSynchronousStandby(primary);
  proxy = await startTcpProxy(primary.port);
  const env = {
    DATABASE_URL: proxy.via(databaseUrl),
    API_TOKENS: TOKEN_ENTRIES.join(','),
    DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    SHUTDOWN_DELAY_MS: '0',
  };
  replicas.push(...(await Promise.all(['r1', 'r2'].map((name) => startReplica({ name, env })))));
});

afterAll(async () => {
  for (const replica of replicas) {
    replica.process.child.kill('SIGKILL');
    await replica.process.exited;
  }
  await proxy?.stop();
  if (standby) destroyCluster(standby);
  if (primary) destroyCluster(primary);
});

/** The database of the service on `cluster`, reached directly. */
function directUrl(cluster: Cluster): string {
  const url = new URL(cluster.url);
  url.pathname = `/${databaseName}`;
  return url.toString();
}

/** Creates through every replica at once, each replica's clients with ids of their own. */
function startLoads(firstId: bigint): Load[] {
  return replicas.map(({ baseUrl }, index) =>
    startLoad({
      baseUrl,
      clients: CLIENTS,
      firstId: firstId + BigInt(index) * 100_000_000n,
      timeoutMs: 10_000,
    }),
  );
}

/** Resolves once the loads together have `count` more acknowledged creates than now. */
async function moreAcknowledged(loads: Load[], count: number, withinMs: number): Promise<void> {
  const total = () => loads.reduce((sum, load) => sum + load.acknowledged(), 0);
  const target = total() + count;
  const deadline = Date.now() + withinMs;
  while (total() < target) {
    if (Date.now() > deadline) {
      const answers = summarize(loads.flatMap((load) => load.attempts));
      throw new Error(
        `fewer than ${count} more creates acknowledged within ${withinMs} ms: ${JSON.stringify(answers)}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The rows a scenario's load may have written on `cluster`: its ids, from `firstId` on. */
function readRows(cluster: Cluster, firstId: bigint): Promise<StoredRow[]> {
  return queryUrl<StoredRow & Record<string, unknown>>(
    directUrl(cluster),
    'select id::text as id, name, tag from plants where id >= $1 and id < $2',
    [String(firstId), String(firstId + 10n ** 9n)],
  );
}

/**
 * Checks every answer against the table on `cluster`: no acknowledged create lost, and each
 * answer a 200, or a 503 with Retry-After, within the statement timeout.
 */
function expectContractKept(name: string, attempts: readonly Attempt[], rows: StoredRow[]) {
  const report = checkDurability(attempts, rows);
  const slowest = Math.max(...attempts.map(({ answer }) => answer.ms));
  console.log(`${formatReport(name, report, 'scale')} slowest=${slowest}ms`);
  expect(report.examples).toStrictEqual([]);
  expect(report.lost).toBe(0);
  expect(report.verified).toBe(report.acknowledged);
  expect(report.corrupted).toBe(0);
  expect(report.phantoms).toBe(0);
  expect(report.wrongAnswers).toBe(0);
  const outOfContract = attempts
    .map(({ plant, answer }) => ({ id: String(plant.id), answer }))
    .filter(({ answer }) => {
      if (answer.kind !== 'status') return true;
      if (answer.ms > STATEMENT_TIMEOUT_MS + ANSWER_MARGIN_MS) return true;
      if (answer.status === 200) return false;
      return answer.status !== 503 || !/^\d+$/.test(answer.retryAfter ?? '');
    });
  expect(outOfContract.slice(0, 10)).toStrictEqual([]);
  return report;
}

/** How long after `since` the first create sent at or after it was acknowledged. */
function firstAcknowledgedAfter(attempts: readonly Attempt[], since: number): number {
  const times = attempts
    .filter(({ sentAt = 0, answer }) => sentAt >= since && answer.kind === 'status')
    .filter(({ answer }) => answer.kind === 'status' && answer.status === 200)
    .map(({ sentAt = 0, answer }) => sentAt + answer.ms - since);
  return Math.round(Math.min(...times));
}

function countBy(keys: readonly string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const key of keys) counts[key] = (counts[key] ?? 0) + 1;
  return counts;
}

/**
 * The service's connections to `cluster` once none are left, or after `withinMs` however many
 * there are: a server process ends a moment after its client closes the connection.
 */
async function connectionsDropped(cluster: Cluster, withinMs: number): Promise<number> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const [row] = await queryUrl<{ n: number }>(
      cluster.url,
      "select count(*)::int as n from pg_stat_activity where application_name = 'plant-store'",
    );
    if (row?.n === 0 || Date.now() > deadline) return row?.n ?? 0;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function readiness(replica: Replica): Promise<{ status: number; message: unknown }> {
  const response = await fetch(`${replica.baseUrl}/readyz`, { signal: AbortSignal.timeout(5000) });
  const body = (await response.json()) as { message?: unknown };
  return { status: response.status, message: body.message };
}

describe('two replicas on a primary with a synchronous standby, behind one TCP address (HAProxy)', () => {
  it('answer 503 and not ready while the address leads to the read-only standby, and recover without a restart', async () => {
    const pids = replicas.map(({ process }) => process.child.pid);
    const firstId = 1_000_000_000n;
    const loads = startLoads(firstId);
    let switchedAt = 0;
    let backAt = 0;
    const probes: { at: number; replica: string; status: number; message: unknown }[] = [];
    let attempts: Attempt[];
    try {
      await moreAcknowledged(loads, ACKNOWLEDGED_AROUND, WITHIN_MS);
      // A demoted primary closes its sessions; the standby is what the address leads to next.
      await proxy.pointAt(standby.port, { dropConnections: true });
      switchedAt = performance.now();
      while (performance.now() - switchedAt < READ_ONLY_MS) {
        await new Promise((resolve) => setTimeout(resolve, 250));
        for (const replica of replicas) {
          const at = performance.now() - switchedAt;
          probes.push({ at, replica: replica.name, ...(await readiness(replica)) });
        }
      }
      // The connections to the standby stay open: the service must drop them, not reuse them.
      await proxy.pointAt(primary.port, { dropConnections: false });
      backAt = performance.now();
      await moreAcknowledged(loads, ACKNOWLEDGED_AROUND, WITHIN_MS);
    } finally {
      attempts = (await Promise.all(loads.map((load) => load.stop()))).flat();
    }
    const whileReadOnly = attempts.filter(
      ({ sentAt = 0, answer }) =>
        sentAt >= switchedAt + SETTLE_MS &&
        sentAt + answer.ms <= backAt &&
        answer.kind === 'status',
    );
    const recoveredMs = firstAcknowledgedAfter(attempts, backAt);
    const readyAgain = await Promise.all(replicas.map(readiness));
    const afterBack = summarize(attempts.filter(({ sentAt = 0 }) => sentAt >= backAt));
    const leftOnStandby = await connectionsDropped(standby, DROPPED_WITHIN_MS);
    console.log(
      `[scale] read-only standby behind the address: creates meanwhile ${JSON.stringify(summarize(whileReadOnly))}, readiness ${JSON.stringify(countBy(probes.map(({ status }) => String(status))))}, first create acknowledged ${recoveredMs} ms after the address was right again, creates after it ${JSON.stringify(afterBack)}, the service's connections left on the standby ${leftOnStandby}`,
    );
    expectContractKept('read-only standby', attempts, await readRows(primary, firstId));
    expect(whileReadOnly.length).toBeGreaterThan(0);
    expect(summarize(whileReadOnly)).toStrictEqual({ '503': whileReadOnly.length });
    const settledProbes = probes.filter(({ at }) => at >= SETTLE_MS);
    expect(settledProbes.length).toBeGreaterThan(0);
    for (const probe of settledProbes) {
      expect(probe).toMatchObject({
        status: 503,
        message: 'the database is read-only; writes are refused until it accepts them again',
      });
    }
    expect(recoveredMs).toBeLessThanOrEqual(RECOVERY_MS);
    // Each create sent after the switch back gets a new connection, or one found writable: a
    // connection to the standby reused would answer it 503.
    expect(afterBack).toStrictEqual({ '200': expect.any(Number) });
    expect(leftOnStandby).toBe(0);
    expect(readyAgain).toStrictEqual(replicas.map(() => ({ status: 200, message: undefined })));
    expect(replicas.map(({ process }) => process.child.pid)).toStrictEqual(pids);
  });

  it('lose no acknowledged create when the primary crashes and the standby is promoted behind the address', async () => {
    const pids = replicas.map(({ process }) => process.child.pid);
    const firstId = 2_000_000_000n;
    const loads = startLoads(firstId);
    let crashedAt = 0;
    let switchedAt = 0;
    let attempts: Attempt[];
    try {
      await moreAcknowledged(loads, ACKNOWLEDGED_AROUND, WITHIN_MS);
      crashedAt = performance.now();
      await stopCluster(primary, 'immediate');
      await promoteCluster(standby);
      await proxy.pointAt(standby.port, { dropConnections: true });
      switchedAt = performance.now();
      await moreAcknowledged(loads, ACKNOWLEDGED_AROUND, WITHIN_MS);
    } finally {
      attempts = (await Promise.all(loads.map((load) => load.stop()))).flat();
    }
    const recoveredMs = firstAcknowledgedAfter(attempts, switchedAt);
    console.log(
      `[scale] primary crash and promotion: the address right again ${Math.round(switchedAt - crashedAt)} ms after the crash, first create acknowledged ${recoveredMs} ms later`,
    );
    const report = expectContractKept(
      'primary crash, standby promoted',
      attempts,
      await readRows(standby, firstId),
    );
    expect(report.answers['503']).toBeGreaterThan(0);
    expect(recoveredMs).toBeLessThanOrEqual(RECOVERY_MS);
    expect((await Promise.all(replicas.map(readiness))).map(({ status }) => status)).toStrictEqual(
      replicas.map(() => 200),
    );
    expect(replicas.map(({ process }) => process.child.pid)).toStrictEqual(pids);
  });
});
