import { readFileSync } from 'node:fs';
import SwaggerParser from '@apidevtools/swagger-parser';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSecret, sealSecret } from '../../src/webhooks/security/secrets.js';
import { postPlant, startTestApp, type TestApp, TOKEN } from '../helpers/app.js';
import { WEBHOOK_SECRET } from '../helpers/receiver.js';
import { ringKey } from '../helpers/sealed.js';

let t: TestApp;
// biome-ignore lint/suspicious/noExplicitAny: the document is checked field by field below
let document: any;
beforeAll(async () => {
  t = await startTestApp();
  const response = await t.app.inject({ method: 'GET', url: '/openapi.json' });
  expect(response.statusCode).toBe(200);
  expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
  document = response.json();
});
afterAll(() => t.close());

describe('GET /openapi.json', () => {
  it('is a valid OpenAPI 3.1.0 document', async () => {
    expect(document.openapi).toBe('3.1.0');
    await expect(SwaggerParser.validate(structuredClone(document))).resolves.toBeTruthy();
  });

  it('declares version 1.0.0 and the MIT license', () => {
    expect(document.info.version).toBe('1.0.0');
    expect(document.info.license).toStrictEqual({ name: 'MIT', identifier: 'MIT' });
  });

  it('applies the bearerAuth scheme to the whole service, adminBearer to the management API', () => {
    expect(document.components.securitySchemes).toStrictEqual({
      bearerAuth: { type: 'http', scheme: 'bearer', description: expect.any(String) },
      adminBearer: { type: 'http', scheme: 'bearer', description: expect.any(String) },
    });
    expect(document.security).toStrictEqual([{ bearerAuth: [] }]);
    expect(document.paths['/plants'].post.security).toBeUndefined();
    const management = Object.entries(document.paths as Record<string, object>).filter(([path]) =>
      path.startsWith('/webhooks/endpoints'),
    );
    expect(management.map(([path]) => path).sort()).toStrictEqual([
      '/webhooks/endpoints',
      '/webhooks/endpoints/{id}',
      '/webhooks/endpoints/{id}/attempts',
      '/webhooks/endpoints/{id}/events/{eventId}/resend',
      '/webhooks/endpoints/{id}/headers',
      '/webhooks/endpoints/{id}/recover',
      '/webhooks/endpoints/{id}/secret',
      '/webhooks/endpoints/{id}/secret/rotate',
      '/webhooks/endpoints/{id}/test',
    ]);
    for (const [path, operations] of management) {
      for (const [method, operation] of Object.entries(operations)) {
        expect(operation.security, `${method} ${path}`).toStrictEqual([{ adminBearer: [] }]);
        expect(operation.tags, `${method} ${path}`).toStrictEqual(['webhook endpoints']);
      }
    }
  });

  it('names the schemas Plant, NewPlant and Error', () => {
    const { Plant, NewPlant, Error: ErrorSchema } = document.components.schemas;
    expect(Plant.required).toStrictEqual(['name']);
    expect(Object.keys(Plant.properties)).toStrictEqual(['name', 'tag']);
    expect(NewPlant.required).toStrictEqual(['id', 'name']);
    expect(NewPlant.properties.id).toMatchObject({ type: 'integer', format: 'int64' });
    expect(NewPlant.properties.name).toMatchObject({
      type: 'string',
      minLength: 1,
      maxLength: 256,
    });
    expect(NewPlant.properties.tag).toMatchObject({ type: 'string', minLength: 0, maxLength: 256 });
    expect(ErrorSchema.required).toStrictEqual(['error', 'message']);
    expect(ErrorSchema.properties.error).toMatchObject({ type: 'integer', format: 'int32' });
  });

  it('documents every status POST /plants can answer, with the right body', () => {
    const { requestBody, responses } = document.paths['/plants'].post;
    expect(requestBody.content['application/json'].schema).toStrictEqual({
      $ref: '#/components/schemas/NewPlant',
    });
    expect(Object.keys(responses).sort()).toStrictEqual([
      '200',
      '400',
      '401',
      '408',
      '409',
      '413',
      '415',
      '429',
      '431',
      '500',
      '503',
    ]);
    expect(responses['200'].content['application/json'].schema).toStrictEqual({
      $ref: '#/components/schemas/Plant',
    });
    for (const status of ['400', '401', '408', '409', '413', '415', '429', '431', '500', '503']) {
      expect(responses[status].content['application/json'].schema).toStrictEqual({
        $ref: '#/components/schemas/Error',
      });
      expect(responses[status].headers['x-request-id']).toBeDefined();
    }
    expect(responses['401'].headers['www-authenticate']).toBeDefined();
    expect(responses['503'].headers['retry-after']).toBeDefined();
    expect(responses['429'].headers['retry-after']).toBeDefined();
  });

  it('documents every status of the plant reads and deletes, each failure with the Error body', () => {
    const operations = {
      'get /plants': ['200', '400', '401', '408', '429', '431', '500', '503'],
      'get /plants/{id}': ['200', '400', '401', '404', '408', '429', '431', '500', '503'],
      'delete /plants/{id}': ['204', '400', '401', '404', '408', '413', '429', '431', '500', '503'],
    };
    for (const [operation, statuses] of Object.entries(operations)) {
      const [method, path] = operation.split(' ') as [string, string];
      const { responses } = document.paths[path][method];
      expect(Object.keys(responses).sort()).toStrictEqual(statuses);
      for (const status of statuses.filter((s) => s >= '400')) {
        expect(responses[status].content['application/json'].schema).toStrictEqual({
          $ref: '#/components/schemas/Error',
        });
        expect(responses[status].headers['x-request-id']).toBeDefined();
      }
    }
  });

  it('documents a page, a plant with its id, and a delete without a body', () => {
    const list = document.paths['/plants'].get.responses['200'];
    expect(list.content['application/json'].schema).toMatchObject({
      type: 'array',
      items: { $ref: '#/components/schemas/StoredPlant' },
    });
    expect(list.headers.link).toBeDefined();
    expect(
      document.paths['/plants/{id}'].get.responses['200'].content['application/json'].schema,
    ).toStrictEqual({ $ref: '#/components/schemas/StoredPlant' });
    expect(document.paths['/plants/{id}'].delete.responses['204'].content).toBeUndefined();
    const { StoredPlant } = document.components.schemas;
    expect(StoredPlant.required).toStrictEqual(['id', 'name']);
    expect(StoredPlant.properties.id).toMatchObject({ type: 'integer', format: 'int64' });
  });

  it('documents the parameters of a page and of a plant path', () => {
    const consistencyToken = { in: 'header', schema: { type: 'string', maxLength: 128 } };
    const byName = (parameters: { name: string }[]) =>
      Object.fromEntries(parameters.map((parameter) => [parameter.name, parameter]));
    expect(byName(document.paths['/plants'].get.parameters)).toMatchObject({
      limit: {
        in: 'query',
        required: false,
        schema: { type: 'integer', format: 'int32', minimum: 1, maximum: 1000, default: 100 },
      },
      after: { in: 'query', required: false, schema: { type: 'integer', format: 'int64' } },
      tag: { in: 'query', required: false, schema: { type: 'string', maxLength: 256 } },
      'consistency-token': consistencyToken,
    });
    const id = {
      name: 'id',
      in: 'path',
      required: true,
      schema: { type: 'integer', format: 'int64' },
    };
    expect(document.paths['/plants/{id}'].get.parameters).toMatchObject([
      id,
      { name: 'consistency-token', ...consistencyToken },
    ]);
    expect(document.paths['/plants/{id}'].delete.parameters).toMatchObject([id]);
  });

  it('documents the Consistency-Token on the answers of writes and reads', () => {
    const answers = {
      '/plants': { post: ['200', '409'], get: ['200'] },
      '/plants/{id}': { get: ['200', '404'], delete: ['204', '404'] },
    };
    for (const [path, operations] of Object.entries(answers)) {
      for (const [method, statuses] of Object.entries(operations)) {
        for (const status of statuses) {
          expect(document.paths[path][method].responses[status].headers).toMatchObject({
            'consistency-token': { schema: { type: 'string', maxLength: 128 } },
          });
        }
      }
    }
  });

  it('documents the probes as open to everyone', () => {
    expect(document.paths['/healthz'].get.security).toStrictEqual([]);
    expect(document.paths['/readyz'].get.security).toStrictEqual([]);
  });
});

