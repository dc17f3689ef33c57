import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/** The promtool on PATH, if any. */
const onPath = (process.env.PATH ?? '')
  .split(delimiter)
  .map((folder) => join(folder, 'promtool'))
  .find((candidate) => existsSync(candidate));

/**
 * Prometheus' promtool (Debian's `prometheus` package), for the alert rules' tests; undefined
 * when it is missing, except in CI, which installs it: there a missing promtool fails the tests.
 */
export const promtoolPath: string | undefined = onPath ?? (process.env.CI ? 'promtool' : undefined);
