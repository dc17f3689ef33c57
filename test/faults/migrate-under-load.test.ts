import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { OUTSIDE_TRANSACTION_MARKER } from '../../src/db/migrate.js';
import { migratePostgres } from '../../src/db/postgres.js';
import { TOKEN, TOKEN_ENTRIES } from '../helpers/app.js';
import { createClusterDatabase, ensureClusterRunning, queryUrl } from '../helpers/cluster.js';
import { type AddedMigration, migrationsWith, packageWith } from '../helpers/migrations.js';
import { killIfRunning, projectRoot, type RunningServer, startServer } from '../helpers/process.js';

// Migrations applied by the runner (`node dist/migrate.js`, as `npm run db:migrate` runs it) on
// a store of 200,000 plants that serves steady creates and reads through the built service:
// behind a transaction that holds plants for 8 s, as a concurrent index build, and as the
// expand/contract walk-through of docs/operations.md, whose SQL blocks it runs.

const cluster = inject('cluster');

const STORE_ROWS = 200_000;
const HOLD_MS = 8000;
// No request may wait this long while a migration waits for its lock.
const WAIT_BOUND_MS = 1500;
const CLIENT_TIMEOUT_MS = 15_000;
// Where the figures of a run go besides the console, when set (a results file to cite).
const RESULTS_FILE = process.env.MIGRATION_LOAD_RESULTS;

const reported: string[] = [];
function report(line: string): void {
  console.log(`[faults] ${line}`);
  reported.push(`- ${line}`);
}

interface Request {
  kind: 'create' | 'read' | 'new-release create';
  sentAt: number;
  ms: number;
  ok: boolean;
  status: number | string;
}

/**
 * Creates and reads in closed loops, each client one request after another: creates of fresh
 * ids and reads of the stored ones through the service, and, with `newRelease`, creates of
 * the next release (which fill name_key) straight in PostgreSQL.
 */
function startTraffic(
  baseUrl: string,
  databaseUrl: string,
  firstId: number,
  { creators = 3, readers = 3, newRelease = 0 } = {},
) {
  const requests: Request[] = [];
  let nextId = firstId;
  let stopping = false;
  const pool = new pg.Pool({ connectionString: databaseUrl, max: Math.max(1, newRelease) });
  async function timed(kind: Request['kind'], send: () => Promise<number | string>) {
    const sentAt = performance.now();
    let status: number | string;
    try {
      status = await send();
    } catch (error) {
      status = (error as { code?: string }).code ?? String(error);
    }
    requests.push({ kind, sentAt, ms: performance.now() - sentAt, ok: status === 200, status });
  }
  const create = async () => {
    while (!stopping) {
      const id = nextId++;
      await timed('create', async () => {
        const response = await fetch(`${baseUrl}/plants`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ id, name: `Created Plant ${id}` }),
          signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
        });
        await response.arrayBuffer();
        return response.status;
      });
    }
  };
  const read = async (reader: number) => {
    for (let n = reader; !stopping; n += 7919) {
      await timed('read', async () => {
        const response = await fetch(`${baseUrl}/plants/${(n % STORE_ROWS) + 1}`, {
          headers: { authorization: `Bearer ${TOKEN}` },
          signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
        });
        await response.arrayBuffer();
        return response.status;
      });
    }
  };
  const createAsNewRelease = async () => {
    while (!stopping) {
      const id = nextId++;
      await timed('new-release create', async () => {
        await pool.query('insert into plants (id, name, name_key) values ($1, $2, lower($2))', [
          id,
          `New Release Plant ${id}`,
        ]);
        return 200;
      });
    }
  };
  const running = Promise.all([
    ...Array.from({ length: creators }, create),
    ...Array.from({ length: readers }, (_, reader) => read(reader)),
    ...Array.from({ length: newRelease }, createAsNewRelease),
  ]);
  return {
    requests,
    async stop(): Promise<Request[]> {
      stopping = true;
      await running;
      await pool.end();
      return requests;
    },
  };
}

