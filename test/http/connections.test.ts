// HTTP/1.1 on the wire (RFC 9110, RFC 9112): raw bytes over a socket, and the whole answer
// checked: status line, Error body, headers, and whether the connection then closes.
import { STATUS_CODES } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPlantRepository } from '../../src/plants/repository.js';
import { batching, startTestApp, storedPlant, type TestApp, TOKEN } from '../helpers/app.js';
import { RawClient, type RawResponse, sendRaw } from '../helpers/raw-http.js';

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
// How long a connection that should stay open is watched.
const STAYS_OPEN_MS = 500;
const REQUEST_TIMEOUT_MS = 1500;

let t: TestApp;
let port: number;
beforeAll(async () => {
  t = await startTestApp({
    env: {
      HTTP_HEADERS_TIMEOUT_MS: '1000',
      HTTP_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
    },
  });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  port = (t.app.server.address() as AddressInfo).port;
});
afterAll(() => t.close());

let nextId = 1;
const freshId = () => 900_000 + nextId++;

function head(requestLine: string, headers: string[] = ['Host: plants.example']): string {
  return `${requestLine}\r\n${headers.map((line) => `${line}\r\n`).join('')}\r\n`;
}

function create(id: number, name = 'Monstera', headers: string[] = []): string {
  const body = JSON.stringify({ id, name });
  return (
    head('POST /plants HTTP/1.1', [
      'Host: plants.example',
      `Authorization: Bearer ${TOKEN}`,
      'Content-Type: application/json',
      `Content-Length: ${Buffer.byteLength(body)}`,
      ...headers,
    ]) + body
  );
}

/** The answer is `status` in the Error shape, with the security headers and a request id. */
function expectError(
  response: RawResponse | undefined,
  status: number,
  message: string,
  requestId: string | RegExp = uuid,
) {
  expect(response?.statusLine).toBe(`HTTP/1.1 ${status} ${STATUS_CODES[status]}`);
  expect(response?.headers).toMatchObject({
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(response?.body ?? '')),
    'x-content-type-options': 'nosniff',
    'cache-control': 'no-store',
  });
  expect(response?.headers['x-request-id']).toMatch(requestId);
  expect(response?.headers.date).toBeDefined();
  expect(JSON.parse(response?.body ?? '')).toStrictEqual({ error: status, message });
}

