import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, TOKEN } from '../helpers/app.js';
import { projectRoot } from '../helpers/process.js';

// The client as a user of another project gets it: packed, installed from the tarball into a
// fresh project, and run by plain Node.js with the README's example, unchanged but for the
// service's address and token.

const runFile = promisify(execFile);
const clientDirectory = join(projectRoot, 'clients/typescript');
const readme = readFileSync(join(clientDirectory, 'README.md'), 'utf8');

/** The body of the README's first fenced block whose info string is `info`. */
function block(info: string): string {
  const body = new RegExp(`^\`\`\`${info}\\n([\\s\\S]*?)^\`\`\`$`, 'm').exec(readme)?.[1];
  if (body === undefined) throw new Error(`the client README has no ${info} block`);
  return body;
}

let t: TestApp;
let scratch: string;
let project: string;
beforeAll(async () => {
  t = await startTestApp();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  scratch = mkdtempSync(join(tmpdir(), 'plant-store-client-package-'));
  project = join(scratch, 'project');
  await runFile('npm', ['pack', '--pack-destination', scratch], { cwd: clientDirectory });
  await runFile('mkdir', [project]);
  await runFile(
    'npm',
    ['install', '--no-audit', '--no-fund', join(scratch, 'plant-store-client-1.0.0.tgz')],
    { cwd: project },
  );
}, 120_000);
afterAll(async () => {
  await t.close();
  rmSync(scratch, { recursive: true, force: true });
});

describe('the packed TypeScript client', () => {
  it('is installed by the commands the README shows', () => {
    expect(readme).toContain('```sh\nnpm pack\n```');
    expect(readme).toContain(
      'npm install /path/to/plant-store/clients/typescript/plant-store-client-1.0.0.tgz',
    );
  });

  it('holds JavaScript and its declarations, which its exports point at', () => {
    const installed = join(project, 'node_modules/@plant-store/client');
    const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8'));
    for (const entry of Object.values(manifest.exports) as { types: string; default: string }[]) {
      expect(entry.default).toMatch(/^\.\/dist\/.+\.js$/);
      expect(entry.types).toMatch(/^\.\/dist\/.+\.d\.ts$/);
      expect(() => readFileSync(join(installed, entry.default))).not.toThrow();
      expect(() => readFileSync(join(installed, entry.types))).not.toThrow();
    }
  });

  it("runs the README's example under plain node in a fresh project, printing what it shows", async () => {
    const { port } = t.app.server.address() as AddressInfo;
    const example = block('js')
      .replace("'http://localhost:3000'", `'http://127.0.0.1:${port}'`)
      .replace("'dev-token-change-me'", `'${TOKEN}'`);
    writeFileSync(join(project, 'client-try.mjs'), example);
    const [command = '', ...shown] = block('console').trimEnd().split('\n');
    expect(command).toBe('$ node client-try.mjs');
    const { stdout } = await runFile(process.execPath, ['client-try.mjs'], { cwd: project });
    expect(stdout.trimEnd().split('\n')).toStrictEqual(shown);
  });
});
