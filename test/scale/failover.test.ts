import { isDeepStrictEqual } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, TOKEN_ENTRIES } from '../helpers/app.js';
import { queryUrl } from '../helpers/cluster.js';
import {
  type Attempt,
  checkDurability,
  expectedAnswer,
  formatReport,
  type Load,
  type SentPlant,
  type StoredRow,
  startLoad,
  summarize,
} from '../helpers/load.js';
import {
  createPatroniDatabase,
  type PatroniCluster,
  type PatroniNode,
  startPatroniCluster,
} from '../helpers/patroni.js';
import { type Replica, startReplica } from '../helpers/replica.js';

// Small, so that every wait the contract bounds is short.
const STATEMENT_TIMEOUT_MS = 2000;
// What an answer may take beyond the statement timeout: the service's own work, on busy cores.
const ANSWER_MARGIN_MS = 1000;
// Clients per replica, each sending one create after another.
const CLIENTS = 6;
// Clients per replica, each reading one settled plant after another.
const READERS = 2;
// Acknowledged creates to see before a scenario's event, and again after it.
const ACKNOWLEDGED_AROUND = 150;
// Reads answered before the leader is killed, so that reads are under way when it dies.
const READ_BEFORE_KILL = 50;
// How long the address leads to the read-only replica.
const READ_ONLY_MS = 3000;
// After the address changes, the time a request already under way may still take to finish.
const SETTLE_MS = 500;
// How soon after the address is right again creates must succeed.
const RECOVERY_MS = 5000;
// Well within the 30 s after which the service closes an idle connection anyway.
const DROPPED_WITHIN_MS = 5000;
// Patroni's ttl (7 s, or 20 s on later versions) and a few of its loops: a new leader by then.
const ELECTED_WITHIN_MS = 30_000;
// Generous bounds on every wait: outcomes are asserted, these only keep a broken run from hanging.
const WITHIN_MS = 60_000;

let cluster: PatroniCluster;
let databaseName: string;
const replicas: Replica[] = [];

beforeAll(async () => {
  cluster = await startPatroniCluster();
  databaseName = await createPatroniDatabase(cluster);
  const env = {
    DATABASE_URL: cluster.url(databaseName),
    // Every node, as the contract asks of an HA cluster: whichever is in recovery serves reads.
    DATABASE_REPLICA_URLS: cluster.nodes.map((node) => cluster.nodeUrl(node, databaseName)).join(),
    API_TOKENS: TOKEN_ENTRIES.join(','),
    DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    SHUTDOWN_DELAY_MS: '0',
  };
  // The service starts while Patroni copies the leader to the replicas.
  const [started] = await Promise.all([
    Promise.all(['r1', 'r2'].map((name) => startReplica({ name, env }))),
    cluster.runningReplicas(1, WITHIN_MS),
  ]);
  replicas.push(...started);
});

afterAll(async () => {
  for (const replica of replicas) {
    replica.process.child.kill('SIGKILL');
    await replica.process.exited;
  }
  cluster?.stop();
});

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

/** The rows a scenario's load may have written, read on `node`: its ids, from `firstId` on. */
function readRows(node: PatroniNode, firstId: bigint): Promise<StoredRow[]> {
  return queryUrl<StoredRow & Record<string, unknown>>(
    cluster.nodeUrl(node, databaseName),
    'select id::text as id, name, tag from plants where id >= $1 and id < $2',
    [String(firstId), String(firstId + 10n ** 9n)],
  );
}

/** Whether `answer` is a 200, or a 503 with Retry-After, within the statement timeout. */
function withinContract(answer: Attempt['answer']): boolean {
  if (answer.kind !== 'status') return false;
  if (answer.ms > STATEMENT_TIMEOUT_MS + ANSWER_MARGIN_MS) return false;
  if (answer.status === 200) return true;
  return answer.status === 503 && /^\d+$/.test(answer.retryAfter ?? '');
}

/**
 * Checks every answer against the table read on `node`: no acknowledged create lost, and each
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
    .filter(({ answer }) => !withinContract(answer))
    .map(({ plant, answer }) => ({ id: String(plant.id), answer }));
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
 * The service's connections HAProxy holds open to `node` once none are left, or after
 * `withinMs` however many there are.
 */
async function connectionsDropped(node: PatroniNode, withinMs: number): Promise<number> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const open = await cluster.sessions(node);
    if (open === 0 || Date.now() > deadline) return open;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function readiness(replica: Replica): Promise<{ status: number; message: unknown }> {
  const response = await fetch(`${replica.baseUrl}/readyz`, { signal: AbortSignal.timeout(5000) });
  const body = (await response.json()) as { message?: unknown };
  return { status: response.status, message: body.message };
}

