import { defineConfig } from 'vitest/config';

// The scale-out suite, `npm run test:scale`: the service as several replicas behind HAProxy, on
// PgBouncer in transaction mode, on a throwaway PostgreSQL cluster (made by the global setup)
// that it restarts. Like the fault suite, a configuration of its own, files one after another.
export default defineConfig({
  test: {
    name: 'scale',
    include: ['test/scale/**/*.test.ts'],
    globalSetup: ['test/scale/global-setup.ts'],
    fileParallelism: false,
    testTimeout: 180_000,
    hookTimeout: 120_000,
  },
});
