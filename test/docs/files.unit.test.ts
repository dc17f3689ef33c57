import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectFile } from '../helpers/deploy-files.js';
import { projectRoot } from '../helpers/process.js';

// The pages have the reader write keys, secrets and answers into files in the project's
// directory; git must ignore every one of them, or a `git add .` commits a key.

const pages = [
  'README.md',
  'clients/typescript/README.md',
  ...readdirSync(join(projectRoot, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

/** The code of a page's fenced blocks. */
function codeOf(page: string): string {
  return [...projectFile(page).matchAll(/^```[^\n]*\n([\s\S]*?)^```/gm)]
    .map(([, code = '']) => code)
    .join('\n');
}

/** The files a page's commands write in the directory they run in: `> name`, `tee name`, `-o name`. */
function writtenFiles(page: string): string[] {
  return [...codeOf(page).matchAll(/(?:>>?|\btee|\s-o)\s+([\w][\w.-]*)(?=\s|$)/gm)].map(
    ([, name = '']) => name,
  );
}

/** The names among `names` that git does not ignore (tracked or not, as a new clone sees them). */
function notIgnored(names: string[]): string[] {
  let ignored = '';
  try {
    ignored = execFileSync('git', ['check-ignore', '--no-index', ...names], {
      cwd: projectRoot,
      encoding: 'utf8',
    });
  } catch (error) {
    // Exit status 1: none of them is ignored.
    if ((error as { status?: number }).status !== 1) throw error;
  }
  const ignoredNames = new Set(ignored.split('\n'));
  return names.filter((name) => !ignoredNames.has(name));
}

const written = [...new Set(pages.flatMap(writtenFiles))].sort();

describe('the files the pages have the reader write', () => {
  it('are found: the webhook secret, the encryption key, the endpoint key', () => {
    expect(written).toEqual(
      expect.arrayContaining(['webhook-secret.txt', 'encryption-key.txt', 'endpoint-secret.json']),
    );
  });

  it('are all ignored by git', () => {
    expect(notIgnored(written)).toStrictEqual([]);
  });
});
