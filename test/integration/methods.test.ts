import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';

describe('a method that a path does not have', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.close());

  it.each([
    ['POST', '/healthz'],
    ['OPTIONS', '/healthz'],
    ['DELETE', '/readyz'],
    ['OPTIONS', '/readyz'],
    ['POST', '/openapi.json'],
    ['PUT', '/docs'],
    ['OPTIONS', '/metrics'],
    ['POST', '/metrics'],
  ])('answers %s %s with 405, Allow and the Error body', async (method, url) => {
    const response = await t.app.inject({ method: method as 'POST', url });
    expect(response.statusCode).toBe(405);
    expect(response.headers.allow).toBe('GET, HEAD');
    expect(response.headers['content-type']).toMatch(/^application\/json/);
    expect(response.json()).toStrictEqual({
      error: 405,
      message: `${method} is not allowed here; allowed: GET, HEAD`,
    });
  });

  it('still answers HEAD as GET without a body', async () => {
    const response = await t.app.inject({ method: 'HEAD', url: '/healthz' });
    expect(response.statusCode).toBe(200);
    expect(response.body).toBe('');
  });

  it('still answers an unknown path with 404', async () => {
    const response = await t.app.inject({ method: 'OPTIONS', url: '/nowhere' });
    expect(response.statusCode).toBe(404);
  });
});