describe('GET /docs', () => {
  it('serves the interactive reference as HTML, without a token', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/docs' });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toMatch(/^text\/html/);
    expect(response.body).toContain('swagger-ui');
  });

  it('sets a strict policy that holds by any address, over plain HTTP too', async () => {
    for (const url of ['/docs', '/docs/static/swagger-ui-bundle.js']) {
      const response = await t.app.inject({ method: 'GET', url });
      expect(response.headers['content-security-policy']).toBe(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
          "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
      );
    }
    const api = await t.app.inject({ method: 'GET', url: '/openapi.json' });
    expect(api.headers['content-security-policy']).toBe(
      "default-src 'none'; frame-ancestors 'none'",
    );
  });

  it('serves the assets the page loads', async () => {
    const response = await t.app.inject({
      method: 'GET',
      url: '/docs/static/swagger-ui-bundle.js',
    });
    expect(response.statusCode).toBe(200);
  });
});

// The document the service was built from, as published: a client generated from it, or a
// validating proxy holding it, must work against the service unchanged.
const source = JSON.parse(
  readFileSync(new URL('../../spec/plant-store-openapi.json', import.meta.url), 'utf8'),
);

describe('the served document, beside the source document', () => {
  const operations = Object.entries(
    source.paths as Record<string, Record<string, unknown>>,
  ).flatMap(([path, methods]) => Object.keys(methods).map((method) => [method, path] as const));

  it('holds every path and operation of the source under the same keys', () => {
    expect(operations).toStrictEqual([
      ['get', '/plants'],
      ['post', '/plants'],
      ['delete', '/plants/{id}'],
    ]);
    for (const [method, path] of operations) expect(document.paths[path]?.[method]).toBeDefined();
  });

  it.each(operations)(
    'holds every parameter of %s %s, in the same place, of the same type',
    (method, path) => {
      for (const parameter of source.paths[path][method].parameters ?? []) {
        const served = document.paths[path][method].parameters.find(
          (candidate: { name: string; in: string }) =>
            candidate.name === parameter.name && candidate.in === parameter.in,
        );
        expect(served).toBeDefined();
        expect(served.required ?? false).toBe(parameter.required ?? false);
        expect(served.schema).toMatchObject(parameter.schema);
      }
    },
  );

  it.each(operations)('answers every status of %s %s that the source names', (method, path) => {
    const statuses = Object.keys(source.paths[path][method].responses);
    expect(Object.keys(document.paths[path][method].responses)).toEqual(
      expect.arrayContaining(statuses),
    );
  });

  it('holds every webhook of the source under the same key, with its body and answer', () => {
    expect(Object.keys(source.webhooks)).toStrictEqual(['/plant/webhook']);
    for (const [name, item] of Object.entries(source.webhooks as Record<string, object>)) {
      for (const [method, operation] of Object.entries(item)) {
        const served = document.webhooks[name][method];
        expect(served.requestBody.content['application/json'].schema).toStrictEqual(
          operation.requestBody.content['application/json'].schema,
        );
        expect(Object.keys(served.responses)).toEqual(
          expect.arrayContaining(Object.keys(operation.responses)),
        );
      }
    }
  });

  it('documents the Standard Webhooks headers of the newPlant webhook', () => {
    const { parameters } = document.webhooks['/plant/webhook'].post;
    expect(
      parameters.map((p: { name: string; in: string; required: boolean }) => [
        p.name,
        p.in,
        p.required,
      ]),
    ).toStrictEqual([
      ['webhook-id', 'header', true],
      ['webhook-timestamp', 'header', true],
      ['webhook-signature', 'header', true],
    ]);
  });

  it('declares every event type under webhooks, each signed, the others with their envelope', () => {
    expect(Object.keys(document.webhooks)).toStrictEqual([
      '/plant/webhook',
      'newPlant',
      'plantDeleted',
      'endpointDisabled',
      'deliveryExhausted',
    ]);
    for (const name of ['plantDeleted', 'endpointDisabled', 'deliveryExhausted']) {
      const { parameters, requestBody, responses } = document.webhooks[name].post;
      expect(parameters.map((p: { name: string }) => p.name)).toStrictEqual([
        'webhook-id',
        'webhook-timestamp',
        'webhook-signature',
      ]);
      expect(requestBody.content['application/json'].schema).toMatchObject({
        type: 'object',
        required: ['type', 'timestamp', 'data'],
        properties: { type: { const: name } },
      });
      expect(Object.keys(responses)).toStrictEqual(['200']);
    }
    // newPlant under its name is the source's request, with its own operationId.
    const { operationId, ...newPlant } = document.webhooks.newPlant.post;
    const { operationId: sourceId, ...atSourceKey } = document.webhooks['/plant/webhook'].post;
    expect(operationId).not.toBe(sourceId);
    expect(newPlant.requestBody).toStrictEqual(atSourceKey.requestBody);
    expect(newPlant.parameters).toStrictEqual(atSourceKey.parameters);
    // A test's webhook-id is msg_test_...: every webhook's header pattern allows it.
    const idPattern = new RegExp(atSourceKey.parameters[0].schema.pattern);
    expect(idPattern.test('msg_test_0f1e2d3c4b5a69788796a5b4c3d2e1f0')).toBe(true);
    expect(idPattern.test('msg_0f1e2d3c4b5a69788796a5b4c3d2e1f0')).toBe(true);
    const catalog = document.paths['/webhooks/event-types'].get;
    expect(catalog.security).toStrictEqual([{ adminBearer: [] }]);
    expect(catalog.responses['200'].content['application/json'].schema).toMatchObject({
      type: 'array',
      items: { $ref: '#/components/schemas/EventType' },
    });
  });

  it('holds every schema of the source, with its required properties and their types', () => {
    const flatten = (schema: { allOf?: object[]; required?: string[]; properties?: object }) =>
      (schema.allOf ?? [schema]).map((part) =>
        part && '$ref' in part ? source.components.schemas.Plant : part,
      ) as { required?: string[]; properties?: Record<string, object> }[];
    for (const [name, schema] of Object.entries(source.components.schemas)) {
      const served = document.components.schemas[name];
      expect(served).toBeDefined();
      for (const part of flatten(schema as object)) {
        expect(served.required).toEqual(expect.arrayContaining(part.required ?? []));
        for (const [property, definition] of Object.entries(part.properties ?? {})) {
          const { description: _, ...type } = definition as { description?: string };
          expect(served.properties[property]).toMatchObject(type);
        }
      }
    }
  });
});

