import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import { type BrowserContext, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, storedPlant, type TestApp, TOKEN } from '../helpers/app.js';
import { chromiumPath } from '../helpers/chromium.js';

// /docs as a person opens it: in a real Chromium, by a host name that is not localhost (it still
// leads to 127.0.0.1, without touching the network), over plain HTTP and through a proxy that
// terminates TLS. Debian's Chromium, never a browser download; vitest.config.ts says in one line
// when it is missing and this file is skipped (CI installs it).

const HOST = 'plant-store.test';

/** A TLS-terminating proxy in front of `port`, with a self-signed certificate for HOST. */
async function startTlsProxy(port: number, folder: string): Promise<TlsServer> {
  execFileSync(
    'openssl',
    [
      ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'],
      ...['-keyout', join(folder, 'key.pem'), '-out', join(folder, 'cert.pem'), '-days', '1'],
      ...['-subj', `/CN=${HOST}`, '-addext', `subjectAltName=DNS:${HOST}`],
    ],
    { stdio: 'ignore' },
  );
  const proxy = createTlsServer(
    { key: readFileSync(join(folder, 'key.pem')), cert: readFileSync(join(folder, 'cert.pem')) },
    (client) => {
      const upstream = connect(port, '127.0.0.1');
      client.pipe(upstream).pipe(client);
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.destroy());
    },
  );
  proxy.listen(0, '127.0.0.1');
  await once(proxy, 'listening');
  return proxy;
}

describe.skipIf(chromiumPath === undefined)('GET /docs in Chromium', () => {
  let t: TestApp;
  let folder: string;
  let browser: BrowserContext;
  let tlsProxy: TlsServer;
  const origins: Record<'http' | 'https', string> = { http: '', https: '' };

  beforeAll(async () => {
    t = await startTestApp();
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = t.app.server.address() as { port: number };
    folder = mkdtempSync(join(tmpdir(), 'plant-store-chromium-'));
    tlsProxy = await startTlsProxy(port, folder);
    origins.http = `http://${HOST}:${port}`;
    origins.https = `https://${HOST}:${(tlsProxy.address() as { port: number }).port}`;
    browser = await chromium.launchPersistentContext(join(folder, 'profile'), {
      executablePath: chromiumPath,
      headless: true,
      chromiumSandbox: false,
      // The proxy's certificate is self-signed.
      ignoreHTTPSErrors: true,
      args: [
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
        `--host-resolver-rules=MAP ${HOST} 127.0.0.1`,
      ],
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    tlsProxy?.close();
    await t?.close();
    if (folder) rmSync(folder, { recursive: true, force: true });
  });

  it.each([
    ['http', 9007199254740991],
    ['https', 1],
  ] as const)(
    'renders the API over %s and creates a plant with "Try it out"',
    async (scheme, id) => {
      const page = await browser.newPage();
      const problems: string[] = [];
      page.on('console', (message) => {
        if (message.type() === 'error' || message.type() === 'warning') {
          problems.push(`console ${message.type()}: ${message.text()}`);
        }
      });
      page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
      page.on('requestfailed', (request) =>
        problems.push(`failed: ${request.url()} ${request.failure()?.errorText}`),
      );
      // Runs in the page, before its own scripts.
      await page.addInitScript({
        content: `document.addEventListener('securitypolicyviolation', (event) => {
        console.error('CSP violation: ' + event.violatedDirective + ' ' + event.blockedURI);
      });`,
      });
      try {
        await page.goto(`${origins[scheme]}/docs`);
        const operations = page.locator('.opblock');
        await operations.first().waitFor({ timeout: 20_000 });
        expect(await page.locator('.opblock-summary-path').allTextContents()).toEqual(
          expect.arrayContaining(['/plants', '/plants/{id}', '/healthz', '/readyz']),
        );

        await page.locator('.auth-wrapper button.authorize').click();
        // The plant API's scheme; the dialog also offers the management API's (adminBearer).
        const plantAuth = page.locator('.auth-container').filter({ hasText: 'bearerAuth' });
        await plantAuth.locator('input').fill(TOKEN);
        await plantAuth.locator('.auth-btn-wrapper button.authorize').click();
        await page.locator('.auth-btn-wrapper button.btn-done').first().click();

        const create = page.locator('#operations-plants-addPlant');
        await create.locator('.opblock-summary').click();
        // The first example of NewPlant is what "Try it out" offers; the second is picked here.
        await create.locator('.try-out__btn').click();
        if (id === 1) {
          await create
            .locator('.opblock-section-request-body .examples-select select')
            .selectOption('fern');
        }
        await create.locator('button.execute').click();
        const status = create.locator('.live-responses-table tbody .response-col_status').first();
        await status.waitFor({ timeout: 20_000 });
        expect((await status.textContent())?.trim()).toBe('200');
        expect(await create.locator('.request-url').textContent()).toContain(
          `${origins[scheme]}/plants`,
        );
        expect(await storedPlant(t.database, id)).toMatchObject({ id: String(id) });
        expect(problems).toStrictEqual([]);
      } finally {
        await page.close();
      }
    },
  );
});
