import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TOKEN } from '../helpers/app.js';
import { run, startServer } from '../helpers/process.js';

const dataDir = mkdtempSync(join(tmpdir(), 'plant-store-data-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

const env = { API_TOKENS: TOKEN, DATA_DIR: dataDir };

function post(baseUrl: string, body: string) {
  return fetch(`${baseUrl}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body,
  });
}

describe('the service without DATABASE_URL', () => {
  it('runs on the embedded engine, says so and where the data lives, and keeps plants across a restart', async () => {
    const first = await startServer(env);
    try {
      const announcement = first.stdout.map((line) => JSON.parse(line)).find((line) => line.engine);
      expect(announcement).toMatchObject({ engine: 'pglite' });
      expect(announcement.msg).toContain(
        `the embedded PostgreSQL (PGlite) with its data in ${dataDir}`,
      );
      expect((await fetch(`${first.baseUrl}/readyz`)).status).toBe(200);
      const created = await post(
        first.baseUrl,
        '{"id":9223372036854775807,"name":"Kept","tag":"🌱"}',
      );
      expect(created.status).toBe(200);
    } finally {
      first.child.kill('SIGTERM');
      expect(await first.exited).toBe(0);
    }

    const second = await startServer(env);
    try {
      const replay = await post(
        second.baseUrl,
        '{"id":9223372036854775807,"name":"Kept","tag":"🌱"}',
      );
      expect(replay.status).toBe(200);
      expect(await replay.json()).toStrictEqual({ name: 'Kept', tag: '🌱' });
      const conflict = await post(second.baseUrl, '{"id":9223372036854775807,"name":"Other"}');
      expect(conflict.status).toBe(409);
    } finally {
      second.child.kill('SIGTERM');
      expect(await second.exited).toBe(0);
    }
  });

  it('refuses to open a data directory another running service holds', async () => {
    const first = await startServer(env);
    try {
      const second = run(process.execPath, ['dist/server.js'], {
        ...env,
        PORT: '0',
        HOST: '127.0.0.1',
      });
      expect(await second.exited).toBe(1);
      const fatal = second.stdout
        .map((line) => JSON.parse(line))
        .find((line) => line.level === 'fatal');
      expect(fatal?.err?.message).toBe(`${dataDir} is in use by process ${first.child.pid}`);
      expect((await fetch(`${first.baseUrl}/readyz`)).status).toBe(200);
    } finally {
      first.child.kill('SIGTERM');
      await first.exited;
    }
  });

  it('starts with `npm start` alone, and stops cleanly when npm gets SIGTERM', async () => {
    const otherDir = mkdtempSync(join(tmpdir(), 'plant-store-npm-start-'));
    try {
      const server = await startServer(
        { API_TOKENS: TOKEN, DATA_DIR: otherDir, HOME: process.env.HOME ?? '' },
        { command: 'npm', args: ['start'] },
      );
      expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
      expect((await post(server.baseUrl, '{"id":1,"name":"npm"}')).status).toBe(200);
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
      // The service itself got the signal: it shut down and released its data directory.
      expect(server.stdout.some((line) => line.includes('"msg":"stopped"'))).toBe(true);
      expect(existsSync(join(otherDir, 'plant-store.lock'))).toBe(false);
    } finally {
      rmSync(otherDir, { recursive: true, force: true });
    }
  });

  it('takes over the lock of a process that died without releasing it', async () => {
    writeFileSync(join(dataDir, 'plant-store.lock'), '2147483646');
    const server = await startServer(env);
    try {
      expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
    } finally {
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    }
  });
});