describe('answers, as a proxy validating against the source document sees them', () => {
  const ajv = new Ajv2020({ strict: false, formats: { int32: true, int64: true } });
  ajv.addSchema({ ...source, $id: 'source.json' });
  const responseSchema = (path: string, method: string, status: string) =>
    ajv.compile({
      $ref: `source.json#/paths/${path.replaceAll('/', '~1')}/${method}/responses/${status}/content/application~1json/schema`,
    });
  const auth = { authorization: `Bearer ${TOKEN}` };

  beforeAll(async () => {
    for (const plant of [
      '{"id":9223372036854775807,"name":"Largest","tag":"edge"}',
      '{"id":-9223372036854775808,"name":"Smallest"}',
      '{"id":7,"name":"\\ufeffBOM \\u2028","tag":""}',
    ]) {
      expect((await postPlant(t.app, plant)).statusCode).toBe(200);
    }
  });

  it('finds every page of GET /plants valid: the source Plant allows the extra id', async () => {
    const valid = responseSchema('/plants', 'get', '200');
    for (const url of ['/plants', '/plants?limit=1', '/plants?tag=', '/plants?after=7']) {
      const response = await t.app.inject({ method: 'GET', url, headers: auth });
      expect(response.statusCode).toBe(200);
      const body = response.json();
      expect(valid(body), JSON.stringify(valid.errors)).toBe(true);
    }
  });

  it('finds the answers to POST /plants valid', async () => {
    const valid = responseSchema('/plants', 'post', '200');
    const response = await postPlant(t.app, { id: 8, name: 'Fern', tag: 'green' });
    expect(valid(response.json())).toBe(true);
  });

  it.each([
    ['get', '/plants?limit=0'],
    ['post', '/plants'],
    ['delete', '/plants/01'],
  ] as const)('finds the 400 of %s %s a valid Error', async (method, url) => {
    const response = await t.app.inject({
      method: method.toUpperCase() as 'GET',
      url,
      headers: { ...auth, 'content-type': 'application/json' },
      payload: method === 'post' ? '{}' : undefined,
    });
    expect(response.statusCode).toBe(400);
    const path = url.startsWith('/plants/') ? '/plants/{id}' : '/plants';
    expect(responseSchema(path, method, '400')(response.json())).toBe(true);
  });

  it('finds a 204 without a body where the source declares none', async () => {
    const response = await t.app.inject({ method: 'DELETE', url: '/plants/8', headers: auth });
    expect(response.statusCode).toBe(204);
    expect(source.paths['/plants/{id}'].delete.responses['204'].content).toStrictEqual({});
    expect(response.body).toBe('');
  });
});

