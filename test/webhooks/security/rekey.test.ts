// `npm run webhooks:rekey` (dist/rekey.js) on a running service's database: every stored key
// sealed anew under the first key of the ring, in batches, and the service reads them on.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSecret, openSecret, sealSecret } from '../../../src/webhooks/security/secrets.js';
import { endpointIdOf } from '../../../src/webhooks/tables/ids.js';
import { startTestApp, type TestApp } from '../../helpers/app.js';
import { serverUrlOf } from '../../helpers/database.js';
import { run } from '../../helpers/process.js';
import { WEBHOOK_SECRET } from '../../helpers/receiver.js';
import { keyEntry, ringKey, unnamedSeal } from '../../helpers/sealed.js';

const ADMIN = 'admin-token-5d0b7e';
const [k1, k2, lost] = [ringKey('k1'), ringKey('k2'), ringKey('lost')];
const place = (id: string) => ({ endpoint: id, field: 'secret' }) as const;
const underK1 = (value: string, id: string) => sealSecret(value, [k1], place(id));
const RING = `${keyEntry(k2)},${keyEntry(k1)}`;

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({
    env: { ADMIN_TOKENS: ADMIN, WEBHOOK_ENCRYPTION_KEYS: RING },
  });
  // Rows as the API leaves them: nothing delivers or claims them meanwhile.
  await t.dispatcher?.stop(0);
});
afterAll(() => t.close());

/** Stores an endpoint with `secret` (and `previous`) as `seal` writes them; returns its key. */
async function stored(
  secret: string,
  seal: (value: string, id: string) => string,
  previous?: string,
): Promise<string> {
  const [row] = await t.database.query<{ id: string }>(
    "select nextval(pg_get_serial_sequence('webhook_endpoints', 'id'))::text as id",
  );
  const id = row?.id ?? '';
  await t.database.query(
    `insert into webhook_endpoints (id, url, secret, previous_secret, previous_secret_until)
     overriding system value
     values ($1, 'https://receiver.example.com/', $2, $3, now() + interval '1 hour')`,
    [id, seal(secret, id), previous === undefined ? null : seal(previous, id)],
  );
  return id;
}

/** Gives the endpoint `id` custom headers, stored as `sealed`. */
const setHeaders = (id: string, sealed: string) =>
  t.database.query('update webhook_endpoints set headers = $2 where id = $1', [id, sealed]);
const headersPlace = (id: string) => ({ endpoint: id, field: 'headers' }) as const;
// A receiver's credential, spelled so that it appears nowhere by chance.
const HEADERS = JSON.stringify({ Authorization: 'Bearer receiver-credential-0e7f3a' });

const rows = () =>
  t.database.query<{
    id: string;
    secret: string;
    previous_secret: string | null;
    headers: string | null;
  }>(
    'select id::text as id, secret, previous_secret, headers from webhook_endpoints order by webhook_endpoints.id',
  );

/** How the command names the server of `database`: its address and database, no user. */
function serverOf(database = t.database) {
  const { hostname, port, pathname } = new URL(serverUrlOf(database));
  return `the PostgreSQL server at ${hostname}:${port || '5432'}${pathname}`;
}

function rekey(args: string[], keys: string | undefined, database = t.database) {
  return run(process.execPath, ['dist/rekey.js', ...args], {
    DATABASE_URL: serverUrlOf(database),
    ...(keys !== undefined && { WEBHOOK_ENCRYPTION_KEYS: keys }),
  });
}

const readHeaders = async (id: string) =>
  (
    await t.app.inject({
      method: 'GET',
      url: `/webhooks/endpoints/${endpointIdOf(id)}/headers`,
      headers: { authorization: `Bearer ${ADMIN}` },
    })
  ).json();

const readSecret = async (id: string) =>
  (
    await t.app.inject({
      method: 'GET',
      url: `/webhooks/endpoints/${endpointIdOf(id)}/secret`,
      headers: { authorization: `Bearer ${ADMIN}` },
    })
  ).json();

