import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { TOKEN_ENTRIES } from '../helpers/app.js';
import {
  createClusterDatabase,
  ensureClusterRunning,
  queryUrl,
  restartCluster,
  type StopMode,
} from '../helpers/cluster.js';
import {
  type Attempt,
  checkDurability,
  formatReport,
  notStoredAsSent,
  retryUnacknowledged,
  type StoredRow,
  startLoad,
} from '../helpers/load.js';
import {
  freePort,
  killIfRunning,
  type RunningServer,
  startServer,
  waitUntilReady,
} from '../helpers/process.js';

const cluster = inject('cluster');

// Clients sending creates at once, each with fresh ids, for the whole scenario.
const CLIENTS = 48;
// Acknowledged creates to see before the fault, and again after it (the service recovered).
const ACKNOWLEDGED_BEFORE = 300;
const ACKNOWLEDGED_AFTER = 300;
// Generous bounds on every wait: outcomes are asserted, these only keep a broken run from hanging.
const WITHIN_MS = 60_000;
// Above 2^53, so an id that went through a double would show as lost.
const FIRST_ID = 2n ** 53n + 1n;

interface Scenario {
  /** The service serving the load; a fault that stops it starts the next one. */
  service: RunningServer;
  /** Starts the service again, with the same configuration and address. */
  restart(): Promise<RunningServer>;
  /** The scenario's database. */
  databaseUrl: string;
}

async function readPlants(databaseUrl: string): Promise<StoredRow[]> {
  return queryUrl<StoredRow & Record<string, unknown>>(
    databaseUrl,
    'select id::text as id, name, tag from plants',
  );
}

/**
 * Runs the service on a new database of the cluster under a steady load of creates, injects
 * `fault` once writes flow, waits until the service is ready and acknowledging again, and checks
 * what every client was told against the table. Then retries every create that got no 200, as a
 * client would, and returns everything for the scenario's own assertions.
 */
async function underLoad(name: string, fault: (scenario: Scenario) => Promise<void>) {
  await ensureClusterRunning(cluster);
  const databaseUrl = await createClusterDatabase(cluster);
  const env = {
    DATABASE_URL: databaseUrl,
    API_TOKENS: TOKEN_ENTRIES.join(','),
    PORT: String(await freePort()),
    DB_CONNECT_TIMEOUT_MS: '1000',
    DB_STATEMENT_TIMEOUT_MS: '2000',
  };
  const scenario: Scenario = {
    databaseUrl,
    service: await startServer(env),
    async restart() {
      scenario.service = await startServer(env);
      return scenario.service;
    },
  };
  const { baseUrl } = scenario.service;
  try {
    const load = startLoad({ baseUrl, clients: CLIENTS, firstId: FIRST_ID });
    let attempts: Attempt[];
    try {
      await load.moreAcknowledged(ACKNOWLEDGED_BEFORE, WITHIN_MS);
      await fault(scenario);
      // Nobody helps the service here: it has to become ready and acknowledge writes by itself.
      await waitUntilReady(baseUrl, WITHIN_MS);
      await load.moreAcknowledged(ACKNOWLEDGED_AFTER, WITHIN_MS);
    } finally {
      attempts = await load.stop();
    }

    const report = checkDurability(attempts, await readPlants(databaseUrl));
    console.log(formatReport(name, report));
    const { retried, failures } = await retryUnacknowledged(baseUrl, attempts);
    const rowsAfterRetry = await readPlants(databaseUrl);
    const missing = notStoredAsSent(
      attempts.map(({ plant }) => plant),
      rowsAfterRetry,
    );
    console.log(
      `[faults] ${name}: retried=${retried} retriesNotAcknowledged=${failures.length} storedAfterRetry=${attempts.length - missing.length}/${attempts.length}`,
    );

    expect(report.examples).toStrictEqual([]);
    expect(report.lost).toBe(0);
    expect(report.verified).toBe(report.acknowledged);
    expect(report.corrupted).toBe(0);
    expect(report.phantoms).toBe(0);
    expect(report.wrongAnswers).toBe(0);
    // Every answer is a 200, or a 503 that tells the client when to retry; nothing hangs.
    const answered = Object.keys(report.answers);
    expect(answered.filter((key) => !['200', '503', 'network-error'].includes(key))).toStrictEqual(
      [],
    );
    for (const { answer } of attempts) {
      if (answer.kind === 'status' && answer.status === 503) {
        expect(answer.retryAfter).toMatch(/^\d+$/);
        expect(answer.body).toMatchObject({ error: 503, message: expect.any(String) });
      }
    }
    // A retry of the same create is safe: it stores the plant once, or answers the stored one.
    expect(failures).toStrictEqual([]);
    expect(missing).toStrictEqual([]);
    expect(rowsAfterRetry).toHaveLength(attempts.length);
    return { report, attempts };
  } finally {
    await killIfRunning(scenario.service);
  }
}

