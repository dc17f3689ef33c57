import { spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { stdoutDestination } from '../../src/logger.js';

// The log is written in batches; what a process logged before it ends must still reach stdout,
// whole and in order, however it ends. Run against the build, as the service runs.
const logger = pathToFileURL(join(import.meta.dirname, '..', '..', 'dist', 'logger.js')).href;

function runLogging(level: string, ending: string): { lines: string[]; status: number | null } {
  const script = `
    const { createLogger } = await import(${JSON.stringify(logger)});
    const logger = createLogger('info');
    for (let i = 0; i < 1000; i++) logger.info({ i }, 'line');
    setImmediate(() => { logger.${level}('the last line'); ${ending} });
  `;
  // A process that hangs is stopped after a second: its lines must already be out.
  const result = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 1000,
    killSignal: 'SIGKILL',
  });
  return { lines: result.stdout.trim().split('\n'), status: result.status };
}

describe('the log', () => {
  it.each([
    ['error', 'process.exit(1)', 'process.exit(1);', 1],
    ['error', 'an uncaught exception', "throw new Error('crash');", 1],
    ['info', 'the end of the event loop', '', 0],
    ['fatal', 'a fatal line and a hang', 'setInterval(() => {}, 1000);', null],
  ])('keeps every line, %s the last, logged before %s', (level, _name, ending, status) => {
    const result = runLogging(level, ending);
    expect(result.status).toBe(status);
    expect(result.lines).toHaveLength(1001);
    const lines = result.lines.map((line) => JSON.parse(line));
    expect(lines.slice(0, -1).map((line) => line.i)).toStrictEqual(
      Array.from({ length: 1000 }, (_, i) => i),
    );
    expect(lines.at(-1)).toMatchObject({ level, msg: 'the last line' });
  });
});

describe('the batched destination', () => {
  it('keeps lines whole and in order around one longer than its buffer, non-ASCII ones too', () => {
    const folder = mkdtempSync(join(tmpdir(), 'plant-store-log-'));
    const file = join(folder, 'out.log');
    const fd = openSync(file, 'w');
    try {
      const destination = stdoutDestination(fd);
      const lines = [
        ...Array.from(
          { length: 50 },
          (_, i) => `{"i":${i},"name":"Monstera 🌿 ${'é'.repeat(i * 40)}"}`,
        ),
        `{"long":"${'🌿'.repeat(100_000)}"}`,
        ...Array.from({ length: 50 }, (_, i) => `{"j":${i}}`),
      ];
      for (const line of lines) destination.write(`${line}\n`);
      destination.flushSync();
      expect(readFileSync(file, 'utf8')).toBe(`${lines.join('\n')}\n`);
    } finally {
      closeSync(fd);
      rmSync(folder, { recursive: true, force: true });
    }
  });
});