describe('a request the router never sees', () => {
  it.each([
    ['GET /healthz', head('GET /healthz HTTP/1.1', [])],
    [
      'POST /plants',
      `${head('POST /plants HTTP/1.1', [`Authorization: Bearer ${TOKEN}`, 'Content-Type: application/json', 'Content-Length: 2'])}{}`,
    ],
  ])('%s without Host answers 400 in the Error shape and closes', async (_, bytes) => {
    const { responses, closed } = await sendRaw(port, bytes);
    expect(responses).toHaveLength(1);
    expectError(responses[0], 400, 'the request has no Host header');
    expect(responses[0]?.headers.connection).toBe('close');
    expect(closed).toBe(true);
  });

  it('without Host answers with the client request id', async () => {
    const { responses } = await sendRaw(
      port,
      head('GET /healthz HTTP/1.1', ['X-Request-Id: no-host-1']),
    );
    expectError(responses[0], 400, 'the request has no Host header', /^no-host-1$/);
  });

  it('in HTTP/1.0 without Host is served', async () => {
    const { responses } = await sendRaw(port, head('GET /healthz HTTP/1.0', []));
    expect(responses.map((response) => [response.status, response.body])).toStrictEqual([
      [200, '{"status":"ok"}'],
    ]);
  });

  it('with two Host headers answers 400 and closes', async () => {
    const { responses, closed } = await sendRaw(
      port,
      head('GET /healthz HTTP/1.1', ['Host: a.example', 'Host: b.example']),
    );
    expect(responses).toHaveLength(1);
    expectError(responses[0], 400, 'the request has more than one Host header');
    expect(responses[0]?.headers.connection).toBe('close');
    expect(closed).toBe(true);
  });

  it.each(['exa mple.example', 'a/b', 'user@plants.example', 'plants.example:80x'])(
    'with Host "%s" answers 400 and closes',
    async (host) => {
      const { responses, closed } = await sendRaw(
        port,
        head('GET /healthz HTTP/1.1', [`Host: ${host}`]),
      );
      expectError(responses[0], 400, 'the Host header is not a valid host');
      expect(closed).toBe(true);
    },
  );

  it.each([
    'plants.example',
    'plants.example:3000',
    '127.0.0.1:3000',
    '[::1]:3000',
    'xn--bcher-kva.example',
  ])('with Host "%s" is served', async (host) => {
    const { responses } = await sendRaw(
      port,
      head('GET /healthz HTTP/1.1', [`Host: ${host}`]),
      STAYS_OPEN_MS,
    );
    expect(responses.map((response) => response.status)).toStrictEqual([200]);
  });

  it.each(['something-else', '200-ok'])(
    'with "Expect: %s" answers 417 with the client request id and closes',
    async (expectation) => {
      const { responses, closed } = await sendRaw(
        port,
        head('GET /healthz HTTP/1.1', [
          'Host: plants.example',
          `Expect: ${expectation}`,
          'X-Request-Id: expect-417',
        ]),
      );
      expect(responses).toHaveLength(1);
      expectError(
        responses[0],
        417,
        'Expect must be 100-continue, the only expectation this service meets',
        /^expect-417$/,
      );
      expect(responses[0]?.headers.connection).toBe('close');
      expect(closed).toBe(true);
    },
  );

  it('with "Expect: 100-continue" gets 100 Continue, then the answer to its body', async () => {
    const id = freshId();
    const body = JSON.stringify({ id, name: 'Continued' });
    const client = await RawClient.connect(port);
    client.write(
      head('POST /plants HTTP/1.1', [
        'Host: plants.example',
        `Authorization: Bearer ${TOKEN}`,
        'Content-Type: application/json',
        `Content-Length: ${body.length}`,
        'Expect: 100-continue',
      ]),
    );
    const [interim] = await client.waitForResponses(1);
    expect(interim?.statusLine).toBe('HTTP/1.1 100 Continue');
    client.write(body);
    const [, final] = await client.waitForResponses(2);
    expect(final?.status).toBe(200);
    expect(JSON.parse(final?.body ?? '')).toStrictEqual({ name: 'Continued' });
    expect(await client.closesWithin(STAYS_OPEN_MS)).toBe(false);
    client.destroy();
  });

  it('CONNECT answers 405 in the Error shape and closes', async () => {
    const { responses, closed } = await sendRaw(
      port,
      head('CONNECT plants.example:443 HTTP/1.1', [
        'Host: plants.example:443',
        'X-Request-Id: tunnel-1',
      ]),
    );
    expect(responses).toHaveLength(1);
    expectError(
      responses[0],
      405,
      'CONNECT is not supported: this service is not a proxy',
      /^tunnel-1$/,
    );
    expect(responses[0]?.headers.allow).toBe('');
    expect(responses[0]?.headers.connection).toBe('close');
    expect(closed).toBe(true);
  });

  it('is logged with its request id and status', async () => {
    await sendRaw(port, head('GET /healthz HTTP/1.1', ['X-Request-Id: logged-refusal']));
    const lines = t.logs
      .map((line) => JSON.parse(line))
      .filter((line) => line.reqId === 'logged-refusal');
    expect(lines).toMatchObject([{ msg: 'request refused', statusCode: 400, method: 'GET' }]);
  });
});

describe('bytes that are not HTTP', () => {
  it('after a kept-alive create get a 400 after its 200, then the connection closes', async () => {
    const id = freshId();
    const { responses, closed } = await sendRaw(port, `${create(id)}garbage\r\n\r\n`);
    expect(responses.map((response) => response.status)).toStrictEqual([200, 400]);
    expectError(responses[1], 400, 'the request is not valid HTTP');
    expect(responses[1]?.headers.connection).toBe('close');
    expect(closed).toBe(true);
    expect(await storedPlant(t.database, id)).toMatchObject({ name: 'Monstera' });
  });

  it('after a create sent with Connection: close are ignored: the create gets its real answer', async () => {
    const id = freshId();
    const { responses, closed } = await sendRaw(
      port,
      `${create(id, 'Committed', ['Connection: close'])}garbage\r\n\r\n`,
    );
    expect(responses).toHaveLength(1);
    expect(responses[0]?.status).toBe(200);
    expect(responses[0]?.headers.connection).toBe('close');
    expect(JSON.parse(responses[0]?.body ?? '')).toStrictEqual({ name: 'Committed' });
    expect(closed).toBe(true);
    expect(await storedPlant(t.database, id)).toMatchObject({ name: 'Committed' });
  });
});