/** One GET /plants/{id} of a settled plant, without a Consistency-Token, as an Attempt. */
async function readPlant(baseUrl: string, plant: SentPlant): Promise<Attempt> {
  const sentAt = performance.now();
  const ms = () => Math.round(performance.now() - sentAt);
  try {
    const response = await fetch(`${baseUrl}/plants/${plant.id}`, {
      headers: { authorization: `Bearer ${TOKEN}` },
      signal: AbortSignal.timeout(10_000),
    });
    const text = await response.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {}
    const answer = {
      kind: 'status' as const,
      status: response.status,
      body,
      retryAfter: response.headers.get('retry-after'),
      connectionClose: response.headers.get('connection') === 'close',
      ms: ms(),
    };
    return { plant, answer, sentAt };
  } catch (error) {
    const answer =
      (error as Error).name === 'TimeoutError'
        ? { kind: 'timeout' as const, ms: ms() }
        : { kind: 'network-error' as const, error: String(error), ms: ms() };
    return { plant, answer, sentAt };
  }
}

/** Reads through every replica, one read after another per reader, of `plants` at random. */
function startReads(plants: readonly SentPlant[]) {
  if (plants.length === 0) throw new Error('no settled plant to read');
  const reads: Attempt[] = [];
  let stopping = false;
  async function reader(baseUrl: string): Promise<void> {
    while (!stopping) {
      const plant = plants[Math.floor(Math.random() * plants.length)] as SentPlant;
      reads.push(await readPlant(baseUrl, plant));
    }
  }
  const running = Promise.all(
    replicas.flatMap(({ baseUrl }) => Array.from({ length: READERS }, () => reader(baseUrl))),
  );
  return {
    reads,
    async stop(): Promise<Attempt[]> {
      stopping = true;
      await running;
      return reads;
    },
  };
}

/** A read answered with anything but the stored plant, or outside the time it is allowed. */
function wrongRead({ plant, answer }: Attempt): boolean {
  if (answer.kind !== 'status' || answer.status !== 200) return true;
  if (answer.ms > STATEMENT_TIMEOUT_MS + ANSWER_MARGIN_MS) return true;
  return !isDeepStrictEqual(answer.body, { id: Number(plant.id), ...expectedAnswer(plant) });
}

/** The service's count of reads by where they went, from GET /metrics, when it has one. */
async function readsByServer(replica: Replica): Promise<string[]> {
  const text = await (await fetch(`${replica.baseUrl}/metrics`)).text();
  return text.split('\n').filter((line) => line.startsWith('plant_store_db_reads_total'));
}