/** Waits until an INSERT into plants waits for a lock `blocker` holds. */
async function waitForBlockedInsert(blocker: pg.Client): Promise<void> {
  const deadline = Date.now() + WITHIN_MS;
  while (Date.now() < deadline) {
    const { rows } = await blocker.query<{ waiting: number }>(
      `select count(*)::int as waiting from pg_stat_activity
        where wait_event_type = 'Lock' and query ilike '%insert into%plants%'`,
    );
    if ((rows[0]?.waiting ?? 0) > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error('no INSERT came to wait for the lock');
}

describe('no acknowledged create is lost', () => {
  it('when the service is killed (SIGKILL) under load and started again', async () => {
    const { report } = await underLoad('service SIGKILL', async (scenario) => {
      scenario.service.child.kill('SIGKILL');
      expect(await scenario.service.exited).toBe('SIGKILL');
      await scenario.restart();
    });
    // The kill cut requests off mid-flight, so the scenario tested what it claims to.
    expect(report.answers['network-error']).toBeGreaterThan(0);
  });

  it.each<[string, StopMode]>([
    ['restarted (pg_ctl restart -m fast)', 'fast'],
    ['crashed and restarted (pg_ctl restart -m immediate, WAL recovery)', 'immediate'],
  ])('when PostgreSQL is %s under load', async (description, mode) => {
    const { report } = await underLoad(`PostgreSQL ${description}`, async (scenario) => {
      await restartCluster(cluster, mode);
      // The service rode it out: still the same process.
      expect(scenario.service.child.exitCode).toBeNull();
    });
    expect(report.answers['503']).toBeGreaterThan(0);
  });

  it('when the service is stopped (SIGTERM) under load: in-flight creates finish, then it starts again', async () => {
    let drained = 0;
    const { report, attempts } = await underLoad('service SIGTERM', async (scenario) => {
      // Between two batches every connection may be idle, and a stopping server closes idle
      // connections at once. Hold the INSERT on a table lock so creates are surely in flight.
      const blocker = new pg.Client({ connectionString: scenario.databaseUrl });
      await blocker.connect();
      try {
        await blocker.query('begin');
        await blocker.query('lock table plants in share mode');
        await waitForBlockedInsert(blocker);
        scenario.service.child.kill('SIGTERM');
        // The signal lands while the batch waits; then the INSERT proceeds and its creates are answered.
        await new Promise((resolve) => setTimeout(resolve, 300));
        await blocker.query('commit');
      } finally {
        await blocker.end();
      }
      expect(await scenario.service.exited).toBe(0);
      expect(scenario.service.stdout.some((line) => line.includes('"stopped"'))).toBe(true);
      await scenario.restart();
    });
    for (const { answer } of attempts) {
      if (answer.kind === 'status' && answer.status === 200 && answer.connectionClose) drained++;
    }
    // Creates in flight at SIGTERM were answered (200, closing the connection), not cut off.
    expect(drained).toBeGreaterThan(0);
    // The database never failed, so the only errors are the restarted service's 503s while it
    // opened its database (it listens first), which say so and when to retry.
    expect(
      Object.keys(report.answers).filter((key) => !['200', '503', 'network-error'].includes(key)),
    ).toStrictEqual([]);
    const unavailable = attempts.flatMap(({ answer }) =>
      answer.kind === 'status' && answer.status === 503 ? [answer.body] : [],
    );
    for (const body of unavailable) {
      expect(body).toStrictEqual({ error: 503, message: 'the service is starting; retry shortly' });
    }
  });
});
