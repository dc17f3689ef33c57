import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, TOKEN_ENTRIES } from '../../helpers/app.js';
import {
  createScratchDatabase,
  type ScratchDatabase,
  serverUrlOf,
} from '../../helpers/database.js';
import { run, startServer } from '../../helpers/process.js';
import { startReceiver, WEBHOOK_SECRET } from '../../helpers/receiver.js';
import { keyEntry, ringKey } from '../../helpers/sealed.js';

const tokens = TOKEN_ENTRIES.join(',');

function post(baseUrl: string, body: object) {
  return fetch(`${baseUrl}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

/** How the operator commands name the server of `database`: its address and database, no user. */
function serverOf(database: ScratchDatabase) {
  const { hostname, port, pathname } = new URL(serverUrlOf(database));
  return `the PostgreSQL server at ${hostname}:${port || '5432'}${pathname}`;
}

describe('the webhook configuration at start', () => {
  it.each([
    [
      { WEBHOOK_URLS: 'https://example.com/hook' },
      'WEBHOOK_SECRET must be set when WEBHOOK_URLS is',
    ],
    [{ WEBHOOK_URLS: 'mailto:ops@example.com', WEBHOOK_SECRET }, 'WEBHOOK_URLS must be'],
    [{ WEBHOOK_RETRY_SCHEDULE: '5m' }, 'WEBHOOK_RETRY_SCHEDULE must be'],
  ])('refuses %j with one line naming the variable, and exits non-zero', async (env, message) => {
    const server = run(process.execPath, ['dist/server.js'], {
      API_TOKENS: 't',
      DATABASE_URL: 'postgres://h/db',
      ...env,
    });
    expect(await server.exited).toBe(1);
    expect(server.stderr.filter((line) => line !== '')).toHaveLength(1);
    expect(server.stderr[0]).toContain(message);
    expect(server.stderr.join('\n')).not.toContain(WEBHOOK_SECRET);
  });
});

describe('the service process with the webhook on', () => {
  let database: ScratchDatabase;
  beforeAll(async () => {
    database = await createScratchDatabase({ migrated: false });
  });
  afterAll(() => database.drop());

  it('gives back the claim of an attempt it cannot finish when stopped, and exits 0', async () => {
    const hook = await startReceiver(() => ({ status: 200, delayMs: 60_000 }));
    const server = await startServer({
      DATABASE_URL: serverUrlOf(database),
      API_TOKENS: tokens,
      WEBHOOK_URLS: hook.url,
      WEBHOOK_SECRET,
      WEBHOOK_TIMEOUT_MS: '30000',
      SHUTDOWN_TIMEOUT_MS: '2000',
    });
    try {
      expect((await post(server.baseUrl, { id: 1, name: 'Aloe' })).status).toBe(200);
      await hook.waitFor(1);
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
      // Due again at once, for any replica, and not counted as an attempt.
      expect(
        await database.query(
          'select attempts, next_attempt_at <= now() as due, failed_at from webhook_deliveries',
        ),
      ).toStrictEqual([{ attempts: 0, due: true, failed_at: null }]);
    } finally {
      server.child.kill('SIGKILL');
      await hook.close();
    }
  });

  it('sends failed deliveries again with the redelivery command', async () => {
    await database.query('update webhook_deliveries set failed_at = now()');
    const env = { DATABASE_URL: serverUrlOf(database), LOG_LEVEL: 'warn' };
    const dryRun = run(process.execPath, ['dist/redeliver.js', '--dry-run'], env);
    expect(await dryRun.exited).toBe(0);
    const server = serverOf(database);
    expect(dryRun.stdout[0]).toBe(`1 failed delivery in ${server} would be sent again`);
    const redeliver = run(process.execPath, ['dist/redeliver.js'], env);
    expect(await redeliver.exited).toBe(0);
    expect(redeliver.stdout[0]).toBe(`1 failed delivery in ${server} will be sent again`);
    const none = run(process.execPath, ['dist/redeliver.js', '--dry-run'], env);
    expect(await none.exited).toBe(0);
    expect(none.stdout[0]).toBe(`0 failed deliveries in ${server} would be sent again`);
    expect(await database.query('select failed_at from webhook_deliveries')).toStrictEqual([
      { failed_at: null },
    ]);
    const wrong = run(process.execPath, ['dist/redeliver.js', '--event', 'x'], env);
    expect(await wrong.exited).toBe(2);
    expect(wrong.stderr[0]).toBe('plant-store: --event must be a webhook-id (msg_...)');
  });
});

describe('the operator commands on a database that is not migrated', () => {
  let database: ScratchDatabase;
  beforeAll(async () => {
    database = await createScratchDatabase({ migrated: false });
  });
  afterAll(() => database.drop());

  it.each([
    ['dist/redeliver.js', 'redelivery', {}],
    ['dist/rekey.js', 'the re-sealing', { WEBHOOK_ENCRYPTION_KEYS: keyEntry(ringKey('k1')) }],
  ])('%s says so and suggests npm run db:migrate, exit 1', async (script, what, env) => {
    const command = run(process.execPath, [script], {
      DATABASE_URL: serverUrlOf(database),
      LOG_LEVEL: 'warn',
      ...env,
    });
    expect(await command.exited).toBe(1);
    expect(command.stdout.filter((line) => line !== '')).toStrictEqual([]);
    expect(command.stderr.filter((line) => line !== '')).toStrictEqual([
      `plant-store: ${what} failed: ${serverOf(database)} is not migrated; run npm run db:migrate with the same DATABASE_URL first`,
    ]);
  });

  it('names the embedded data directory when DATABASE_URL is not set', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'plant-store-redeliver-'));
    try {
      const command = run(process.execPath, ['dist/redeliver.js', '--dry-run'], {
        DATA_DIR: dataDir,
        LOG_LEVEL: 'warn',
      });
      expect(await command.exited).toBe(1);
      expect(command.stderr.filter((line) => line !== '')).toStrictEqual([
        `plant-store: redelivery failed: the embedded PostgreSQL (PGlite) with its data in ${dataDir} (DATABASE_URL is not set) is not migrated; set DATABASE_URL to the service's database, or run npm run db:migrate to migrate this one`,
      ]);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
