import { execFile, execFileSync, spawnSync } from 'node:child_process';
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { projectRoot } from '../helpers/process.js';

// scripts/build.js, which `npm start` and `npm test` run first, on a copy of the project: it must
// build once, and again whenever what it reads has changed, never on stale output.

let copy: string;

function build(): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['scripts/build.js'], { cwd: copy }, (error, stdout, stderr) => {
      resolve({ code: error ? Number(error.code ?? 1) : 0, output: stdout + stderr });
    });
  });
}

beforeAll(() => {
  copy = mkdtempSync(join(tmpdir(), 'plant-store-build-'));
  for (const path of ['src', 'scripts', 'package.json', 'package-lock.json', 'tsconfig.json']) {
    cpSync(join(projectRoot, path), join(copy, path), { recursive: true });
  }
  symlinkSync(join(projectRoot, 'node_modules'), join(copy, 'node_modules'));
});
afterAll(() => rmSync(copy, { recursive: true, force: true }));

describe('scripts/build.js', { timeout: 60_000 }, () => {
  it('builds a tree that has never been built, and says so', async () => {
    const { code, output } = await build();
    expect(code).toBe(0);
    expect(output).toContain('plant-store: compiling src/ into dist/ (no build yet)');
    expect(existsSync(join(copy, 'dist', 'server.js'))).toBe(true);
    expect(existsSync(join(copy, 'dist', 'app.js'))).toBe(true);
  });

  it('builds nothing when nothing it reads has changed', async () => {
    const { code, output } = await build();
    expect(code).toBe(0);
    expect(output).toMatch(/^plant-store: dist\/ is up to date with src\/ \(built [\d-]+T/);
  });

  it('builds again when a source file changed, whatever its time stamp, and names it', async () => {
    const file = join(copy, 'src', 'config.ts');
    writeFileSync(
      file,
      `${readFileSync(file, 'utf8')}\nexport const changedForTheBuildTest = 42;\n`,
    );
    // Older than the last build: a check of time stamps would miss the change.
    utimesSync(file, new Date('2000-01-01'), new Date('2000-01-01'));
    const { code, output } = await build();
    expect(code).toBe(0);
    expect(output).toContain('compiling src/ into dist/ (src/config.ts changed)');
    expect(readFileSync(join(copy, 'dist', 'config.js'), 'utf8')).toContain(
      'changedForTheBuildTest',
    );
  });

  it('builds again when the dependencies changed', async () => {
    appendFileSync(join(copy, 'package-lock.json'), '\n');
    expect((await build()).output).toContain('(package-lock.json changed)');
  });

  it('keeps the last good dist/ when a build fails, and tries again on the next start', async () => {
    appendFileSync(join(copy, 'src', 'logger.ts'), '\nexport const = ;\n');
    const failed = await build();
    expect(failed.code).toBe(1);
    expect(existsSync(join(copy, 'dist', 'server.js'))).toBe(true);
    expect((await build()).output).toContain('compiling src/ into dist/ (src/logger.ts changed)');
  });
});

// The machine's own node, when it is older than the oldest supported one (as Node.js 20 is).
const oldNode = ['/usr/bin/node', '/usr/local/bin/node'].find((path) => {
  if (!existsSync(path)) return false;
  const [major = 0, minor = 0] = execFileSync(path, ['-p', 'process.versions.node'], {
    encoding: 'utf8',
  })
    .trim()
    .split('.')
    .map(Number);
  return major < 22 || (major === 22 && minor < 15);
});

describe('on a Node.js older than 22.15', () => {
  it.skipIf(oldNode === undefined)('stops at once and names the Node.js it needs', () => {
    const run = spawnSync(oldNode ?? 'node', ['scripts/build.js'], {
      cwd: projectRoot,
      encoding: 'utf8',
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(
      /^plant-store needs Node\.js 22\.15 or later \(24 recommended\); this is Node\.js v\d+\.\d+\.\d+\.\n$/,
    );
  });
});