describe('the examples of the document', () => {
  type Media = { schema: object; examples?: Record<string, { summary: string; value: unknown }> };
  type Operation = {
    requestBody?: { content: Record<string, Media> };
    responses: Record<string, { content?: Record<string, Media> }>;
  };
  /** Every JSON body of every operation and webhook: [where, pointer to its media type, media]. */
  const bodies = (): [string, string, Media][] => {
    const found: [string, string, Media][] = [];
    const pointer = (...parts: string[]) =>
      `#/${parts.map((part) => part.replaceAll('~', '~0').replaceAll('/', '~1')).join('/')}`;
    for (const kind of ['paths', 'webhooks']) {
      for (const [path, operations] of Object.entries(
        (document[kind] ?? {}) as Record<string, Record<string, Operation>>,
      )) {
        for (const [method, operation] of Object.entries(operations)) {
          const request = operation.requestBody?.content['application/json'];
          if (request) {
            const at = [kind, path, method, 'requestBody', 'content', 'application/json'];
            found.push([`${method} ${path} request`, pointer(...at), request]);
          }
          for (const [status, response] of Object.entries(operation.responses)) {
            const media = response.content?.['application/json'];
            const at = [kind, path, method, 'responses', status, 'content', 'application/json'];
            if (media) found.push([`${method} ${path} ${status}`, pointer(...at), media]);
          }
        }
      }
    }
    return found;
  };

  it('gives every request and response body of every operation at least one example', () => {
    expect(bodies().length).toBeGreaterThan(40);
    const without = bodies()
      .filter(([, , media]) => Object.keys(media.examples ?? {}).length === 0)
      .map(([where]) => where);
    expect(without).toStrictEqual([]);
  });

  it('finds every example valid against the schema of its body', () => {
    const ajv = new Ajv2020({ strict: false, formats: { int32: true, int64: true } });
    ajv.addSchema({ ...document, $id: 'served.json' });
    for (const [where, pointer, media] of bodies()) {
      const valid = ajv.compile({ $ref: `served.json${pointer}/schema` });
      for (const [name, example] of Object.entries(media.examples ?? {})) {
        expect(example.summary, `${where} ${name}`).not.toBe('');
        expect(valid(example.value), `${where} ${name}: ${JSON.stringify(valid.errors)}`).toBe(
          true,
        );
      }
    }
  });

  describe('are the answers the service gives', () => {
    let s: TestApp;
    const auth = { authorization: `Bearer ${TOKEN}` };
    const example = (path: string, method: string, status: string, name: string) =>
      (status === 'request'
        ? document.paths[path][method].requestBody.content['application/json']
        : document.paths[path][method].responses[status].content['application/json']
      ).examples[name].value;
    const answer = async (
      method: 'GET' | 'POST' | 'DELETE',
      url: string,
      payload?: string,
      headers: Record<string, string> = auth,
    ) => {
      const response = await s.app.inject({ method, url, payload, headers });
      return { status: String(response.statusCode), body: response.json() };
    };
    const create = (body: unknown, headers?: Record<string, string>) =>
      answer('POST', '/plants', JSON.stringify(body), {
        ...auth,
        'content-type': 'application/json',
        ...headers,
      });

    beforeAll(async () => {
      s = await startTestApp();
    });
    afterAll(() => s.close());

    it('for the creates, reads and pages they show', async () => {
      const monstera = example('/plants', 'post', 'request', 'monstera');
      expect(await create(monstera)).toStrictEqual({
        status: '200',
        body: example('/plants', 'post', '200', 'monstera'),
      });
      expect((await create(example('/plants', 'post', 'request', 'fern'))).status).toBe('200');
      expect((await create({ id: 2, name: 'Ivy', tag: '' })).status).toBe('200');
      expect(await answer('GET', `/plants/${monstera.id}`)).toStrictEqual({
        status: '200',
        body: example('/plants/{id}', 'get', '200', 'monstera'),
      });
      expect(await answer('GET', '/plants?limit=3')).toStrictEqual({
        status: '200',
        body: example('/plants', 'get', '200', 'full'),
      });
      expect(await answer('GET', '/plants?tag=aroid')).toStrictEqual({
        status: '200',
        body: example('/plants', 'get', '200', 'aroids'),
      });
      expect(await create({ ...monstera, name: 'Other' })).toStrictEqual({
        status: '409',
        body: example('/plants', 'post', '409', 'otherName'),
      });
    });

    it.each([
      ['post', '/plants', '400', 'wrongType', () => create({ id: '5', name: 'Monstera' })],
      ['post', '/plants', '400', 'emptyName', () => create({ id: 5, name: '' })],
      [
        'post',
        '/plants',
        '401',
        'missing',
        () => create({ id: 5, name: 'x' }, { authorization: '' }),
      ],
      [
        'post',
        '/plants',
        '401',
        'unknown',
        () => create({ id: 5, name: 'x' }, { authorization: 'Bearer nope' }),
      ],
      ['post', '/plants', '413', 'tooLarge', () => create({ id: 5, name: 'x'.repeat(70_000) })],
      [
        'post',
        '/plants',
        '415',
        'notJson',
        () => create({ id: 5, name: 'x' }, { 'content-type': 'text/plain' }),
      ],
      ['get', '/plants', '400', 'limit', () => answer('GET', '/plants?limit=0')],
      ['get', '/plants', '400', 'repeated', () => answer('GET', '/plants?after=1&after=2')],
      ['get', '/plants/{id}', '400', 'leadingZero', () => answer('GET', '/plants/007')],
      ['get', '/plants/{id}', '404', 'noSuchPlant', () => answer('GET', '/plants/4')],
      ['delete', '/plants/{id}', '400', 'leadingZero', () => answer('DELETE', '/plants/007')],
      ['delete', '/plants/{id}', '404', 'noSuchPlant', () => answer('DELETE', '/plants/4')],
      [
        'delete',
        '/plants/{id}',
        '413',
        'tooLarge',
        () =>
          answer('DELETE', '/plants/4', 'x'.repeat(70_000), {
            ...auth,
            'content-type': 'text/plain',
          }),
      ],
      ['get', '/healthz', '200', 'ok', () => answer('GET', '/healthz')],
      ['get', '/readyz', '200', 'ready', () => answer('GET', '/readyz')],
    ] as const)('for %s %s %s %s', async (method, path, status, name, send) => {
      expect(await send()).toStrictEqual({ status, body: example(path, method, status, name) });
    });
  });

  describe('are the answers the management API gives', () => {
    const ADMIN = 'admin-token-examples-31c7';
    const CONFIGURED = 'https://configured.example.com/hook';
    const admin = { authorization: `Bearer ${ADMIN}` };
    let s: TestApp;
    const ids = { endpoint: '', disabled: '', configured: '', sealed: '', sealedHeaders: '' };
    const send = async (
      method: string,
      url: string,
      body?: unknown,
      headers: Record<string, string> = {},
    ) => {
      const response = await s.app.inject({
        method: method.toUpperCase() as 'GET',
        url,
        headers: {
          ...admin,
          ...(body !== undefined && { 'content-type': 'application/json' }),
          ...headers,
        },
        ...(body !== undefined && {
          payload: typeof body === 'string' ? body : JSON.stringify(body),
        }),
      });
      const answered = response.body === '' ? undefined : response.json();
      return { status: String(response.statusCode), body: answered };
    };
    const keyOf = (id: string) => BigInt(`0x${id.slice('ep_'.length)}`).toString();

    beforeAll(async () => {
      // The 401 examples are failed authentications too: the 429 comes once they are all made.
      s = await startTestApp({
        env: {
          ADMIN_TOKENS: ADMIN,
          WEBHOOK_URLS: CONFIGURED,
          WEBHOOK_SECRET,
          AUTH_FAILURE_LIMIT: '40',
        },
      });
      const create = async () =>
        (await send('post', '/webhooks/endpoints', { url: 'https://receiver.example.com/a' })).body
          .id as string;
      ids.endpoint = await create();
      ids.disabled = await create();
      await send('patch', `/webhooks/endpoints/${ids.disabled}`, { disabled: true });
      const listed = (await send('get', '/webhooks/endpoints')).body as {
        id: string;
        url: string;
      }[];
      ids.configured = listed.find((endpoint) => endpoint.url === CONFIGURED)?.id ?? '';
      // A key sealed under k1, which the service's ring does not hold.
      ids.sealed = await create();
      const sealed = sealSecret(generateSecret(), [ringKey('k1')], {
        endpoint: keyOf(ids.sealed),
        field: 'secret',
      });
      await s.database.query('update webhook_endpoints set secret = $1 where id = $2', [
        sealed,
        keyOf(ids.sealed),
      ]);
      // Custom headers sealed under k1 too.
      ids.sealedHeaders = await create();
      const headers = sealSecret('{"X-A":"b"}', [ringKey('k1')], {
        endpoint: keyOf(ids.sealedHeaders),
        field: 'headers',
      });
      await s.database.query('update webhook_endpoints set headers = $1 where id = $2', [
        headers,
        keyOf(ids.sealedHeaders),
      ]);
    });
    afterAll(() => s.close());

    /** What the examples of a status of every operation are, when no request can make them. */
    const unprovoked: Record<string, string> = {
      '408':
        'Node answers it when a request arrives slower than HTTP_REQUEST_TIMEOUT_MS: a wait on the real clock, over a real socket (connections.test.ts)',
      '431':
        "Node's HTTP parser answers it on a real socket, which inject() does not go through (connections.test.ts)",
      '500 unexpected': 'a fault of the service, which no request can make on purpose',
      '503 database': 'the database must be down (test/faults)',
      'post /webhooks/endpoints/{id}/events/{eventId}/resend 409 disabled':
        'the endpoint needs an event in its attempt log, which only a delivery makes (webhook-replays.test.ts)',
      '503 starting':
        'only before the service has opened its database, which startTestApp has opened before it answers (process.test.ts)',
    };

    /** A request that makes each error example of the management API, by operation, status and name. */
    const provoke = (): Record<string, () => Promise<unknown>> => {
      const one = `/webhooks/endpoints/${ids.endpoint}`;
      const event = 'msg_0f1e2d3c4b5a69788796a5b4c3d2e1f0';
      // Each operation, and a body it accepts: 'ignored' where it reads none but counts it.
      const operations: [string, string, object | 'ignored' | undefined][] = [
        ['post', '/webhooks/endpoints', { url: 'https://receiver.example.com/b' }],
        ['get', '/webhooks/endpoints', undefined],
        ['get', '/webhooks/endpoints/{id}', undefined],
        ['patch', '/webhooks/endpoints/{id}', { description: 'moved' }],
        ['delete', '/webhooks/endpoints/{id}', 'ignored'],
        ['get', '/webhooks/endpoints/{id}/secret', undefined],
        ['post', '/webhooks/endpoints/{id}/secret/rotate', {}],
        ['get', '/webhooks/endpoints/{id}/headers', undefined],
        ['put', '/webhooks/endpoints/{id}/headers', { headers: {} }],
        ['get', '/webhooks/endpoints/{id}/attempts', undefined],
        ['post', '/webhooks/endpoints/{id}/recover', { since: '2026-01-01T00:00:00Z' }],
        ['post', '/webhooks/endpoints/{id}/events/{eventId}/resend', 'ignored'],
        ['post', '/webhooks/endpoints/{id}/test', {}],
        ['get', '/webhooks/event-types', undefined],
      ];
      const at = (path: string, id = ids.endpoint) =>
        path.replace('{id}', id).replace('{eventId}', event);
      const made: Record<string, () => Promise<unknown>> = {};
      for (const [method, path, body] of operations) {
        const key = `${method} ${path}`;
        made[`${key} 401 missing`] = () => send(method, at(path), undefined, { authorization: '' });
        made[`${key} 401 unknown`] = () =>
          send(method, at(path), undefined, { authorization: 'Bearer nope' });
        made[`${key} 403 otherScope`] = () =>
          send(method, at(path), undefined, { authorization: `Bearer ${TOKEN}` });
        const valid = typeof body === 'object' ? body : undefined;
        if (body !== undefined) {
          made[`${key} 413 tooLarge`] = () => send(method, at(path), 'x'.repeat(70_000));
        }
        if (valid) {
          made[`${key} 415 notJson`] = () =>
            send(method, at(path), 'x', { 'content-type': 'text/plain' });
        }
        if (path.includes('{id}')) {
          made[`${key} 404 endpoint`] = () => send(method, at(path, 'ep_00000000000000ff'), valid);
          made[`${key} 404 malformed`] = () => send(method, at(path, 'ep_1'), valid);
          made[`${key} 409 configured`] = () => send(method, at(path, ids.configured), valid);
        }
      }
      return {
        ...made,
        'post /webhooks/endpoints 400 url': () =>
          send('post', '/webhooks/endpoints', {
            url: 'https://user:password@receiver.example.com/plants',
          }),
        'post /webhooks/endpoints 400 secret': () =>
          send('post', '/webhooks/endpoints', {
            url: 'https://receiver.example.com/plants',
            secret: 'whsec_c2hvcnQ=',
          }),
        'get /webhooks/endpoints 400 limit': () => send('get', '/webhooks/endpoints?limit=1000'),
        'patch /webhooks/endpoints/{id} 400 url': () =>
          send('patch', '/webhooks/endpoints/ep_0000000000000001', { url: null }),
        'patch /webhooks/endpoints/{id} 400 secret': () =>
          send('patch', '/webhooks/endpoints/ep_0000000000000001', { secret: 'whsec_' }),
        'patch /webhooks/endpoints/{id} 415 notJson': () =>
          send('patch', one, 'x', { 'content-type': 'text/plain' }),
        'get /webhooks/endpoints/{id}/secret 500 key': () =>
          send('get', `/webhooks/endpoints/${ids.sealed}/secret`),
        'post /webhooks/endpoints/{id}/secret/rotate 400 key': () =>
          send('post', `${one}/secret/rotate`, { key: 'not-a-key' }),
        'get /webhooks/endpoints/{id}/headers 500 headers': () =>
          send('get', `/webhooks/endpoints/${ids.sealedHeaders}/headers`),
        'put /webhooks/endpoints/{id}/headers 400 reserved': () =>
          send('put', `${one}/headers`, { headers: { 'Content-Type': 'text/plain' } }),
        'put /webhooks/endpoints/{id}/headers 400 twice': () =>
          send('put', `${one}/headers`, {
            headers: { 'X-Greenhouse': 'north', 'x-greenhouse': 'south' },
          }),
        'put /webhooks/endpoints/{id}/headers 400 value': () =>
          send('put', `${one}/headers`, { headers: { 'X-Greenhouse': 'north\nsouth' } }),
        'put /webhooks/endpoints/{id}/headers 400 tooMany': () =>
          send('put', `${one}/headers`, {
            headers: Object.fromEntries(
              Array.from({ length: 21 }, (_, i) => [`X-Header-${i}`, 'x']),
            ),
          }),
        'get /webhooks/endpoints/{id}/attempts 400 limit': () =>
          send('get', `${one}/attempts?limit=1000`),
        'post /webhooks/endpoints/{id}/recover 400 since': () =>
          send('post', `${one}/recover`, { since: 'yesterday' }),
        'post /webhooks/endpoints/{id}/recover 409 disabled': () =>
          send('post', `/webhooks/endpoints/${ids.disabled}/recover`, {
            since: '2026-01-01T00:00:00Z',
          }),
        'post /webhooks/endpoints/{id}/events/{eventId}/resend 404 event': () =>
          send('post', `${one}/events/msg_test_0f1e2d3c4b5a69788796a5b4c3d2e1f0/resend`),
        'post /webhooks/endpoints/{id}/test 400 eventType': () =>
          send('post', `${one}/test`, { eventType: 'plantWatered' }),
        'post /webhooks/endpoints/{id}/test 409 disabled': () =>
          send('post', `/webhooks/endpoints/${ids.disabled}/test`, {}),
      };
    };

    /** Every error example of every operation of the management API: [key, status, value]. */
    const errorExamples = () =>
      Object.entries(document.paths as Record<string, Record<string, Operation>>)
        .filter(([path]) => path.startsWith('/webhooks/'))
        .flatMap(([path, operations]) =>
          Object.entries(operations).flatMap(([method, operation]) =>
            Object.entries(operation.responses)
              .filter(([status]) => Number(status) >= 400)
              .flatMap(([status, response]) =>
                Object.entries(response.content?.['application/json']?.examples ?? {}).map(
                  ([name, example]) =>
                    [`${method} ${path} ${status} ${name}`, status, example.value] as const,
                ),
              ),
          ),
        );
    const unprovokedReason = (key: string) => {
      const [, , status = '', name = ''] = key.split(' ');
      return unprovoked[key] ?? unprovoked[status] ?? unprovoked[`${status} ${name}`];
    };

    it('for every error example, each made by a request or said to be out of reach', async () => {
      const requests = provoke();
      const examples = errorExamples();
      expect(examples.length).toBeGreaterThan(100);
      const neither = examples
        .filter(([key]) => !requests[key] && !unprovokedReason(key) && !key.includes(' 429 '))
        .map(([key]) => key);
      expect(neither).toStrictEqual([]);
      for (const [key, status, value] of examples) {
        const request = requests[key];
        if (request) expect(await request(), key).toStrictEqual({ status, body: value });
      }
    });

    it('for the 429 of too many failed authentications, once the address has failed enough', async () => {
      const examples = errorExamples().filter(([key]) => key.includes(' 429 '));
      expect(examples.map(([key]) => key.split(' ')[3])).toContain('failedAuthentication');
      const nope = { authorization: 'Bearer nope' };
      for (let failures = 0; failures < 40; failures++) {
        if ((await send('get', '/webhooks/endpoints', undefined, nope)).status === '429') break;
      }
      for (const [key, status, value] of examples) {
        const [method = '', path = ''] = key.split(' ');
        const at = path.replace('{id}', ids.endpoint).replace('{eventId}', 'msg_0');
        expect(
          await send(method, at, undefined, { authorization: 'Bearer nope' }),
          key,
        ).toStrictEqual({
          status,
          body: value,
        });
      }
    });
  });
});