describe('two replicas on a Patroni cluster (etcd, three nodes, synchronous mode) behind HAProxy', () => {
  it('answer 503 and not ready while the address leads to a read-only replica, and recover without a restart', async () => {
    const pids = replicas.map(({ process }) => process.child.pid);
    const leader = await cluster.waitForLeader({ withinMs: WITHIN_MS });
    const [standby] = await cluster.runningReplicas(1, WITHIN_MS);
    if (!standby) throw new Error('no replica runs');
    const firstId = 1_000_000_000n;
    const loads = startLoads(firstId);
    let switchedAt = 0;
    let backAt = 0;
    const probes: { at: number; replica: string; status: number; message: unknown }[] = [];
    let attempts: Attempt[];
    try {
      await moreAcknowledged(loads, ACKNOWLEDGED_AROUND, WITHIN_MS);
      // A demoted primary closes its sessions; a replica is what the address leads to next.
      await cluster.pin(standby, { dropConnections: true });
      switchedAt = performance.now();
      while (performance.now() - switchedAt < READ_ONLY_MS) {
        await new Promise((resolve) => setTimeout(resolve, 250));
        for (const replica of replicas) {
          const at = performance.now() - switchedAt;
          probes.push({ at, replica: replica.name, ...(await readiness(replica)) });
        }
      }
      // The connections to the replica stay open: the service must drop them, not reuse them.
      await cluster.unpinTo(leader, standby);
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
    await cluster.restoreChecks(leader);
    console.log(
      `[scale] read-only replica behind the address: creates meanwhile ${JSON.stringify(summarize(whileReadOnly))}, readiness ${JSON.stringify(countBy(probes.map(({ status }) => String(status))))}, first create acknowledged ${recoveredMs} ms after the address was right again, creates after it ${JSON.stringify(afterBack)}, the service's connections left on the replica ${leftOnStandby}`,
    );
    expectContractKept('read-only replica', attempts, await readRows(leader, firstId));
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
    // connection to the replica reused would answer it 503.
    expect(afterBack).toStrictEqual({ '200': expect.any(Number) });
    expect(leftOnStandby).toBe(0);
    expect(readyAgain).toStrictEqual(replicas.map(() => ({ status: 200, message: undefined })));
    expect(replicas.map(({ process }) => process.child.pid)).toStrictEqual(pids);
  });

  it("lose no acknowledged create, and keep answering reads, when the leader's node is killed and Patroni elects another", async () => {
    const pids = replicas.map(({ process }) => process.child.pid);
    const leader = await cluster.settled(WITHIN_MS);
    const firstId = 2_000_000_000n;
    const loads = startLoads(firstId);
    let killedAt = 0;
    let electedAt = 0;
    let newLeader: PatroniNode | undefined;
    let reading: ReturnType<typeof startReads> | undefined;
    let attempts: Attempt[];
    let reads: Attempt[];
    try {
      await moreAcknowledged(loads, ACKNOWLEDGED_AROUND, WITHIN_MS);
      // Settled: acknowledged before every replica had replayed the leader's WAL, so a read
      // without a token finds it on whichever node the service asks.
      const settledAt = performance.now();
      await cluster.replayed(leader, WITHIN_MS);
      const settled = loads
        .flatMap((load) => load.attempts)
        .filter(({ sentAt = 0, answer }) => {
          if (answer.kind !== 'status' || answer.status !== 200) return false;
          return sentAt + answer.ms <= settledAt;
        })
        .map(({ plant }) => plant);
      reading = startReads(settled);
      const deadline = Date.now() + WITHIN_MS;
      while (reading.reads.length < READ_BEFORE_KILL && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      killedAt = performance.now();
      cluster.kill(leader);
      newLeader = await cluster.waitForLeader({
        except: leader.name,
        withinMs: ELECTED_WITHIN_MS,
      });
      electedAt = performance.now();
      await moreAcknowledged(loads, ACKNOWLEDGED_AROUND, WITHIN_MS);
    } finally {
      [attempts, reads] = await Promise.all([
        Promise.all(loads.map((load) => load.stop())).then((all) => all.flat()),
        reading?.stop() ?? [],
      ]);
    }
    const beforeKill = attempts.filter(
      ({ sentAt = 0, answer }) =>
        answer.kind === 'status' && answer.status === 200 && sentAt + answer.ms < killedAt,
    );
    const lastBeforeKill = Math.max(
      ...beforeKill.map(({ sentAt = 0, answer }) => sentAt + answer.ms),
    );
    const writesBackMs = firstAcknowledgedAfter(attempts, killedAt);
    const afterElectionMs = firstAcknowledgedAfter(attempts, electedAt);
    const leaderless = reads.filter(
      ({ sentAt = 0, answer }) => sentAt >= killedAt && sentAt + answer.ms <= electedAt,
    );
    const badReads = reads.filter(wrongRead);
    const metrics = (await Promise.all(replicas.map(readsByServer))).flat();
    console.log(
      `[scale] Patroni leader ${leader.name} killed: ${newLeader?.name} elected and behind HAProxy ${((electedAt - killedAt) / 1000).toFixed(1)} s later, first create acknowledged ${(writesBackMs / 1000).toFixed(1)} s after the kill (${afterElectionMs} ms after the election; none acknowledged for ${((killedAt + writesBackMs - lastBeforeKill) / 1000).toFixed(1)} s); reads of settled plants ${JSON.stringify(summarize(reads))}, while there was no leader ${JSON.stringify(summarize(leaderless))}, slowest read ${Math.max(...reads.map(({ answer }) => answer.ms))} ms; ${metrics.join(', ') || 'no read metrics'}`,
    );
    if (!newLeader) throw new Error('no new leader');
    const report = expectContractKept(
      'Patroni leader killed',
      attempts,
      await readRows(newLeader, firstId),
    );
    expect(report.answers['503']).toBeGreaterThan(0);
    expect(afterElectionMs).toBeLessThanOrEqual(RECOVERY_MS);
    expect(leaderless.length).toBeGreaterThan(0);
    // Each with when it was sent, in ms after the kill.
    expect(
      badReads.slice(0, 10).map(({ plant, answer, sentAt = 0 }) => ({
        id: String(plant.id),
        sent: Math.round(sentAt - killedAt),
        answer,
      })),
    ).toStrictEqual([]);
    expect((await Promise.all(replicas.map(readiness))).map(({ status }) => status)).toStrictEqual(
      replicas.map(() => 200),
    );
    expect(replicas.map(({ process }) => process.child.pid)).toStrictEqual(pids);
  });
});
