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
});
