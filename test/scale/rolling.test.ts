import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { TOKEN, TOKEN_ENTRIES } from '../helpers/app.js';
import {
  createClusterDatabase,
  ensureClusterRunning,
  queryUrl,
  restartCluster,
} from '../helpers/cluster.js';
import { type LoadBalancer, startLoadBalancer } from '../helpers/haproxy.js';
import {
  type Attempt,
  checkDurability,
  expectedAnswer,
  formatReport,
  type Load,
  type SentPlant,
  type StoredRow,
  sendPlant,
  startLoad,
} from '../helpers/load.js';
import { throughPgBouncer } from '../helpers/pgbouncer.js';
import { type Replica, startReplica } from '../helpers/replica.js';

const cluster = inject('cluster');
const pgbouncer = inject('pgbouncer');

// Clients sending creates through the load balancer at once, each with fresh ids.
const CLIENTS = 32;
// Acknowledged creates to see before a scenario's event, and again after it.
const ACKNOWLEDGED_AROUND = 300;
// Long enough for HAProxy (a check every 300 ms, out after 2 failures) to take a replica out.
const SHUTDOWN_DELAY_MS = 3000;
const CHECKS = { checkIntervalMs: 300, fall: 2, rise: 2 };
// Generous bounds on every wait: outcomes are asserted, these only keep a broken run from hanging.
const WITHIN_MS = 60_000;

let databaseUrl: string;
let replicaEnv: Record<string, string>;
const replicas: Replica[] = [];
let balancer: LoadBalancer;

beforeAll(async () => {
  await ensureClusterRunning(cluster);
  databaseUrl = await createClusterDatabase(cluster);
  replicaEnv = {
    DATABASE_URL: throughPgBouncer(databaseUrl, pgbouncer),
    DB_POOLER: 'true',
    API_TOKENS: TOKEN_ENTRIES.join(','),
    SHUTDOWN_DELAY_MS: String(SHUTDOWN_DELAY_MS),
  };
  // Started together, so their migrations race through PgBouncer too.
  replicas.push(
    ...(await Promise.all(
      ['r1', 'r2', 'r3'].map((name) => startReplica({ name, env: replicaEnv })),
    )),
  );
  balancer = await startLoadBalancer({
    backends: replicas.map(({ name, port }) => ({ name, port })),
    ...CHECKS,
  });
  for (const { name } of replicas) await balancer.waitFor(name, 'UP', WITHIN_MS);
});

afterAll(async () => {
  await balancer?.stop();
  for (const replica of replicas) {
    replica.process.child.kill('SIGKILL');
    await replica.process.exited;
  }
});

async function restart(index: number): Promise<void> {
  const old = replicas[index] as Replica;
  replicas[index] = await startReplica({ name: old.name, port: old.port, env: replicaEnv });
  await balancer.waitFor(old.name, 'UP', WITHIN_MS);
}

/** The rows a scenario's load may have written: its ids, from `firstId` on. */
function readRows(firstId: bigint): Promise<StoredRow[]> {
  return queryUrl<StoredRow & Record<string, unknown>>(
    databaseUrl,
    'select id::text as id, name, tag from plants where id >= $1 and id < $2',
    [String(firstId), String(firstId + 10n ** 9n)],
  );
}

/**
 * Runs a steady load of creates through the load balancer, calls `event` once writes flow,
 * waits for as many acknowledged creates again, and checks every answer against the table.
 */
async function underLoad(name: string, firstId: bigint, event: (load: Load) => Promise<void>) {
  const load = startLoad({ baseUrl: balancer.baseUrl, clients: CLIENTS, firstId });
  let attempts: Attempt[];
  try {
    await load.moreAcknowledged(ACKNOWLEDGED_AROUND, WITHIN_MS);
    await event(load);
    await load.moreAcknowledged(ACKNOWLEDGED_AROUND, WITHIN_MS);
  } finally {
    attempts = await load.stop();
  }
  const report = checkDurability(attempts, await readRows(firstId));
  console.log(formatReport(name, report, 'scale'));
  expect(report.examples).toStrictEqual([]);
  expect(report.lost).toBe(0);
  expect(report.verified).toBe(report.acknowledged);
  expect(report.corrupted).toBe(0);
  expect(report.phantoms).toBe(0);
  expect(report.wrongAnswers).toBe(0);
  return { report, attempts };
}

