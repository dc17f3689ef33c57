import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  HASHED_TOKEN,
  postPlant,
  startTestApp,
  storedPlant,
  type TestApp,
  TOKEN,
} from '../helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const challenge = 'Bearer realm="plant-store"';
const invalidToken = 'Bearer realm="plant-store", error="invalid_token"';

describe('authentication', () => {
  it.each([
    ['no Authorization header', undefined, 'a bearer token is required', challenge],
    [
      'another scheme',
      'Basic dXNlcjpwYXNz',
      'the Authorization header must use the Bearer scheme',
      challenge,
    ],
    ['the scheme word alone', 'Bearer', 'the bearer token is empty', challenge],
    ['an empty token', 'Bearer    ', 'the bearer token is empty', challenge],
    ['an unknown token', 'Bearer not-a-token', 'the bearer token is not valid', invalidToken],
    [
      'a token differing in case',
      `Bearer ${TOKEN.toUpperCase()}`,
      'the bearer token is not valid',
      invalidToken,
    ],
    // Found by fuzzing: the token was trimmed of every Unicode space, so these were let in.
    [
      'the token followed by a no-break space',
      `Bearer ${TOKEN}\u00a0`,
      'the bearer token is not valid',
      invalidToken,
    ],
    [
      'the token after a no-break space',
      `Bearer \u00a0${TOKEN}`,
      'the bearer token is not valid',
      invalidToken,
    ],
    ['the token after a tab', `Bearer \t${TOKEN}`, 'the bearer token is not valid', invalidToken],
    [
      'the SHA-256 entry itself',
      'Bearer sha256:abc',
      'the bearer token is not valid',
      invalidToken,
    ],
  ])(
    'answers 401 to %s, with a WWW-Authenticate challenge',
    async (_, authorization, message, header) => {
      const response = await postPlant(t.app, { id: 1, name: 'x' }, { authorization });
      expect(response.statusCode).toBe(401);
      expect(response.headers['www-authenticate']).toBe(header);
      expect(response.json()).toStrictEqual({ error: 401, message });
      expect(await storedPlant(t.database, 1)).toBeUndefined();
    },
  );

  it.each([
    [10, 'Bearer'],
    [11, 'bearer'],
    [12, 'BEARER'],
    [13, 'bEaReR'],
  ])('accepts id %i with the scheme word %s matched case-insensitively', async (id, scheme) => {
    const response = await postPlant(
      t.app,
      { id, name: scheme },
      { authorization: `${scheme} ${TOKEN}` },
    );
    expect(response.statusCode).toBe(200);
  });

  it.each([
    [20, `Bearer  ${TOKEN}`, 'several spaces after the scheme word'],
    [21, `Bearer ${TOKEN} \t`, 'spaces and tabs after the token, which HTTP strips anyway'],
  ])('accepts id %i with %j: %s', async (id, authorization) => {
    const response = await postPlant(t.app, { id, name: 'spaced' }, { authorization });
    expect(response.statusCode).toBe(200);
  });

  it('accepts a token configured only by its SHA-256 digest', async () => {
    const response = await postPlant(
      t.app,
      { id: 2, name: 'hashed' },
      { authorization: `Bearer ${HASHED_TOKEN}` },
    );
    expect(response.statusCode).toBe(200);
    expect(await storedPlant(t.database, 2)).toMatchObject({ name: 'hashed' });
  });

  it.each([
    ['a malformed body', { 'content-type': 'application/json' }, '{not json'],
    ['an invalid NewPlant', { 'content-type': 'application/json' }, '{"id":"1"}'],
    ['an unsupported content type', { 'content-type': 'text/plain' }, 'hello'],
    [
      'a body over the limit',
      { 'content-type': 'application/json' },
      `{"name":"${'x'.repeat(70_000)}"}`,
    ],
  ])('answers 401 before looking at %s', async (_, headers, body) => {
    const response = await postPlant(t.app, body, { ...headers, authorization: undefined });
    expect(response.statusCode).toBe(401);
    expect(response.json().error).toBe(401);
  });
});

describe('authentication over a real socket', () => {
  it('answers 401 without waiting for a body the client never sends', async () => {
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = t.app.server.address() as AddressInfo;
    const answer = await new Promise<{ status?: number; body: string; connection?: string }>(
      (resolve, reject) => {
        const request = httpRequest({
          port,
          host: '127.0.0.1',
          method: 'POST',
          path: '/plants',
          headers: {
            'content-type': 'application/json',
            'content-length': String(10 * 1024 * 1024),
          },
        });
        request.on('response', (response) => {
          let body = '';
          response.on('data', (chunk) => (body += chunk));
          response.on('end', () => {
            resolve({ status: response.statusCode, body, connection: response.headers.connection });
            request.destroy();
          });
        });
        request.on('error', reject);
        request.write('{"id":1,');
        // The remaining 10 MiB never come: only an answer sent before reading the body arrives.
      },
    );
    expect(answer.status).toBe(401);
    expect(answer.connection).toBe('close');
    expect(JSON.parse(answer.body)).toStrictEqual({
      error: 401,
      message: 'a bearer token is required',
    });
  });
});
