import SwaggerParser from '@apidevtools/swagger-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';

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

  it('applies the bearerAuth scheme to the whole service', () => {
    expect(document.components.securitySchemes).toStrictEqual({
      bearerAuth: { type: 'http', scheme: 'bearer' },
    });
    expect(document.security).toStrictEqual([{ bearerAuth: [] }]);
    expect(document.paths['/plants'].post.security).toBeUndefined();
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

  it('serves the assets the page loads', async () => {
    const response = await t.app.inject({
      method: 'GET',
      url: '/docs/static/swagger-ui-bundle.js',
    });
    expect(response.statusCode).toBe(200);
  });
});
