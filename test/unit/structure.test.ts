import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const src = join(root, 'src');

function filesUnder(folder: string): string[] {
  return readdirSync(folder, { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts'))
    .map((file) => join(folder, file));
}

const sources = filesUnder(src);
const text = new Map(sources.map((file) => [file, readFileSync(file, 'utf8')]));

// `import ... from './x.js'`, `export ... from './x.js'` and `import('./x.js')`, but not
// `import type` or an import whose every name is a type: those leave nothing at run time.
const staticImport = /^(import|export)\s+(type\s+)?([^;]*?)\s+from\s+'([^']+)'/gm;
const dynamicImport = /import\('(\.[^']+)'\)/g;

function valueImportsOf(file: string): string[] {
  const imported: string[] = [];
  const source = text.get(file) ?? '';
  for (const [, , typeOnly, names = '', target = ''] of source.matchAll(staticImport)) {
    if (typeOnly || !target.startsWith('.')) continue;
    const list = names.match(/^\{([\s\S]*)\}$/)?.[1];
    const allTypes = list
      ?.split(',')
      .map((name) => name.trim())
      .filter(Boolean)
      .every((name) => name.startsWith('type '));
    if (!allTypes) imported.push(target);
  }
  for (const [, target = ''] of source.matchAll(dynamicImport)) imported.push(target);
  return imported.map((target) => resolve(dirname(file), target.replace(/\.js$/, '.ts')));
}

const graph = new Map(sources.map((file) => [file, valueImportsOf(file)]));
const name = (file: string) => relative(src, file);
/** The folder of src/ a file lives in; '' for the files at its top. */
const folderOf = (file: string): string => {
  const [first = '', ...rest] = name(file).split('/');
  return rest.length > 0 ? first : '';
};

/** Each cycle of `edges`, as the path that closes it. */
function cycles(edges: Map<string, Set<string>>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (node: string) => {
    state.set(node, 'open');
    path.push(node);
    for (const next of edges.get(node) ?? []) {
      if (state.get(next) === 'open') found.push([...path.slice(path.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    path.pop();
    state.set(node, 'done');
  };
  for (const node of edges.keys()) if (!state.has(node)) visit(node);
  return found;
}

describe('the shape of src/', () => {
  it('has no import cycle between files', () => {
    const edges = new Map([...graph].map(([file, targets]) => [file, new Set(targets)]));
    expect(cycles(edges).map((cycle) => cycle.map(name).join(' -> '))).toEqual([]);
  });

  it('has no import cycle between its folders', () => {
    const edges = new Map<string, Set<string>>();
    for (const [file, targets] of graph) {
      const from = folderOf(file);
      if (from === '') continue;
      for (const target of targets) {
        const to = folderOf(target);
        if (to !== '' && to !== from) edges.set(from, (edges.get(from) ?? new Set()).add(to));
      }
    }
    expect(cycles(edges).map((cycle) => cycle.join(' -> '))).toEqual([]);
  });

  it('keeps plants/ free of webhooks/, even of its types', () => {
    const plants = sources.filter((file) => folderOf(file) === 'plants');
    const offending = plants.filter((file) => /from '\.\.\/webhooks\//.test(text.get(file) ?? ''));
    expect(offending.map(name)).toEqual([]);
  });

  it('keeps db/ free of HTTP', () => {
    const db = sources.filter((file) => folderOf(file) === 'db');
    const offending = db.filter((file) =>
      /from '(\.\.\/http\/|fastify)/.test(text.get(file) ?? ''),
    );
    expect(offending.map(name)).toEqual([]);
  });

  it('lets nothing import server.ts, and keeps it a thin entry', () => {
    const importers = [...graph].filter(([, targets]) => targets.includes(join(src, 'server.ts')));
    expect(importers.map(([file]) => name(file))).toEqual([]);
    expect((text.get(join(src, 'server.ts')) ?? '').split('\n').length).toBeLessThanOrEqual(120);
  });

  // A file is one job: past about 700 lines, it is doing a second one.
  it('has no file over 700 lines', () => {
    const long = sources.filter((file) => (text.get(file) ?? '').split('\n').length > 700);
    expect(long.map(name)).toEqual([]);
  });

  it("reaches into no library's private fields", () => {
    const internals = [
      /\._\.session/,
      /\bprepareQuery\(/,
      /pino\.symbols|chindingsSym|\bsymbols\b.*from 'pino'/,
      /as unknown as Metric\b/,
    ];
    const offending = sources.filter((file) =>
      internals.some((pattern) => pattern.test(text.get(file) ?? '')),
    );
    expect(offending.map(name)).toEqual([]);
  });

  it('wires the repository and the webhook dispatcher only in src/service.ts', () => {
    const wiring = /(?<!function )\b(createPlantRepository|createDispatcher|createOutbox)\(/;
    const elsewhere = [
      ...sources.filter((file) => folderOf(file) === '' && file !== join(src, 'service.ts')),
      ...filesUnder(join(root, 'test/helpers')),
      ...filesUnder(join(root, 'bench')),
    ].filter((file) => wiring.test(text.get(file) ?? readFileSync(file, 'utf8')));
    expect(elsewhere.map((file) => relative(root, file))).toEqual([]);
  });
});

describe('the shape of bench/', () => {
  const bench = join(root, 'bench');
  const files = filesUnder(bench);
  // Every relative import, types included: a circle of types is still two files that need each other.
  const anyImport = /^(?:import|export)\s[^;]*?\sfrom\s+'(\.[^']+)'/gm;

  it('has no import cycle between files, even of types', () => {
    const edges = new Map(
      files.map((file) => [
        file,
        new Set(
          [...readFileSync(file, 'utf8').matchAll(anyImport)].map(([, target = '']) =>
            resolve(dirname(file), target.replace(/\.js$/, '.ts')),
          ),
        ),
      ]),
    );
    expect(
      cycles(edges).map((cycle) => cycle.map((file) => relative(root, file)).join(' -> ')),
    ).toEqual([]);
  });
});
