import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';

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

// Tests that need a server: several connections at once, separate processes, restarts.
const serverOnly = [
  'test/integration/migrate.test.ts',
  'test/integration/process.test.ts',
  'test/integration/image-rehearsal.test.ts',
];
// Tests of the embedded engine itself.
const embeddedOnly = ['test/integration/embedded.test.ts'];

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
  console.log(
    'PostgreSQL server tests skipped: TEST_DATABASE_URL is not set and no container runtime answers; the integration tests run on the embedded engine (PGlite) only.',
  );
}
projects.push({
  extends: true,
  test: {
    name: 'embedded',
    include: ['test/integration/**/*.test.ts'],
    exclude: serverOnly,
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
