import { existsSync, readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectFile } from '../helpers/deploy-files.js';
import { projectRoot } from '../helpers/process.js';

// Every relative link of README.md and docs/ leads somewhere: to a file or folder of the
// project, and, when it names an anchor in a Markdown page, to a heading of that page.

const pages = [
  'README.md',
  ...readdirSync(join(projectRoot, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

/** The text of a page without its code: links inside code blocks and spans are not links. */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
}

/** The anchors GitHub gives a page's headings. */
function anchorsOf(page: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, heading = ''] of prose(projectFile(page)).matchAll(/^#{1,6} (.+)$/gm)) {
    const slug = heading
      .replaceAll('`', '')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\p{M}\p{Pc}\- ]/gu, '')
      .replaceAll(' ', '-');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

/** The relative links of a page: inline Markdown links whose target has no scheme. */
function relativeLinks(page: string): string[] {
  return [...prose(projectFile(page)).matchAll(/\]\(([^)\s]+)\)/g)]
    .map(([, target = '']) => target)
    .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

it('finds the relative links of the README and docs/', () => {
  expect(pages.flatMap(relativeLinks).length).toBeGreaterThan(40);
});

describe.each(pages)('%s', (page) => {
  it('links only to files and headings that exist', () => {
    const broken = relativeLinks(page).filter((target) => {
      const [path = '', anchor] = target.split('#');
      const file =
        path === '' ? page : relative(projectRoot, join(projectRoot, dirname(page), path));
      if (!existsSync(join(projectRoot, file))) return true;
      return anchor !== undefined && !(file.endsWith('.md') && anchorsOf(file).has(anchor));
    });
    expect(broken).toStrictEqual([]);
  });
});
