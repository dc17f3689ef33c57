import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrationsFolder } from '../../src/db/migrate.js';
import { projectRoot, type RunningProcess, run } from './process.js';

/** A migration a test adds after those this build ships: its file's name and its SQL. */
export interface AddedMigration {
  tag: string;
  sql: string;
}

interface Journal {
  entries: { idx: number; version: string; when: number; tag: string; breakpoints: boolean }[];
}

/** Writes this build's migrations and `added` after them (as drizzle-kit would) into `folder`. */
function writeMigrations(folder: string, added: readonly AddedMigration[]): void {
  cpSync(migrationsFolder, folder, { recursive: true });
  const journalFile = join(folder, 'meta', '_journal.json');
  const journal: Journal = JSON.parse(readFileSync(journalFile, 'utf8'));
  for (const { tag, sql } of added) {
    const last = journal.entries.at(-1);
    journal.entries.push({
      idx: journal.entries.length,
      version: last?.version ?? '7',
      when: (last?.when ?? 0) + 1000,
      tag,
      breakpoints: true,
    });
    writeFileSync(join(folder, `${tag}.sql`), sql);
  }
  writeFileSync(journalFile, JSON.stringify(journal, null, 2));
}

/** A temporary migrations folder: this build's migrations, then `added`. */
export function migrationsWith(added: readonly AddedMigration[]): {
  folder: string;
  remove(): void;
} {
  const root = mkdtempSync(join(tmpdir(), 'plant-store-migrations-'));
  const folder = join(root, 'migrations');
  writeMigrations(folder, added);
  return { folder, remove: () => rmSync(root, { recursive: true, force: true }) };
}

/**
 * A copy of the built package whose `migrations/` also holds `added`, where `migrate(env)` runs
 * `node dist/migrate.js` as `npm run db:migrate` does after its build, and `start(env)` runs
 * `node dist/server.js`.
 */
export function packageWith(added: readonly AddedMigration[]): {
  migrate(env: Record<string, string>): RunningProcess;
  start(env: Record<string, string>): RunningProcess;
  remove(): void;
} {
  const root = mkdtempSync(join(tmpdir(), 'plant-store-package-'));
  // Copied, not linked: the build finds migrations/ beside the package.json above its own file.
  cpSync(join(projectRoot, 'dist'), join(root, 'dist'), { recursive: true });
  cpSync(join(projectRoot, 'package.json'), join(root, 'package.json'));
  symlinkSync(join(projectRoot, 'node_modules'), join(root, 'node_modules'));
  writeMigrations(join(root, 'migrations'), added);
  return {
    migrate: (env) => run(process.execPath, ['dist/migrate.js'], env, { cwd: root }),
    start: (env) => run(process.execPath, ['dist/server.js'], env, { cwd: root }),
    remove: () => rmSync(root, { recursive: true, force: true }),
  };
}