/** Max and 99th percentile of the waits of `requests`, and those that failed. */
function figures(requests: readonly Request[]) {
  const sorted = requests.map(({ ms }) => ms).sort((a, b) => a - b);
  const at = (q: number) =>
    Math.round(sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? 0);
  const failed = requests.filter(({ ok }) => !ok);
  return {
    requests: requests.length,
    maxMs: at(1),
    p99Ms: at(0.99),
    failures: failed.length,
    failed: failed.slice(0, 5).map(({ kind, status }) => `${kind} ${status}`),
  };
}

const sentBetween = (requests: readonly Request[], from: number, to: number) =>
  requests.filter(({ sentAt }) => sentAt >= from && sentAt <= to);

/** The ```sql blocks of the section of docs/operations.md on changing a live store, in order. */
function documentedSql(): string[] {
  const page = readFileSync(join(projectRoot, 'docs', 'operations.md'), 'utf8');
  const section = page.slice(
    page.indexOf('## Changing the schema of a live store'),
    page.indexOf('\n## ', page.indexOf('## Changing the schema of a live store') + 3),
  );
  return [...section.matchAll(/^( *)```sql\n([\s\S]*?)^\1```$/gm)].map(
    ([, indent = '', body = '']) =>
      body
        .split('\n')
        .map((line) => line.slice(indent.length))
        .join('\n')
        .trim(),
  );
}