describe('nothing runs after an answer that closes the connection', () => {
  it.each([
    [
      'a 401',
      `${head('POST /plants HTTP/1.1', ['Host: plants.example', 'Content-Type: application/json', 'Content-Length: 2'])}{}`,
      401,
    ],
    [
      'a 400 for malformed JSON',
      `${head('POST /plants HTTP/1.1', ['Host: plants.example', `Authorization: Bearer ${TOKEN}`, 'Content-Type: application/json', 'Content-Length: 5'])}{bad}`,
      400,
    ],
    [
      'a 404 with an unread body',
      `${head('POST /nowhere HTTP/1.1', ['Host: plants.example', 'Content-Type: application/json', 'Content-Length: 2'])}{}`,
      404,
    ],
    ['a 400 for a missing Host', head('GET /healthz HTTP/1.1', []), 400],
    [
      'a 417',
      head('GET /healthz HTTP/1.1', ['Host: plants.example', 'Expect: something-else']),
      417,
    ],
    [
      'a 200 to a request that asked to close',
      head('GET /healthz HTTP/1.1', ['Host: plants.example', 'Connection: close']),
      200,
    ],
  ])('a create pipelined behind %s is neither answered nor stored', async (_, first, status) => {
    const id = freshId();
    const { responses, closed } = await sendRaw(port, first + create(id, 'smuggled'));
    expect(responses.map((response) => response.status)).toStrictEqual([status]);
    expect(responses[0]?.headers.connection).toBe('close');
    expect(closed).toBe(true);
    // Time for a create that did start to commit.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await storedPlant(t.database, id)).toBeUndefined();
  });
});

describe('one answer per request', () => {
  it('a GET answered before its body arrived closes the connection, and no 408 follows', async () => {
    const client = await RawClient.connect(port);
    client.write(
      `${head('GET /healthz HTTP/1.1', ['Host: plants.example', 'Content-Length: 100'])}0123456789`,
    );
    const [response] = await client.waitForResponses(1);
    expect(response?.status).toBe(200);
    expect(response?.headers.connection).toBe('close');
    expect(await client.closesWithin(REQUEST_TIMEOUT_MS + 2000)).toBe(true);
    expect(client.responses()).toHaveLength(1);
    client.destroy();
  });

  it('a body that never finishes gets one 408 that carries the client request id', async () => {
    const client = await RawClient.connect(port);
    client.write(
      `${head('POST /plants HTTP/1.1', [
        'Host: plants.example',
        `Authorization: Bearer ${TOKEN}`,
        'Content-Type: application/json',
        'Content-Length: 100',
        'X-Request-Id: never-finishing-1',
      ])}{"id":`,
    );
    expect(await client.closesWithin(REQUEST_TIMEOUT_MS + 3000)).toBe(true);
    const responses = client.responses();
    expect(responses).toHaveLength(1);
    expectError(responses[0], 408, 'the request took too long to arrive', /^never-finishing-1$/);
    expect(responses[0]?.headers.connection).toBe('close');
    const logged = t.logs
      .map((line) => JSON.parse(line))
      .filter((line) => line.reqId === 'never-finishing-1');
    expect(logged).toMatchObject([{ msg: 'request completed', statusCode: 408 }]);
  });
});

describe('keep-alive and pipelining', () => {
  it('pipelined requests are all answered, in order, and the connection stays open', async () => {
    const ids = Array.from({ length: 20 }, freshId);
    const bytes = ids
      .map((id, i) => (i % 5 === 4 ? head('GET /healthz HTTP/1.1') : create(id, `p${i}`)))
      .join('');
    const { responses, closed } = await sendRaw(port, bytes, STAYS_OPEN_MS);
    expect(responses.map((response) => response.body)).toStrictEqual(
      ids.map((_, i) => (i % 5 === 4 ? '{"status":"ok"}' : `{"name":"p${i}"}`)),
    );
    expect(responses.every((response) => response.headers.connection === 'keep-alive')).toBe(true);
    expect(closed).toBe(false);
    for (const [i, id] of ids.entries()) {
      if (i % 5 !== 4) expect(await storedPlant(t.database, id)).toMatchObject({ name: `p${i}` });
    }
  });

  it('requests sent one after another share one connection', async () => {
    const client = await RawClient.connect(port);
    for (let i = 1; i <= 3; i++) {
      client.write(create(freshId(), `sequential ${i}`));
      const responses = await client.waitForResponses(i);
      expect(responses[i - 1]?.status).toBe(200);
    }
    expect(client.closed).toBe(false);
    client.destroy();
  });
});

