import type { TSchema } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { EnvironmentSchema } from '../../src/config.js';
import { projectFile } from '../helpers/deploy-files.js';

// docs/configuration.md cannot drift from the environment the service reads: its table of the
// service's variables has one row per property of EnvironmentSchema, with the schema's default.
// The tables after it (the OpenTelemetry SDK's variables) are the SDK's, and not checked here.

const SECTION = "## The service's variables";

/** The rows of the section's table: each variable's name and its default as the page shows it. */
function documentedRows(): Map<string, string> {
  const page = projectFile('docs/configuration.md');
  const start = page.indexOf(SECTION);
  if (start < 0) throw new Error(`docs/configuration.md has no section ${SECTION}`);
  const end = page.indexOf('\n## ', start + SECTION.length);
  const rows = new Map<string, string>();
  for (const line of page.slice(start, end < 0 ? undefined : end).split('\n')) {
    const cells = /^\| `([^`]+)` \| ([^|]+) \|/.exec(line);
    if (cells) rows.set(cells[1] ?? '', (cells[2] ?? '').trim());
  }
  return rows;
}

/** The default as the table writes it: in backquotes, or `none` when there is none. */
function shownDefault(schema: TSchema): string {
  return schema.default === undefined ? 'none' : `\`${String(schema.default)}\``;
}

const variables = Object.entries(EnvironmentSchema.properties) as [string, TSchema][];

describe('docs/configuration.md', () => {
  it('has a row for every variable of the environment schema', () => {
    const rows = documentedRows();
    expect(variables.map(([name]) => name).filter((name) => !rows.has(name))).toStrictEqual([]);
  });

  it('has a row only for variables of the environment schema', () => {
    const names = new Set(variables.map(([name]) => name));
    expect([...documentedRows().keys()].filter((name) => !names.has(name))).toStrictEqual([]);
  });

  it.each(variables)('gives %s the default of the environment schema', (name, schema) => {
    expect(documentedRows().get(name)).toBe(shownDefault(schema));
  });
});