describe('migrations on a store of 200,000 plants under load', () => {
  let url: string;
  let server: RunningServer;
  let serverVersion = '';
  // Each test's migrations come after those applied before it.
  const applied: AddedMigration[] = [];
  const cleanups: (() => void)[] = [];

  /** Runs `node dist/migrate.js` on a package copy whose migrations end with `added`. */
  function migrateWith(added: AddedMigration[]) {
    applied.push(...added);
    const copy = packageWith(applied);
    cleanups.push(copy.remove);
    return copy.migrate({ DATABASE_URL: url });
  }

  beforeAll(async () => {
    await ensureClusterRunning(cluster);
    url = await createClusterDatabase(cluster);
    await migratePostgres(url, 10_000);
    await queryUrl(
      url,
      `insert into plants (id, name, tag)
       select g, 'Stored Plant ' || g, case when g % 3 = 0 then 'aroid' end
       from generate_series(1, ${STORE_ROWS}) g`,
    );
    await queryUrl(url, 'analyze plants');
    const [version] = await queryUrl<{ server_version: string }>(url, 'show server_version');
    serverVersion = version?.server_version ?? '';
    server = await startServer({
      DATABASE_URL: url,
      API_TOKENS: TOKEN_ENTRIES.join(','),
      MIGRATE_ON_START: 'false',
    });
  });
  afterAll(async () => {
    if (server) await killIfRunning(server);
    for (const cleanup of cleanups) cleanup();
    if (RESULTS_FILE) {
      const title = `# Migrations under load, ${new Date().toISOString().slice(0, 10)}`;
      const command = `\`MIGRATION_LOAD_RESULTS=${RESULTS_FILE} npx vitest run --config vitest.faults.config.ts test/faults/migrate-under-load.test.ts\` (after \`npm run build\`), on Node.js ${process.version}, PostgreSQL ${serverVersion}`;
      writeFileSync(RESULTS_FILE, `${title}\n\n${command}\n\n${reported.join('\n')}\n`);
    }
  });

  it('applies an ALTER TABLE behind a transaction that holds plants for 8 s, and no request waits behind it', async () => {
    const traffic = startTraffic(server.baseUrl, url, 10_000_000);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const blocker = new pg.Client({ connectionString: url });
    await blocker.connect();
    const { rows } = await blocker.query<{ pid: number }>('select pg_backend_pid() as pid');
    await blocker.query('begin');
    await blocker.query('select count(*) from plants where id < 100');
    const holdStart = performance.now();
    const migrate = migrateWith([
      { tag: '0100_plants_note', sql: 'ALTER TABLE "plants" ADD COLUMN "note" text;' },
    ]);
    let migratedAt = 0;
    void migrate.exited.then(() => {
      migratedAt = performance.now();
    });
    // The scenario itself: another session holds plants for 8 s of real time.
    await new Promise((resolve) => setTimeout(resolve, HOLD_MS));
    const heldColumns = await queryUrl<{ column_name: string }>(
      url,
      "select column_name from information_schema.columns where table_name = 'plants' and column_name = 'note'",
    );
    await blocker.query('commit');
    const holdEnd = performance.now();
    await blocker.end();
    const exit = await migrate.exited;
    await new Promise((resolve) => setTimeout(resolve, 500));
    const requests = await traffic.stop();
    const whileHeld = figures(sentBetween(requests, holdStart, holdEnd));
    const waits = migrate.stdout.filter((line) => line.includes('"level":"warn"'));
    report(
      `ALTER TABLE behind a transaction holding plants for ${HOLD_MS / 1000} s on ${STORE_ROWS} plants: while held ${JSON.stringify(whileHeld)}; the migration gave way ${waits.length} times and was applied ${Math.round(migratedAt - holdEnd)} ms after the transaction ended; all requests ${JSON.stringify(figures(requests))}`,
    );
    expect(exit, migrate.stdout.join('\n')).toBe(0);
    expect(whileHeld.failures, JSON.stringify(whileHeld.failed)).toBe(0);
    expect(whileHeld.requests).toBeGreaterThan(100);
    expect(whileHeld.maxMs).toBeLessThan(WAIT_BOUND_MS);
    expect(figures(requests).failures).toBe(0);
    // Not applied while the transaction held plants; applied after it ended.
    expect(heldColumns).toStrictEqual([]);
    expect(migratedAt).toBeGreaterThan(holdEnd);
    const columns = await queryUrl(
      url,
      "select column_name from information_schema.columns where table_name = 'plants' and column_name = 'note'",
    );
    expect(columns).toStrictEqual([{ column_name: 'note' }]);
    expect(waits.length).toBeGreaterThan(0);
    expect(JSON.parse(waits[0] ?? '{}').blockers).toStrictEqual([
      expect.objectContaining({
        pid: rows[0]?.pid,
        state: 'idle in transaction',
        query: 'select count(*) from plants where id <',
      }),
    ]);
  }, 60_000);

  it('builds an index concurrently under the same load without blocking a write', async () => {
    const traffic = startTraffic(server.baseUrl, url, 20_000_000);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const started = performance.now();
    const migrate = migrateWith([
      {
        tag: '0101_plants_name_index',
        sql: `${OUTSIDE_TRANSACTION_MARKER}\nCREATE INDEX CONCURRENTLY IF NOT EXISTS "plants_name_idx" ON "plants" USING btree ("name");`,
      },
    ]);
    // Whether any statement of the service waits for a lock, asked every 20 ms meanwhile.
    let lockWaits = 0;
    let migrating = true;
    void migrate.exited.then(() => {
      migrating = false;
    });
    const watcher = new pg.Client({ connectionString: url });
    await watcher.connect();
    while (migrating) {
      const [row] = (
        await watcher.query<{ waiting: number }>(
          "select count(*)::int as waiting from pg_stat_activity where application_name = 'plant-store' and wait_event_type = 'Lock'",
        )
      ).rows;
      lockWaits += row?.waiting ?? 0;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await watcher.end();
    const finished = performance.now();
    const exit = await migrate.exited;
    const requests = await traffic.stop();
    const during = figures(sentBetween(requests, started, finished));
    const creates = figures(
      sentBetween(requests, started, finished).filter(({ kind }) => kind === 'create'),
    );
    report(
      `CREATE INDEX CONCURRENTLY on ${STORE_ROWS} plants in ${Math.round(finished - started)} ms: requests meanwhile ${JSON.stringify(during)}, creates ${JSON.stringify(creates)}, service statements seen waiting for a lock: ${lockWaits}`,
    );
    expect(exit, migrate.stdout.join('\n')).toBe(0);
    const index = await queryUrl(
      url,
      "select indisvalid as valid from pg_index where indexrelid = 'plants_name_idx'::regclass",
    );
    expect(index).toStrictEqual([{ valid: true }]);
    expect(lockWaits).toBe(0);
    expect(during.failures).toBe(0);
    expect(creates.requests).toBeGreaterThan(0);
    expect(during.maxMs).toBeLessThan(WAIT_BOUND_MS);
  }, 60_000);

  it('walks through expand and contract as docs/operations.md shows it, with both releases side by side', async () => {
    const [marker, expand, backfill, addCheck, validate, setNotNull] = documentedSql();
    expect(marker).toBe(OUTSIDE_TRANSACTION_MARKER);
    expect([expand, backfill, addCheck, validate, setNotNull].every(Boolean)).toBe(true);
    const release1 = [{ tag: '0102_plants_name_key', sql: `${expand}` }];
    const release2 = [
      { tag: '0103_plants_name_key_check', sql: `${addCheck}` },
      { tag: '0104_plants_name_key_valid', sql: `${validate}` },
      { tag: '0105_plants_name_key_not_null', sql: `${setNotNull}` },
    ];
    // The page's migrations pass the lint CI runs.
    const linted = migrationsWith([...applied, ...release1, ...release2]);
    cleanups.push(linted.remove);
    const lint = spawnSync(
      'bash',
      [join(projectRoot, 'scripts', 'lint-migrations.sh'), linted.folder],
      {
        encoding: 'utf8',
        env: { PATH: process.env.PATH ?? '', NO_COLOR: '1' },
      },
    );
    expect(lint.status, lint.stdout + lint.stderr).toBe(0);

    // Release 1 rolls out: its migration runs first while the old release (the service)
    // serves, then the new release writes too, side by side with the old one.
    const expandStart = performance.now();
    const oldRelease = startTraffic(server.baseUrl, url, 30_000_000);
    const expanding = migrateWith(release1);
    expect(await expanding.exited, expanding.stdout.join('\n')).toBe(0);
    const newRelease = startTraffic(server.baseUrl, url, 35_000_000, {
      creators: 0,
      readers: 0,
      newRelease: 2,
    });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const rollout = [...(await oldRelease.stop()), ...(await newRelease.stop())];
    const rolloutFigures = figures(rollout.filter(({ sentAt }) => sentAt >= expandStart));
    expect(rolloutFigures.failures, JSON.stringify(rolloutFigures.failed)).toBe(0);
    for (const kind of ['create', 'new-release create']) {
      expect(rollout.filter((request) => request.kind === kind).length).toBeGreaterThan(0);
    }

    // The old release is gone: the service reads, the new release writes, the backfill runs.
    const newOnly = startTraffic(server.baseUrl, url, 40_000_000, { creators: 0, newRelease: 2 });
    const backfillClient = new pg.Client({ connectionString: url });
    await backfillClient.connect();
    let batches = 0;
    for (let last: string | null = '-9223372036854775808'; last !== null; batches++) {
      const batch: pg.QueryResult<{ last: string | null }> = await backfillClient.query(
        `${backfill}`,
        [last],
      );
      last = batch.rows[0]?.last ?? null;
    }
    await backfillClient.end();

    // Release 2 constrains the column under the same load.
    const contractStart = performance.now();
    const contracting = migrateWith(release2);
    expect(await contracting.exited, contracting.stdout.join('\n')).toBe(0);
    const contractEnd = performance.now();
    const afterwards = await newOnly.stop();
    const contract = figures(sentBetween(afterwards, contractStart, contractEnd));
    report(
      `expand/contract on ${STORE_ROWS} plants: rollout ${JSON.stringify(rolloutFigures)}; backfill in ${batches} batches; contract ${JSON.stringify(contract)}; everything after the rollout ${JSON.stringify(figures(afterwards))}`,
    );
    expect(figures(afterwards).failures).toBe(0);
    expect(contract.maxMs).toBeLessThan(WAIT_BOUND_MS);
    const [column] = await queryUrl(
      url,
      "select is_nullable from information_schema.columns where table_name = 'plants' and column_name = 'name_key'",
    );
    expect(column).toStrictEqual({ is_nullable: 'NO' });
    const mismatched = await queryUrl(
      url,
      'select count(*)::int as count from plants where name_key is distinct from lower(name)',
    );
    expect(mismatched).toStrictEqual([{ count: 0 }]);
    expect(batches).toBeGreaterThan(STORE_ROWS / 5000);
  }, 120_000);
});
