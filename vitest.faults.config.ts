import { defineConfig } from 'vitest/config';

// The fault-injection suite, `npm run test:faults`. A configuration of its own rather than a
// project of vitest.config.ts: `vitest run` runs every project that configuration defines, so
// `npm test` stays fast and never needs initdb only if these tests are not defined there at
// all. They also live differently: one throwaway PostgreSQL cluster they own (made by the
// global setup), files one after another (they stop and crash that cluster), long timeouts.
export default defineConfig({
  test: {
    name: 'faults',
    include: ['test/faults/**/*.test.ts'],
    globalSetup: ['test/faults/global-setup.ts'],
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
