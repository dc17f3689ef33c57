import { existsSync } from 'node:fs';

/** Where the browser tests look for Chromium. */
export const chromiumCandidate = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

/**
 * Debian's Chromium (or CHROMIUM_PATH), for the tests that drive a real browser; undefined when
 * it is missing, except in CI, which installs it: there a missing browser fails the tests.
 */
export const chromiumPath: string | undefined =
  existsSync(chromiumCandidate) || process.env.CI ? chromiumCandidate : undefined;
