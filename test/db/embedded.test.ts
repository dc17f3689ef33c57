import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { shippedMigrationNames } from '../../src/db/migrate.js';
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
      const lines = first.stdout.map((line) => JSON.parse(line));
      const announcement = lines.find((line) => line.engine);
      expect(announcement).toMatchObject({ engine: 'pglite' });
      expect(announcement.msg).toContain(
        `creating the embedded PostgreSQL (PGlite) with its data in ${dataDir}`,
      );
      expect(announcement.msg).toContain('for trying things out');
      expect(lines.find((line) => line.migrations)?.migrations).toStrictEqual(
        shippedMigrationNames(),
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
      const lines = second.stdout.map((line) => JSON.parse(line));
      expect(lines.find((line) => line.engine)?.msg).toContain(
        `opening the embedded PostgreSQL (PGlite) with its data in ${dataDir}`,
      );
      expect(lines.find((line) => line.migrations)).toMatchObject({
        migrations: [],
        msg: 'the schema of the database is up to date: no migration to apply',
      });
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

  it('refuses a data directory another running service holds, in one plain line', async () => {
    const first = await startServer(env);
    try {
      const second = run(process.execPath, ['dist/server.js'], {
        ...env,
        PORT: '0',
        HOST: '127.0.0.1',
      });
      expect(await second.exited).toBe(1);
      expect(second.stderr.filter((line) => line !== '')).toStrictEqual([
        `plant-store: cannot start: ${dataDir} is in use by process ${first.child.pid}: one process at a time can use an embedded database; stop the other service or set another DATA_DIR`,
      ]);
      expect(second.stdout.filter((line) => line.includes('"level":"fatal"'))).toStrictEqual([]);
      expect((await fetch(`${first.baseUrl}/readyz`)).status).toBe(200);
    } finally {
      first.child.kill('SIGTERM');
      await first.exited;
    }
  });

  it('starts with `npm start` alone, and stops cleanly when npm gets SIGTERM', async () => {
    // The data directory the first test made: a new one would cost the engine's initdb again.
    const server = await startServer(
      { API_TOKENS: TOKEN, DATA_DIR: dataDir, HOME: process.env.HOME ?? '' },
      { command: 'npm', args: ['start'] },
    );
    // `npm test` built dist/ first: a start builds only when something changed since.
    expect(server.stdout).toContainEqual(
      expect.stringMatching(/^plant-store: dist\/ is up to date with src\//),
    );
    expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
    expect((await post(server.baseUrl, '{"id":1,"name":"npm"}')).status).toBe(200);
    server.child.kill('SIGTERM');
    expect(await server.exited).toBe(0);
    // The service itself got the signal: it shut down and released its data directory.
    expect(server.stdout.some((line) => line.includes('"msg":"stopped"'))).toBe(true);
    expect(existsSync(join(dataDir, 'plant-store.lock'))).toBe(false);
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