/** Every kind of answer that was not a 200, with how many times it came: for failure messages. */
function failures(attempts: readonly Attempt[]): string[] {
  const counts = new Map<string, number>();
  for (const { answer } of attempts) {
    if (answer.kind === 'status' && answer.status === 200) continue;
    const what =
      answer.kind === 'status'
        ? `${answer.status} ${JSON.stringify(answer.body)}`
        : answer.kind === 'network-error'
          ? `network error ${answer.error}`
          : 'timeout';
    counts.set(what, (counts.get(what) ?? 0) + 1);
  }
  return [...counts].map(([what, count]) => `${count} × ${what}`);
}

describe('three replicas behind HAProxy, on PgBouncer in transaction mode', () => {
  it('keep the contract: exact ids, replays, conflicts, validation, authentication', async () => {
    const max = { id: 9223372036854775807n, name: 'Largest', tag: 'int64' };
    const answers = [
      await sendPlant(balancer.baseUrl, max, 10_000),
      await sendPlant(balancer.baseUrl, max, 10_000),
      await sendPlant(balancer.baseUrl, { ...max, name: 'Other' }, 10_000),
    ];
    expect(answers.map((a) => (a.kind === 'status' ? [a.status, a.body] : a))).toStrictEqual([
      [200, { name: 'Largest', tag: 'int64' }],
      [200, { name: 'Largest', tag: 'int64' }],
      [409, { error: 409, message: expect.any(String) }],
    ]);
    expect(
      await queryUrl(databaseUrl, 'select id::text, name from plants where id = $1', [
        String(max.id),
      ]),
    ).toStrictEqual([{ id: String(max.id), name: 'Largest' }]);
    const invalid = await fetch(`${balancer.baseUrl}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: '{"id":"5","name":"x"}',
    });
    expect(invalid.status).toBe(400);
    const anonymous = await fetch(`${balancer.baseUrl}/plants`, { method: 'POST' });
    expect(anonymous.status).toBe(401);
    expect((await fetch(`${balancer.baseUrl}/readyz`)).status).toBe(200);
  });

  it('restart one after another under load (SIGTERM, exit, start) with no error and no lost create', async () => {
    const takenOutWhileServing: boolean[] = [];
    const { report, attempts } = await underLoad(
      'rolling restart',
      1_000_000_000n,
      async (load) => {
        for (const [index, replica] of replicas.entries()) {
          replica.process.child.kill('SIGTERM');
          // Within the shutdown delay the load balancer sees /readyz fail and stops sending.
          await balancer.waitFor(replica.name, 'DOWN', SHUTDOWN_DELAY_MS);
          takenOutWhileServing.push(replica.process.child.exitCode === null);
          expect(await replica.process.exited).toBe(0);
          await restart(index);
          await load.moreAcknowledged(ACKNOWLEDGED_AROUND, WITHIN_MS);
        }
      },
    );
    expect(takenOutWhileServing).toStrictEqual([true, true, true]);
    // Every answer a 200: no 5xx, no connection error, no timeout.
    expect(failures(attempts)).toStrictEqual([]);
    expect(report.answers).toStrictEqual({ '200': report.requests });
  });

  it('lose only the requests in flight on a replica killed with SIGKILL, and nothing acknowledged', async () => {
    let killedAt = 0;
    let goneAt = 0;
    const { attempts } = await underLoad('one replica SIGKILL', 2_000_000_000n, async () => {
      const [victim] = replicas as [Replica];
      killedAt = performance.now();
      victim.process.child.kill('SIGKILL');
      expect(await victim.process.exited).toBe('SIGKILL');
      goneAt = performance.now();
      await balancer.waitFor(victim.name, 'DOWN', WITHIN_MS);
      await restart(0);
    });
    const failed = attempts.filter(
      ({ answer }) => !(answer.kind === 'status' && answer.status === 200),
    );
    const kinds = new Set(
      failed.map(({ answer }) => (answer.kind === 'network-error' ? answer.error : answer.kind)),
    );
    console.log(
      `[scale] one replica SIGKILL: failed=${failed.length} (${[...kinds].join(', ')}), the process gone ${Math.round(goneAt - killedAt)} ms after the kill`,
    );
    // Each failure was sent before the process was gone and answered after the kill: it was
    // in flight on the replica (or on its way there) when it died.
    for (const { sentAt = Number.NaN, answer } of failed) {
      expect(sentAt).toBeLessThanOrEqual(goneAt);
      expect(sentAt + answer.ms).toBeGreaterThanOrEqual(killedAt - 1);
    }
    expect(failed.length).toBeLessThanOrEqual(CLIENTS);
  });

  it('answer 503 while PostgreSQL restarts behind PgBouncer, and recover without a restart', async () => {
    const pids = replicas.map(({ process }) => process.child.pid);
    const { report, attempts } = await underLoad(
      'PostgreSQL restart behind PgBouncer',
      3_000_000_000n,
      async () => {
        await restartCluster(cluster, 'fast');
      },
    );
    expect(replicas.map(({ process }) => process.child.pid)).toStrictEqual(pids);
    for (const { process } of replicas) expect(process.child.exitCode).toBeNull();
    expect(
      Object.keys(report.answers).filter((key) => key !== '200' && key !== '503'),
    ).toStrictEqual([]);
    expect(report.answers['503']).toBeGreaterThan(0);
    for (const { answer } of attempts) {
      if (answer.kind === 'status' && answer.status === 503) {
        expect(answer.retryAfter).toMatch(/^\d+$/);
        expect(answer.body).toMatchObject({ error: 503, message: expect.any(String) });
      }
    }
  });

  it('store one version of an id created concurrently through different replicas: 200 for it, 409 for the others', async () => {
    const ids = Array.from({ length: 20 }, (_, n) => 4_000_000_000n + BigInt(n));
    const variants = (id: bigint): SentPlant[] => [
      { id, name: 'Variant A', tag: 'a' },
      { id, name: 'Variant B' },
      { id, name: 'Variant C', tag: '' },
    ];
    // Twelve creates per id, the three variants spread over the three replicas.
    const sends = ids.flatMap((id) =>
      Array.from({ length: 12 }, (_, n) => ({
        plant: variants(id)[n % 3] as SentPlant,
        replica: replicas[(n + Math.floor(n / 3)) % 3] as Replica,
      })),
    );
    const answers = await Promise.all(
      sends.map(({ plant, replica }) => sendPlant(replica.baseUrl, plant, 15_000)),
    );
    const rows = await queryUrl<{ id: string; name: string; tag: string | null }>(
      databaseUrl,
      'select id::text as id, name, tag from plants where id >= $1 and id < $2',
      [String(ids[0]), String(4_000_000_000n + 1000n)],
    );
    expect(rows).toHaveLength(ids.length);
    const stored = new Map(rows.map((row) => [row.id, row]));
    const counts: Record<string, number> = {};
    sends.forEach(({ plant }, index) => {
      const answer = answers[index];
      const row = stored.get(String(plant.id));
      const matches = row?.name === plant.name && row?.tag === (plant.tag ?? null);
      const status = answer?.kind === 'status' ? answer.status : answer?.kind;
      counts[String(status)] = (counts[String(status)] ?? 0) + 1;
      if (matches) {
        expect(answer).toMatchObject({ status: 200, body: expectedAnswer(plant) });
      } else {
        expect(answer).toMatchObject({ status: 409, body: { error: 409 } });
      }
    });
    console.log(
      `[scale] same id through different replicas: ids=${ids.length} requests=${sends.length} rows=${rows.length} answers=${JSON.stringify(counts)}`,
    );
  });
});
