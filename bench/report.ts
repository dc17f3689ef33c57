import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** What a suite hands the harness: its report's title, its Markdown, its settings. */
export interface SuiteReport {
  title: string;
  /** The suite's sections, in Markdown; the harness adds the command, settings and machine. */
  body: string;
  settings: Record<string, string | number>;
  /** A run failed or a check did not hold: the harness exits non-zero. */
  failed: boolean;
}

export const fixed = (value: number | null | undefined, digits: number) =>
  value === null || value === undefined ? '-' : value.toFixed(digits);

export const mebibytes = (bytes: number | undefined) =>
  bytes === undefined ? '-' : (bytes / 1024 / 1024).toFixed(1);

/** A plain-text table; the first `leftAligned` columns are left-aligned, the others right. */
export function textTable(header: string[], rows: string[][], leftAligned = 1): string {
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)),
  );
  const line = (cells: string[]) =>
    cells
      .map((cell, column) =>
        column < leftAligned
          ? cell.padEnd(widths[column] ?? 0)
          : cell.padStart(widths[column] ?? 0),
      )
      .join('  ')
      .trimEnd();
  return [
    line(header),
    widths.map((width) => '-'.repeat(width)).join('  '),
    ...rows.map(line),
  ].join('\n');
}

export function markdownTable(header: string[], rows: string[][], leftAligned = 1): string {
  const escapeCell = (cell: string) => cell.replaceAll('|', '\\|');
  return [
    `| ${header.map(escapeCell).join(' | ')} |`,
    `| ${header.map((_, column) => (column < leftAligned ? '---' : '---:')).join(' | ')} |`,
    ...rows.map((row) => `| ${row.map(escapeCell).join(' | ')} |`),
  ].join('\n');
}

const facts = (record: Record<string, string | number>) =>
  Object.entries(record)
    .map(([key, value]) => `- ${key}: ${value}`)
    .join('\n');

/** Writes `<folder>/<file>`: the suite's report under the command that made it. */
export function writeReport(
  folder: string,
  file: string,
  run: { date: string; command: string; machine: Record<string, string | number> },
  report: SuiteReport,
): string {
  mkdirSync(folder, { recursive: true });
  const path = join(folder, file);
  writeFileSync(
    path,
    `# ${report.title}

Run on ${run.date} with:

\`\`\`sh
${run.command}
\`\`\`

${report.body.trim()}

## Settings

${facts(report.settings)}

## Machine

${facts(run.machine)}
`,
  );
  return path;
}
