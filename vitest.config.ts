import { connect } from 'node:net';
import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';
import { chromiumCandidate, chromiumPath } from './test/helpers/chromium.js';
import { promtoolPath } from './test/helpers/promtool.js';

/** Where a PostgreSQL server for the tests comes from, if anywhere. */
async function postgresServerSource(): Promise<string | undefined> {
  if (process.env.TEST_DATABASE_URL) return 'TEST_DATABASE_URL';
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return 'a testcontainers PostgreSQL';
  } catch {
    return undefined;
  }
}

/** True when something accepts TCP connections on 127.0.0.1:5432 within a moment. */
function localPostgresAnswers(): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(5432, '127.0.0.1');
    const done = (answers: boolean) => {
      socket.destroy();
      resolve(answers);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * Prints a notice once per run: vitest evaluates this file again for each project that extends
 * it, in the same process.
 */
function noticeOnce(key: string, line: string): void {
  const flag = `PLANT_STORE_NOTICE_${key}`;
  if (process.env[flag]) return;
  process.env[flag] = '1';
  console.log(line);
}

// test/ mirrors the folders of src/: a file's tests sit in the folder of the same name, those
// that need no database named *.unit.test.ts, the others run on PostgreSQL. The fault and scale
// suites have configurations of their own (vitest.faults.config.ts, vitest.scale.config.ts).
const unitTests = 'test/**/*.unit.test.ts';
const suitesOfTheirOwn = ['test/faults/**', 'test/scale/**'];

// Tests that need a server: several connections at once, separate processes, restarts.
const serverOnly = [
  'test/db/migrate.test.ts',
  'test/db/migrate-live.test.ts',
  'test/service/process.test.ts',
  'test/deploy/image-rehearsal.test.ts',
  'test/db/pooler.test.ts',
  'test/webhooks/delivery/process.test.ts',
  'test/webhooks/security/rekey.test.ts',
  'test/tracing/tracing.test.ts',
  'test/plants/create-path.test.ts',
  'test/db/read-only.test.ts',
  'test/db/exhaustion.test.ts',
  'test/service/log-secrets.test.ts',
  'test/plants/consistency-token.test.ts',
  // The service answers Consistency-Token only with DATABASE_REPLICA_URLS, which needs a server.
  'test/clients/typescript-client-consistency.test.ts',
];
// Tests of the embedded engine itself.
const embeddedOnly = ['test/db/embedded.test.ts'];
// Tests of what differs between the engines (driver, connection, SQL), run on both when there is
// a server; every other integration file tests the HTTP side, which is the same on either, and
// runs once, on the server.
const onBothEngines = [
  // Text stored and read back exactly as sent, through each engine's driver.
  'test/plants/plants.test.ts',
  // Rows the database refuses, and the edges of every limit, through each driver.
  'test/plants/validation.test.ts',
  // Random bodies through each driver, against the oracle.
  'test/plants/fuzz.test.ts',
  // Reads by id coalesced into one SELECT, with each driver's int64 and text.
  'test/plants/reads.test.ts',
  // Pages as range scans, their cursors through each driver.
  'test/plants/pages.test.ts',
  // Coalesced INSERTs and their conflicts on one connection (embedded) and on a pool (server).
  'test/plants/coalescing.test.ts',
  // Deletes racing creates: each engine's locking.
  'test/plants/deletes.test.ts',
  // The migrations and their history on each engine.
  'test/db/migration-history.test.ts',
  // The failed-authentication count's statements on each engine.
  'test/db/auth-failures.test.ts',
  // Readiness asks the engine, migrated or not.
  'test/http/health.test.ts',
  // The delivery engine's statements (events, fan-out, claims) on each engine.
  'test/webhooks/delivery/engine.test.ts',
  // Walks of endpoint and attempt pages across the digits of their keys: each engine's ordering.
  'test/webhooks/api/pages.test.ts',
  // Exact int64 ids from the client through each driver and back.
  'test/clients/typescript-client.test.ts',
  // The pool's gauges, which the embedded engine (one connection, no pool) does not have.
  'test/http/metrics.test.ts',
];

const server = await postgresServerSource();
const projects: TestProjectInlineConfiguration[] = [
  { extends: true, test: { name: 'unit', include: [unitTests], exclude: suitesOfTheirOwn } },
];
if (server) {
  projects.push({
    extends: true,
    test: {
      name: 'postgres',
      include: ['test/**/*.test.ts'],
      exclude: [unitTests, ...suitesOfTheirOwn, ...embeddedOnly],
      globalSetup: ['test/global-setup.ts'],
      provide: { engine: 'postgres', secondEngine: false },
    },
  });
} else {
  const hint = (await localPostgresAnswers())
    ? ' A PostgreSQL server answers on 127.0.0.1:5432: run them there with TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm test (each test file makes a database of its own).'
    : '';
  noticeOnce(
    'POSTGRES',
    `PostgreSQL server tests skipped: TEST_DATABASE_URL is not set and no container runtime answers; the integration tests run on the embedded engine (PGlite) only.${hint}`,
  );
}
if (chromiumPath === undefined) {
  noticeOnce(
    'CHROMIUM',
    `Browser test skipped: no Chromium at ${chromiumCandidate} (apt-get install chromium, or set CHROMIUM_PATH).`,
  );
}
if (promtoolPath === undefined) {
  noticeOnce(
    'PROMTOOL',
    'Alert rule tests skipped: no promtool on PATH (apt-get install prometheus).',
  );
}
projects.push({
  extends: true,
  test: {
    name: 'embedded',
    include: server ? [...embeddedOnly, ...onBothEngines] : ['test/**/*.test.ts'],
    exclude: [unitTests, ...suitesOfTheirOwn, ...serverOnly],
    globalSetup: ['test/global-setup.ts'],
    // With a server, the postgres project runs these files too: see secondEngine.
    provide: { engine: 'pglite', secondEngine: Boolean(server) },
  },
});

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 180_000,
    // Most integration files wait on PostgreSQL, child processes and sockets rather than on
    // this process's CPU: four at once keep two cores busy (vitest's default is cores - 1).
    maxWorkers: 4,
    // A worker runs file after file in one module graph: importing fastify, drizzle, the
    // drivers and the service for each file cost about 0.6 s of CPU per file. Every file
    // opens and closes what it uses (apps, databases, spies).
    isolate: false,
    projects,
  },
});
