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

// Every relative import, `import type` included: a circle through types is still two files that
// must change together.
const staticImport = /^(?:import|export)\s[^;]*?\sfrom\s+'(\.[^']+)'/gm;
const dynamicImport = /import\('(\.[^']+)'\)/g;

function importsOf(file: string): string[] {
  const source = text.get(file) ?? '';
  return [...source.matchAll(staticImport), ...source.matchAll(dynamicImport)].map(
    ([, target = '']) => resolve(dirname(file), target.replace(/\.js$/, '.ts')),
  );
}

const graph = new Map(sources.map((file) => [file, importsOf(file)]));
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

  it('wires the repository only in src/service.ts, and the webhooks only in src/webhooks/open.ts', () => {
    const wired = (pattern: RegExp, where: string) =>
      [...sources, ...filesUnder(join(root, 'test/helpers')), ...filesUnder(join(root, 'bench'))]
        .filter((file) => file !== join(src, where))
        .filter((file) => pattern.test(text.get(file) ?? readFileSync(file, 'utf8')))
        .map((file) => relative(root, file));
    expect(wired(/(?<!function )\bcreatePlantRepository\(/, 'service.ts')).toEqual([]);
    expect(wired(/(?<!function )\bcreateDispatcher\(/, 'webhooks/open.ts')).toEqual([]);
  });
});

/**
 * The rooms of src/webhooks/, each a folder of files that do one job: which rooms each may import
 * (types included), and the lines it holds at most, sized by what it does with room for about a
 * sixth more: past it, a room is doing a second job. What all rooms share
 * is `tables/`; the files at the top of webhooks/ compose the rooms, and no room imports them.
 */
const webhookRooms: Record<string, { imports: string[]; lines: number }> = {
  // The tables, their ids and triggers, and the order of locks every statement keeps.
  tables: { imports: [], lines: 400 },
  // Event types: names, payload schemas, bodies, the document's `webhooks` section.
  catalog: { imports: ['tables'], lines: 500 },
  // The key ring and its rekey, signatures, custom headers, the destination guard.
  security: { imports: ['tables'], lines: 900 },
  // The one engine: events, fan-out, claim, attempt, outcome, attempt log; its timing.
  delivery: { imports: ['tables', 'catalog', 'security'], lines: 2900 },
  // The management API: routes, their schemas, examples and statements.
  api: { imports: ['tables', 'catalog', 'security', 'delivery'], lines: 2400 },
};
const webhooks = join(src, 'webhooks');
/** The room of src/webhooks/ a file lives in; '' for the files at its top, undefined outside. */
const roomOf = (file: string): string | undefined => {
  const path = relative(webhooks, file);
  if (path.startsWith('..')) return undefined;
  const [first = '', ...rest] = path.split('/');
  return rest.length > 0 ? first : '';
};

describe('the rooms of src/webhooks/', () => {
  const files = sources.filter((file) => roomOf(file) !== undefined);

  it('has only the rooms the rule names', () => {
    const rooms = new Set(files.map(roomOf).filter((room) => room !== ''));
    expect([...rooms].sort()).toEqual(Object.keys(webhookRooms).sort());
  });

  it('lets each room import only the rooms its rule names, and none the files above it', () => {
    const offending: string[] = [];
    for (const file of files) {
      const from = roomOf(file);
      if (from === '' || from === undefined) continue;
      for (const target of graph.get(file) ?? []) {
        const to = roomOf(target);
        if (to === undefined || to === from || webhookRooms[from]?.imports.includes(to)) continue;
        offending.push(`${name(file)} -> ${name(target)}`);
      }
    }
    expect(offending).toEqual([]);
  });

  it('keeps each room within the lines its rule gives it', () => {
    const over = Object.entries(webhookRooms).flatMap(([room, { lines }]) => {
      const held = files
        .filter((file) => roomOf(file) === room)
        .reduce((sum, file) => sum + (text.get(file) ?? '').split('\n').length, 0);
      return held > lines ? [`${room}: ${held} lines, ${lines} at most`] : [];
    });
    expect(over).toEqual([]);
  });
});

describe('the command-line tools', () => {
  // A package that is an HTTP plugin or the HTTP framework itself, imported for its values.
  const httpPackage = /^import\s+(?!type\s)[^;]*?\sfrom\s+'(fastify|@fastify\/[^']+)'/m;

  it.each(['migrate.ts', 'redeliver.ts', 'rekey.ts'])('%s loads no HTTP plugin', (tool) => {
    const reached = new Set<string>();
    const visit = (file: string) => {
      if (reached.has(file)) return;
      reached.add(file);
      for (const target of graph.get(file) ?? []) visit(target);
    };
    visit(join(src, tool));
    const loading = [...reached].filter((file) => httpPackage.test(text.get(file) ?? ''));
    expect(loading.map(name)).toEqual([]);
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
