import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { migrationsFolder, OUTSIDE_TRANSACTION_MARKER } from '../../src/db/migrate.js';
import { projectRoot } from '../helpers/process.js';

// The checks CI runs over migrations/: squawk's lint (scripts/lint-migrations.sh) and the
// drift check (scripts/check-drift.sh), each shown to pass on what ships and to fail.

const folders: string[] = [];
afterEach(() => {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

/** A copy of the shipped migrations, with `files` written into it. */
function migrationsCopy(files: Record<string, string> = {}): string {
  const folder = join(mkdtempSync(join(tmpdir(), 'plant-store-checks-')), 'migrations');
  folders.push(folder);
  cpSync(migrationsFolder, folder, { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(folder, name), text);
  return folder;
}

function script(name: string, folder: string): { status: number | null; output: string } {
  const result = spawnSync('bash', [join(projectRoot, 'scripts', name), folder], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH ?? '', NO_COLOR: '1' },
  });
  return { status: result.status, output: result.stdout + result.stderr };
}

describe('the migration lint', () => {
  it('passes the migrations this build ships', () => {
    expect(script('lint-migrations.sh', migrationsCopy())).toMatchObject({ status: 0 });
  });

  it('fails an index on plants built without CONCURRENTLY', () => {
    const folder = migrationsCopy({
      '0100_name_index.sql': 'CREATE INDEX "plants_name_idx" ON "plants" ("name");\n',
    });
    const { status, output } = script('lint-migrations.sh', folder);
    expect(status).toBe(1);
    expect(output).toContain('require-concurrent-index-creation');
  });

  it('fails a column added NOT NULL, and a type change', () => {
    const folder = migrationsCopy({
      '0100_note.sql':
        'ALTER TABLE "plants" ADD COLUMN "note" text NOT NULL;\nALTER TABLE "plants" ALTER COLUMN "tag" TYPE varchar(300);\n',
    });
    const { status, output } = script('lint-migrations.sh', folder);
    expect(status).toBe(1);
    expect(output).toContain('adding-required-field');
    expect(output).toContain('changing-column-type');
  });

  it('asks a migration marked to run outside a transaction to be safe to run again', () => {
    const build = 'CREATE INDEX CONCURRENTLY "plants_name_idx" ON "plants" ("name");\n';
    const unsafe = script(
      'lint-migrations.sh',
      migrationsCopy({ '0100_name_index.sql': `${OUTSIDE_TRANSACTION_MARKER}\n${build}` }),
    );
    expect(unsafe.status).toBe(1);
    expect(unsafe.output).toContain('prefer-robust-stmts');
    const again = build.replace('CONCURRENTLY', 'CONCURRENTLY IF NOT EXISTS');
    const safe = script(
      'lint-migrations.sh',
      migrationsCopy({ '0100_name_index.sql': `${OUTSIDE_TRANSACTION_MARKER}\n${again}` }),
    );
    expect(safe).toMatchObject({ status: 0 });
  });
});

describe('the drift check', () => {
  it('fails when the schema has tables the migrations do not create', () => {
    const folder = migrationsCopy();
    const journalFile = join(folder, 'meta', '_journal.json');
    const journal = JSON.parse(readFileSync(journalFile, 'utf8'));
    // Without its last two migrations the folder lacks the webhook endpoints' tables.
    for (const { idx, tag } of journal.entries.splice(-2)) {
      unlinkSync(join(folder, `${tag}.sql`));
      unlinkSync(join(folder, 'meta', `${String(idx).padStart(4, '0')}_snapshot.json`));
    }
    writeFileSync(journalFile, JSON.stringify(journal));
    const { status, output } = script('check-drift.sh', folder);
    expect(status).toBe(1);
    expect(output).toMatch(
      /drift: the schema in src\/ differs .* drizzle-kit generate would write/,
    );
    // The folder checked is left as it was.
    expect(JSON.parse(readFileSync(journalFile, 'utf8')).entries).toHaveLength(
      journal.entries.length,
    );
  }, 30_000);
});

it('names the same marker in the lint script as the runner does', () => {
  expect(readFileSync(join(projectRoot, 'scripts', 'lint-migrations.sh'), 'utf8')).toContain(
    `marker='${OUTSIDE_TRANSACTION_MARKER}'`,
  );
});