describe('npm run webhooks:rekey', () => {
  it('seals every readable key and set of headers under the first key in batches, names the unreadable, and the service reads on', async () => {
    const secrets = Array.from({ length: 6 }, () => generateSecret());
    const [before, rotated] = [generateSecret(), generateSecret()];
    const ids = [
      await stored(secrets[0] ?? '', (value) => unnamedSeal(value, k1.key)),
      await stored(secrets[1] ?? '', (value) => `plain:${value}`),
      await stored(secrets[2] ?? '', underK1, before),
      await stored(secrets[3] ?? '', (value, id) => sealSecret(value, [k2], place(id))),
      await stored(secrets[4] ?? '', underK1),
    ];
    const unreadable = await stored(secrets[5] ?? '', (value, id) =>
      sealSecret(value, [lost], place(id)),
    );
    // Headers stored before a key was set, under the old key, and under the new one already.
    const [plainHeaders, oldHeaders, newHeaders] = [ids[1] ?? '', ids[3] ?? '', ids[4] ?? ''];
    await setHeaders(plainHeaders, `plain:${HEADERS}`);
    await setHeaders(oldHeaders, sealSecret(HEADERS, [k1], headersPlace(oldHeaders)));
    await setHeaders(newHeaders, sealSecret(HEADERS, [k2], headersPlace(newHeaders)));
    // A readable key beside headers that open under no key of the ring.
    const keyOfLostHeaders = generateSecret();
    const lostHeaders = await stored(keyOfLostHeaders, (value, id) =>
      sealSecret(value, [k2], place(id)),
    );
    await setHeaders(lostHeaders, sealSecret(HEADERS, [lost], headersPlace(lostHeaders)));
    const unreadables = [unreadable, lostHeaders];
    const create = await t.app.inject({
      method: 'POST',
      url: '/webhooks/endpoints',
      headers: { authorization: `Bearer ${ADMIN}` },
      payload: { url: 'https://receiver.example.com/', secret: rotated },
    });
    expect(create.statusCode).toBe(201);

    const first = rekey(['--batch-size', '2'], RING);
    expect(await first.exited).toBe(1);
    expect(first.stdout).toStrictEqual([
      `5 stored keys and 2 sets of custom headers re-sealed under the key "k2" in ${serverOf()}`,
    ]);
    expect(first.stderr).toStrictEqual([
      `plant-store: 2 endpoints have a stored key or custom headers that open under no key of WEBHOOK_ENCRYPTION_KEYS, left as they are: ${unreadables.map(endpointIdOf).join(', ')}`,
    ]);
    const output = [...first.stdout, ...first.stderr].join('\n');
    for (const secret of [...secrets, before, rotated, keyOfLostHeaders]) {
      expect(output).not.toContain(secret.slice('whsec_'.length));
    }
    expect(output).not.toContain('receiver-credential');

    const after = await rows();
    expect(after.filter((row) => !unreadables.includes(row.id)).length).toBe(6);
    for (const row of after.filter((stored) => !unreadables.includes(stored.id))) {
      expect(row.secret).toMatch(/^aes256gcm-v2:k2:/);
      expect(row.previous_secret ?? 'aes256gcm-v2:k2:').toMatch(/^aes256gcm-v2:k2:/);
      expect(row.headers ?? 'aes256gcm-v2:k2:').toMatch(/^aes256gcm-v2:k2:/);
    }
    // Each set of headers opens under k2 alone, for its own row and field, to what it was.
    for (const id of [plainHeaders, oldHeaders, newHeaders]) {
      const row = after.find((stored) => stored.id === id);
      expect(openSecret(row?.headers ?? '', [k2], headersPlace(id))).toBe(HEADERS);
      expect(await readHeaders(id)).toStrictEqual({ headers: JSON.parse(HEADERS) });
    }
    // Left as it was, key and headers: the row is written whole or not at all.
    const leftAsItWas = after.find((row) => row.id === lostHeaders);
    expect(leftAsItWas?.headers).toMatch(/^aes256gcm-v2:lost:/);
    expect(openSecret(leftAsItWas?.secret ?? '', [k2], place(lostHeaders))).toBe(keyOfLostHeaders);
    expect((await readHeaders(lostHeaders)).error).toBe(500);
    // Each opens under k2 alone, for its own row, to what it was.
    for (const [index, id] of ids.entries()) {
      const row = after.find((stored) => stored.id === id);
      expect(openSecret(row?.secret ?? '', [k2], place(id))).toBe(secrets[index]);
    }
    const withPrevious = after.find((row) => row.id === ids[2]);
    expect(openSecret(withPrevious?.previous_secret ?? '', [k2], place(ids[2] ?? ''))).toBe(before);
    expect(after.find((row) => row.id === unreadable)?.secret).toMatch(/^aes256gcm-v2:lost:/);
    // The running service reads the re-sealed keys, and says of none what it holds.
    for (const [index, id] of ids.entries()) {
      expect(await readSecret(id)).toStrictEqual({ key: secrets[index] });
    }
    expect((await readSecret(unreadable)).error).toBe(500);
    const log = t.logs.join('\n');
    for (const secret of [...secrets, before, rotated]) {
      expect(log).not.toContain(secret.slice('whsec_'.length));
    }
    expect(log).not.toContain('receiver-credential');
    for (const { key } of [k1, k2, lost])
      expect(log).not.toContain(key.export().toString('base64'));

    const again = rekey([], RING);
    expect(await again.exited).toBe(1);
    expect(again.stdout[0]).toBe(
      `0 stored keys and 0 sets of custom headers re-sealed under the key "k2" in ${serverOf()}`,
    );

    await t.database.query('delete from webhook_endpoints where id = any($1::int8[])', [
      unreadables,
    ]);
    const clean = rekey([], RING);
    expect(await clean.exited).toBe(0);
    expect(clean.stdout[0]).toBe(
      `0 stored keys and 0 sets of custom headers re-sealed under the key "k2" in ${serverOf()}`,
    );
    expect(clean.stderr.filter((line) => line !== '')).toStrictEqual([]);
  });

  it('keeps a rotation committed while it runs, and re-seals what the rotation wrote', async () => {
    await t.database.query('delete from webhook_endpoints');
    const [old, rotated] = [generateSecret(), generateSecret()];
    const id = await stored(old, underK1);
    // A replica that still seals under k1 rotates the key; its transaction holds the row.
    const replica = new pg.Client({ connectionString: serverUrlOf(t.database) });
    await replica.connect();
    try {
      await replica.query('begin');
      await replica.query(
        'update webhook_endpoints set previous_secret = secret, secret = $2 where id = $1',
        [id, underK1(rotated, id)],
      );
      const command = rekey([], RING);
      // Its write has read the row as it was before the rotation, and waits for the row.
      for (;;) {
        const waiting = await t.database.query(
          `select 1 from pg_locks l join pg_stat_activity a on a.pid = l.pid
            where not l.granted and a.datname = current_database()`,
        );
        if (waiting.length > 0 || command.child.exitCode !== null) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await replica.query('commit');
      expect(await command.exited).toBe(0);
      expect(command.stdout).toStrictEqual([
        `2 stored keys and 0 sets of custom headers re-sealed under the key "k2" in ${serverOf()}`,
      ]);
    } finally {
      await replica.end();
    }
    const [row] = (await rows()).filter((stored) => stored.id === id);
    expect(openSecret(row?.secret ?? '', [k2], place(id))).toBe(rotated);
    expect(openSecret(row?.previous_secret ?? '', [k2], place(id))).toBe(old);
  });

  it('keeps headers set while it runs, and re-seals what was set', async () => {
    await t.database.query('delete from webhook_endpoints');
    const secret = generateSecret();
    const id = await stored(secret, underK1);
    const newer = JSON.stringify({ 'X-Greenhouse': 'north' });
    // A replica that still seals under k1 sets the headers; its transaction holds the row.
    const replica = new pg.Client({ connectionString: serverUrlOf(t.database) });
    await replica.connect();
    try {
      await replica.query('begin');
      await replica.query('update webhook_endpoints set headers = $2 where id = $1', [
        id,
        sealSecret(newer, [k1], headersPlace(id)),
      ]);
      const command = rekey([], RING);
      for (;;) {
        const waiting = await t.database.query(
          `select 1 from pg_locks l join pg_stat_activity a on a.pid = l.pid
            where not l.granted and a.datname = current_database()`,
        );
        if (waiting.length > 0 || command.child.exitCode !== null) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await replica.query('commit');
      expect(await command.exited).toBe(0);
      expect(command.stdout).toStrictEqual([
        `1 stored key and 1 set of custom headers re-sealed under the key "k2" in ${serverOf()}`,
      ]);
    } finally {
      await replica.end();
    }
    const [row] = (await rows()).filter((stored) => stored.id === id);
    expect(openSecret(row?.secret ?? '', [k2], place(id))).toBe(secret);
    expect(openSecret(row?.headers ?? '', [k2], headersPlace(id))).toBe(newer);
  });

  it('re-seals the key of a WEBHOOK_URLS endpoint, which was sealed for its row', async () => {
    const configured = await startTestApp({
      env: {
        WEBHOOK_URLS: 'https://configured.example.com/',
        WEBHOOK_SECRET,
        WEBHOOK_ENCRYPTION_KEYS: keyEntry(k1),
      },
    });
    try {
      await configured.dispatcher?.stop(0);
      const declared = () =>
        configured.database.query<{ id: string; secret: string }>(
          'select id::text as id, secret from webhook_endpoints where configured',
        );
      const [row] = await declared();
      const id = row?.id ?? '';
      expect(openSecret(row?.secret ?? '', [k1], place(id))).toBe(WEBHOOK_SECRET);
      const command = rekey([], RING, configured.database);
      expect(await command.exited).toBe(0);
      expect(command.stdout).toStrictEqual([
        `1 stored key and 0 sets of custom headers re-sealed under the key "k2" in ${serverOf(configured.database)}`,
      ]);
      const [after] = await declared();
      expect(after?.secret).toMatch(/^aes256gcm-v2:k2:/);
      expect(openSecret(after?.secret ?? '', [k2], place(id))).toBe(WEBHOOK_SECRET);
    } finally {
      await configured.close();
    }
  });

  it('re-seals every key when the batches cross a power of ten in the keys', async () => {
    await t.database.query('delete from webhook_endpoints');
    // Keys 6 to 17: in text order '10' comes before '6', in number order after '9'.
    await t.database.query(
      "select setval(pg_get_serial_sequence('webhook_endpoints', 'id'), 5, true)",
    );
    const secrets = Array.from({ length: 12 }, () => generateSecret());
    const ids: string[] = [];
    for (const secret of secrets) ids.push(await stored(secret, underK1));
    expect(ids.at(0)).toBe('6');
    expect(ids.at(-1)).toBe('17');

    const command = rekey(['--batch-size', '5'], RING);
    expect(await command.exited).toBe(0);
    expect(command.stdout).toStrictEqual([
      `12 stored keys and 0 sets of custom headers re-sealed under the key "k2" in ${serverOf()}`,
    ]);
    const after = await rows();
    for (const [index, id] of ids.entries()) {
      const row = after.find((stored) => stored.id === id);
      expect(openSecret(row?.secret ?? '', [k2], place(id))).toBe(secrets[index]);
    }
  });

  it('refuses to run without a key ring, in one line naming the variable', async () => {
    const command = rekey([], undefined);
    expect(await command.exited).toBe(1);
    expect(command.stderr.filter((line) => line !== '')).toStrictEqual([
      'plant-store: invalid configuration: WEBHOOK_ENCRYPTION_KEYS must be set: it is the key ring to seal under (the first key)',
    ]);
  });

  it('refuses a batch size that is not one, with its usage', async () => {
    const command = rekey(['--batch-size', '0'], keyEntry(k2));
    expect(await command.exited).toBe(2);
    expect(command.stderr[0]).toBe('plant-store: --batch-size must be an integer from 1 to 10000');
  });
});
