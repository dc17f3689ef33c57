import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { generateClient, generatedDirectory } from '../../clients/typescript/scripts/generate.js';
import { startTestApp, type TestApp } from '../helpers/app.js';

let t: TestApp;
let output: string;
beforeAll(async () => {
  t = await startTestApp();
  output = mkdtempSync(join(tmpdir(), 'plant-store-client-'));
});
afterAll(async () => {
  rmSync(output, { recursive: true, force: true });
  await t.close();
});

/** Every file under `directory`, by its path from there, with its text. */
function filesUnder(directory: string): Record<string, string> {
  const files = readdirSync(directory, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name));
  return Object.fromEntries(
    files.sort().map((file) => [file.slice(directory.length + 1), readFileSync(file, 'utf8')]),
  );
}

it('the committed TypeScript client is what the generator makes of the served document', async () => {
  const response = await t.app.inject({ method: 'GET', url: '/openapi.json' });
  expect(response.statusCode).toBe(200);
  await generateClient(response.json(), output);
  expect(
    filesUnder(generatedDirectory),
    'clients/typescript/src/generated/ is stale: run npm run client:generate and commit it',
  ).toStrictEqual(filesUnder(output));
});
