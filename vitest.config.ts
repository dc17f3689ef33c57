import { connect } from 'node:net';
import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';
import { chromiumCandidate, chromiumPath } from './test/helpers/chromium.js';

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

// Tests that need a server: several connections at once, separate processes, restarts.
const serverOnly = [
  'test/integration/migrate.test.ts',
  'test/integration/process.test.ts',
  'test/integration/image-rehearsal.test.ts',
  'test/integration/pooler.test.ts',
  'test/integration/webhooks-process.test.ts',
  'test/integration/webhook-endpoint-rekey.test.ts',
  'test/integration/tracing.test.ts',
  'test/integration/create-path.test.ts',
  'test/integration/read-only.test.ts',
  'test/integration/exhaustion.test.ts',
  'test/integration/log-secrets.test.ts',
];
// Tests of the embedded engine itself.
const embeddedOnly = ['test/integration/embedded.test.ts'];
// Tests of the HTTP side alone, slow enough to run on one engine: the server when there is one.
const onOneEngine = [
  'test/integration/docs-browser.test.ts',
  'test/integration/readme.test.ts',
  'test/integration/typescript-client-generated.test.ts',
  'test/integration/webhook-endpoints.test.ts',
  'test/integration/webhook-endpoint-deliveries.test.ts',
];

const server = await postgresServerSource();
const projects: TestProjectInlineConfiguration[] = [
  { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
];
if (server) {
  projects.push({
    extends: true,
    test: {
      name: 'postgres',
      include: ['test/integration/**/*.test.ts'],
      exclude: embeddedOnly,
      globalSetup: ['test/global-setup.ts'],
      provide: { engine: 'postgres' },
      sequence: { groupOrder: 1 },
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
projects.push({
  extends: true,
  test: {
    name: 'embedded',
    include: ['test/integration/**/*.test.ts'],
    exclude: server ? [...serverOnly, ...onOneEngine] : serverOnly,
    provide: { engine: 'pglite' },
    // The real server first, then the embedded engine.
    sequence: { groupOrder: 2 },
  },
});

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 180_000,
    projects,
  },
});
