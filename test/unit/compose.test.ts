import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { projectFile } from '../helpers/deploy-files.js';

const variableName = '[A-Za-z_][A-Za-z0-9_]*';
// `${NAME}`, `${NAME:-default}`, `${NAME?error}`... and bare `$NAME`; `$$` is a literal dollar.
const reference = new RegExp(`\\$(?:\\{(${variableName})|(${variableName}))`, 'g');

/** The variables Compose substitutes into the values of a parsed compose file. */
function interpolatedVariables(value: unknown): string[] {
  if (typeof value === 'string') {
    return [...value.replaceAll('$$', '').matchAll(reference)].map(
      (match) => (match[1] ?? match[2]) as string,
    );
  }
  if (Array.isArray(value)) return value.flatMap(interpolatedVariables);
  if (value !== null && typeof value === 'object') {
    return Object.values(value).flatMap(interpolatedVariables);
  }
  return [];
}

/** The variables an env file sets (`NAME=value` lines; comments and blank lines skipped). */
function envFileKeys(text: string): string[] {
  const assignment = new RegExp(`^\\s*(?:export\\s+)?(${variableName})\\s*=`);
  return text
    .split(/\r?\n/)
    .map((line) => assignment.exec(line)?.[1])
    .filter((name) => name !== undefined);
}

const interpolated = new Set(interpolatedVariables(parse(projectFile('docker-compose.yml'))));
const documented = new Set(envFileKeys(projectFile('.env.example')));

describe('.env.example', () => {
  it('sets every variable docker-compose.yml interpolates', () => {
    expect(interpolated.size).toBeGreaterThan(0);
    expect([...interpolated].filter((name) => !documented.has(name))).toStrictEqual([]);
  });

  it('sets no variable that docker-compose.yml ignores', () => {
    expect(documented.size).toBeGreaterThan(0);
    expect([...documented].filter((name) => !interpolated.has(name))).toStrictEqual([]);
  });
});
