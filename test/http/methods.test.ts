import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, TOKEN } from '../helpers/app.js';

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

describe('the methods the API does not serve', () => {
  const ADMIN = 'admin-token-405';
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ env: { ADMIN_TOKENS: ADMIN } });
  });
  afterAll(() => t.close());

  it('are 405 on every path of the document, Allow naming its operations in one order', async () => {
    const document = (await t.app.inject({ url: '/openapi.json' })).json() as {
      paths: Record<string, Record<string, unknown>>;
    };
    const order = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'];
    const paths = Object.entries(document.paths).filter(([path]) =>
      /^\/(plants|webhooks)/.test(path),
    );
    expect(paths.length).toBeGreaterThan(10);
    for (const [path, operations] of paths) {
      const methods = Object.keys(operations).map((method) => method.toUpperCase());
      if (methods.includes('GET')) methods.push('HEAD');
      const allow = order.filter((method) => methods.includes(method)).join(', ');
      const response = await t.app.inject({
        method: 'OPTIONS',
        url: path
          .replace('{eventId}', `msg_${'0'.repeat(32)}`)
          .replace('{id}', path.startsWith('/plants') ? '1' : 'ep_0000000000000001'),
        headers: { authorization: `Bearer ${path.startsWith('/plants') ? TOKEN : ADMIN}` },
      });
      expect([path, response.statusCode, response.headers.allow]).toStrictEqual([path, 405, allow]);
    }
  });
});
