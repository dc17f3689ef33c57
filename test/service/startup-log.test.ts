import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { WEBHOOK_SECRET } from '../helpers/receiver.js';

const messages = (t: TestApp) => t.logs.map((line) => JSON.parse(line) as { msg: string });

describe('the start-up log', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it('says that webhooks are off, and how to turn them on, when no URL is set', async () => {
    t = await startTestApp();
    expect(messages(t)).toContainEqual(
      expect.objectContaining({
        msg: 'webhooks: sending each new plant to the endpoints made through /webhooks/endpoints',
        webhookSubscribers: 0,
      }),
    );
  });

  it('names how many subscribers get new plants, by origin and path, never the query string', async () => {
    t = await startTestApp({
      webhooks: {
        urls: ['http://127.0.0.1:9/hooks?token=hunter2', 'https://receiver.example/plants'],
        secret: WEBHOOK_SECRET,
        timeoutMs: 1000,
        retrySchedule: [60],
        concurrency: 1,
      },
    });
    expect(messages(t)).toContainEqual(
      expect.objectContaining({
        msg: 'webhooks: sending each new plant to 2 URLs (http://127.0.0.1:9/hooks, https://receiver.example/plants) and to the endpoints made through /webhooks/endpoints',
        webhookSubscribers: 2,
      }),
    );
    expect(t.logs.join('\n')).not.toContain('hunter2');
  });

  const managementOff =
    'the webhook management API is off: no admin token is configured; set ADMIN_TOKENS (or ADMIN_TOKENS_FILE) to turn it on';
  const keysAsTheyAre = expect.stringMatching(
    /^WEBHOOK_ENCRYPTION_KEYS is not set: webhook signing keys and custom headers are stored in the database as they are/,
  );
  const said = (t: TestApp, level: string) =>
    t.logs.map((line) => JSON.parse(line)).filter((line) => line.level === level);

  it('says the management API is off, and how to turn it on, without admin tokens', async () => {
    t = await startTestApp();
    expect(said(t, 'info').map((line) => line.msg)).toContain(managementOff);
    // Nothing stores a key: no warning about keys at rest.
    expect(said(t, 'warn')).toStrictEqual([]);
  });

  it('warns that keys are stored as they are when the management API is on without WEBHOOK_ENCRYPTION_KEYS', async () => {
    t = await startTestApp({ env: { ADMIN_TOKENS: 'admin-token-3f1a' } });
    expect(said(t, 'info').map((line) => line.msg)).not.toContain(managementOff);
    expect(said(t, 'warn').map((line) => line.msg)).toStrictEqual([keysAsTheyAre]);
  });

  it('warns the same for WEBHOOK_URLS, whose key is stored too, and not once a key is set', async () => {
    t = await startTestApp({
      env: { WEBHOOK_URLS: 'https://receiver.example/plants', WEBHOOK_SECRET },
    });
    expect(said(t, 'warn').map((line) => line.msg)).toStrictEqual([keysAsTheyAre]);
    await t.close();
    t = await startTestApp({
      env: {
        ADMIN_TOKENS: 'admin-token-3f1a',
        WEBHOOK_ENCRYPTION_KEYS: `k1:${randomBytes(32).toString('base64')}`,
      },
    });
    expect(said(t, 'warn')).toStrictEqual([]);
  });
});
