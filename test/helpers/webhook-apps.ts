// What a webhook test file opens, the same way in every file: apps with admin tokens and short
// delivery settings, and receivers on loopback, each closed after the test that opened it.
import { afterEach } from 'vitest';
import { loadConfig } from '../../src/config.js';
import type { EngineTiming } from '../../src/webhooks/delivery/timing.js';
import type { WebhookSettings } from '../../src/webhooks/settings.js';
import { startTestApp, type TestApp, type TestAppOptions } from './app.js';
import { type Answer, type ReceivedRequest, startReceiver } from './receiver.js';

interface Closable {
  close(): Promise<void>;
}

/**
 * The apps and receivers of a file's tests. Each app takes `adminToken` as its admin token and
 * the production webhook settings but for a 1 s time limit, loopback allowed, then `defaults`
 * (the file's), then each call's overrides; `timing` replaces the engine's timings. Everything
 * opened is closed after its test, the last opened first.
 */
/**
 * The apps' attempt timeout: long enough for a receiver in this process to answer when CI runs
 * the tests at the lowest priority beside other suites; a test of timeouts sets its own.
 */
export const ATTEMPT_TIMEOUT_MS = 5000;

export function webhookApps(
  adminToken: string,
  defaults: Partial<WebhookSettings> = {},
  timing?: Partial<EngineTiming>,
) {
  const open: Closable[] = [];
  afterEach(async () => {
    for (const resource of open.splice(0).reverse()) await resource.close();
  });
  /** Closes `resource` after the test, with what the test opened. */
  const track = <T extends Closable>(resource: T): T => {
    open.push(resource);
    return resource;
  };
  return {
    track,
    async app(
      overrides: Partial<WebhookSettings> = {},
      options: Pick<TestAppOptions, 'replicaOf' | 'webhookTiming'> = {},
    ): Promise<TestApp> {
      return track(
        await startTestApp({
          env: { ADMIN_TOKENS: adminToken },
          webhooks: {
            ...loadConfig({ API_TOKENS: 'unused' }).webhooks,
            timeoutMs: ATTEMPT_TIMEOUT_MS,
            allowPrivateNetworks: true,
            ...defaults,
            ...overrides,
          },
          ...(timing && { webhookTiming: timing }),
          ...options,
        }),
      );
    },
    /** A receiver on loopback that verifies with `secret`, answering as `answer` says (200). */
    async receiver(secret: string, answer?: (request: ReceivedRequest, n: number) => Answer) {
      return track(await startReceiver(answer, { secret }));
    },
  };
}