describe('draining', () => {
  it.each([
    [
      'the second is answered first, and the connection closes after both',
      [true, false],
      ['keep-alive', 'keep-alive'],
    ],
    ['the second says it closes the connection', [true, true], ['keep-alive', 'close']],
  ])(
    'answers both pipelined creates in flight when it starts: %s',
    async (_, held, connections) => {
      let release = () => {};
      const released = new Promise<void>((resolve) => {
        release = resolve;
      });
      const ids = [freshId(), freshId()];
      const heldIds = new Set(ids.filter((_, i) => held[i]).map(BigInt));
      const draining = await startTestApp({
        repository: (database) => {
          const repository = createPlantRepository(database.db, batching);
          return {
            ...repository,
            createPlant: async (plant) => {
              if (heldIds.has(plant.id)) await released;
              return repository.createPlant(plant);
            },
          };
        },
      });
      try {
        await draining.app.listen({ port: 0, host: '127.0.0.1' });
        const client = await RawClient.connect((draining.app.server.address() as AddressInfo).port);
        client.write(ids.map((id, i) => create(id, `pipelined ${i}`)).join(''));
        await new Promise((resolve) => setTimeout(resolve, 300));
        const closed = draining.app.close();
        release();
        const responses = await client.waitForResponses(2);
        expect(responses.map((response) => response.body)).toStrictEqual([
          '{"name":"pipelined 0"}',
          '{"name":"pipelined 1"}',
        ]);
        expect(responses.map((response) => response.headers.connection)).toStrictEqual(connections);
        expect(await client.closesWithin(5000)).toBe(true);
        await closed;
      } finally {
        release();
        await draining.close();
      }
    },
  );
});

describe('unknown routes', () => {
  it('answer 404 before the body is sent, without reading it, and close', async () => {
    const client = await RawClient.connect(port);
    client.write(
      head('POST /nope HTTP/1.1', [
        'Host: plants.example',
        'Content-Type: application/json',
        'Content-Length: 65536',
      ]),
    );
    const [response] = await client.waitForResponses(1, 1000);
    expectError(response, 404, 'no route matches POST /nope');
    expect(response?.headers.connection).toBe('close');
    expect(await client.closesWithin(5000)).toBe(true);
    client.destroy();
  });

  it('answer 404 to a request without a body and keep the connection', async () => {
    const client = await RawClient.connect(port);
    client.write(head('GET /nope HTTP/1.1'));
    const [missing] = await client.waitForResponses(1);
    expectError(missing, 404, 'no route matches GET /nope');
    expect(missing?.headers.connection).toBe('keep-alive');
    client.write(head('GET /healthz HTTP/1.1'));
    const [, healthy] = await client.waitForResponses(2);
    expect(healthy?.status).toBe(200);
    client.destroy();
  });
});

describe('content codings', () => {
  const plain = (id: number) => JSON.stringify({ id, name: 'Coded' });

  it.each([
    ['gzip', (id: number) => plain(id)],
    ['deflate, br', (id: number) => plain(id)],
    ['GZIP', (id: number) => gzipSync(plain(id))],
  ])('a body with Content-Encoding: %s answers 415 and is not stored', async (coding, body) => {
    const id = freshId();
    const payload = Buffer.from(body(id));
    const { responses } = await sendRaw(
      port,
      Buffer.concat([
        Buffer.from(
          head('POST /plants HTTP/1.1', [
            'Host: plants.example',
            `Authorization: Bearer ${TOKEN}`,
            'Content-Type: application/json',
            `Content-Encoding: ${coding}`,
            `Content-Length: ${payload.length}`,
          ]),
        ),
        payload,
      ]),
    );
    expect(responses).toHaveLength(1);
    expectError(responses[0], 415, 'Content-Encoding must be identity: bodies are read as sent');
    expect(responses[0]?.headers['accept-encoding']).toBe('identity');
    expect(await storedPlant(t.database, id)).toBeUndefined();
  });

  it('a body with Content-Encoding: identity is stored', async () => {
    const id = freshId();
    const body = plain(id);
    const { responses } = await sendRaw(
      port,
      head('POST /plants HTTP/1.1', [
        'Host: plants.example',
        `Authorization: Bearer ${TOKEN}`,
        'Content-Type: application/json',
        'Content-Encoding: identity',
        `Content-Length: ${body.length}`,
      ]) + body,
      STAYS_OPEN_MS,
    );
    expect(responses.map((response) => response.status)).toStrictEqual([200]);
    expect(await storedPlant(t.database, id)).toMatchObject({ name: 'Coded' });
  });
});

describe('the interactive reference', () => {
  it('redirects /docs/static/index.html to /docs/ with the Error body', async () => {
    const { responses } = await sendRaw(
      port,
      head('GET /docs/static/index.html HTTP/1.1'),
      STAYS_OPEN_MS,
    );
    expect(responses).toHaveLength(1);
    expect(responses[0]?.statusLine).toBe('HTTP/1.1 302 Found');
    expect(responses[0]?.headers.location).toBe('/docs/');
    expect(responses[0]?.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(JSON.parse(responses[0]?.body ?? '')).toStrictEqual({
      error: 302,
      message: 'the resource is at the URL in the Location header',
    });
  });
});
