import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN } from '../helpers/app.js';
import {
  createScratchDatabase,
  type ScratchDatabase,
  serverUrlOf,
  testEngine,
} from '../helpers/database.js';
import { startServer } from '../helpers/process.js';

const DELAY_MS = 3000;

let database: ScratchDatabase | undefined;
let dataDir: string | undefined;
let databaseEnv: Record<string, string>;
beforeAll(async () => {
  if (testEngine() === 'postgres') {
    database = await createScratchDatabase({ migrated: false });
    databaseEnv = { DATABASE_URL: serverUrlOf(database) };
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'plant-store-delay-'));
    databaseEnv = { DATA_DIR: dataDir };
  }
});
afterAll(async () => {
  await database?.drop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

function post(baseUrl: string, id: number) {
  return fetch(`${baseUrl}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ id, name: 'Delayed' }),
  });
}

describe('SHUTDOWN_DELAY_MS', () => {
  it('on SIGTERM, /readyz answers 503 at once while creates are still served, then the service drains and exits 0', async () => {
    const server = await startServer({
      ...databaseEnv,
      API_TOKENS: TOKEN,
      SHUTDOWN_DELAY_MS: String(DELAY_MS),
    });
    expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
    const signalled = performance.now();
    let exitedAfterMs = Number.POSITIVE_INFINITY;
    const exited = server.exited.then((code) => {
      exitedAfterMs = performance.now() - signalled;
      return code;
    });
    server.child.kill('SIGTERM');

    // The signal and a request that follows it may reach the process in the same tick.
    let ready = await fetch(`${server.baseUrl}/readyz`);
    for (let tries = 0; ready.status === 200 && tries < 20; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      ready = await fetch(`${server.baseUrl}/readyz`);
    }
    expect(ready.status).toBe(503);
    expect(await ready.json()).toStrictEqual({
      error: 503,
      message: 'the service is shutting down',
    });
    const created = await post(server.baseUrl, 1);
    expect(created.status).toBe(200);
    expect(await created.json()).toStrictEqual({ name: 'Delayed' });
    // Keep-alive clients are told to reconnect, which takes them to another replica.
    expect(created.headers.get('connection')).toBe('close');
    expect((await fetch(`${server.baseUrl}/healthz`)).status).toBe(200);

    expect(await exited).toBe(0);
    expect(exitedAfterMs).toBeGreaterThanOrEqual(DELAY_MS);
    const messages = server.stdout.map((line) => JSON.parse(line).msg);
    expect(messages).toContain('shutting down: not ready, serving');
  });

  it('does not hold up SIGINT (Ctrl-C at a terminal)', async () => {
    const server = await startServer({
      ...databaseEnv,
      API_TOKENS: TOKEN,
      SHUTDOWN_DELAY_MS: '600000',
    });
    const signalled = performance.now();
    server.child.kill('SIGINT');
    expect(await server.exited).toBe(0);
    expect(performance.now() - signalled).toBeLessThan(20_000);
  });
});
