import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { projectFile } from '../helpers/deploy-files.js';

// The README's examples are the service's answers: every `$ curl ...` of its console blocks is
// run here, in order, with bash and curl, against the service on a store that starts empty, and
// its output is compared with what the README shows after it.

const README_TOKEN = 'dev-token-change-me';
const README_ORIGIN = 'http://localhost:3000';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

// What the README says it leaves out of every answer it shows.
const leftOut = new Set([
  'x-content-type-options',
  'content-security-policy',
  'x-frame-options',
  'referrer-policy',
  'cache-control',
  'content-length',
  'date',
  'connection: keep-alive',
  'keep-alive',
]);

interface Example {
  line: number;
  command: string;
  output: string;
}

/** The commands of the README's console blocks, each with the output shown after it. */
function readmeExamples(): Example[] {
  const examples: Example[] = [];
  let inConsole = false;
  let current: (Example & { continued: boolean }) | undefined;
  const finish = () => {
    if (current) examples.push({ ...current, output: current.output.trimEnd() });
    current = undefined;
  };
  projectFile('README.md')
    .split('\n')
    .forEach((text, index) => {
      if (text.startsWith('```')) {
        finish();
        inConsole = text === '```console';
      } else if (!inConsole) {
        return;
      } else if (current?.continued) {
        current.command += `\n${text}`;
        current.continued = text.endsWith('\\');
      } else if (text.startsWith('$ ')) {
        finish();
        current = { line: index + 1, command: text.slice(2), output: '', continued: false };
        current.continued = text.endsWith('\\');
      } else if (current) {
        current.output += `${text}\n`;
      }
    });
  return examples;
}

interface HttpAnswer {
  status: string;
  headers: [string, string][];
  body: string;
}

function parseAnswer(text: string): HttpAnswer {
  const [head = '', ...body] = text.replaceAll('\r\n', '\n').split('\n\n');
  const [status = '', ...headers] = head.split('\n');
  return {
    status,
    headers: headers.map((header) => {
      const colon = header.indexOf(':');
      return [header.slice(0, colon).toLowerCase(), header.slice(colon + 1).trim()];
    }),
    body: body.join('\n\n').trimEnd(),
  };
}

const examples = readmeExamples().filter(({ command }) => command.includes('curl'));

describe('the README', () => {
  let t: TestApp;
  let origin: string;

  beforeAll(async () => {
    t = await startTestApp({ env: { API_TOKENS: README_TOKEN } });
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    origin = `http://127.0.0.1:${(t.app.server.address() as { port: number }).port}`;
  });
  afterAll(() => t.close());

  it('shows examples to check', () => {
    expect(examples.length).toBeGreaterThan(10);
  });

  it.each(examples)('answers as it shows at line $line', async ({ command, output }) => {
    const { stdout } = await promisify(execFile)(
      'bash',
      ['-c', command.replaceAll(README_ORIGIN, origin)],
      { env: { PATH: process.env.PATH ?? '' } },
    );
    if (!output.startsWith('HTTP/')) {
      expect(stdout.trimEnd()).toBe(output);
      return;
    }
    const shown = parseAnswer(output);
    const answer = parseAnswer(stdout);
    expect(answer.status).toBe(shown.status);
    expect(answer.body).toBe(shown.body);
    for (const [name, value] of shown.headers) {
      const sent = answer.headers.find(([candidate]) => candidate === name)?.[1];
      if (name === 'x-request-id') expect(sent).toMatch(UUID);
      else expect(sent, name).toBe(value);
    }
    const unshown = answer.headers
      .filter(([name]) => !shown.headers.some(([candidate]) => candidate === name))
      .map(([name, value]) => (name === 'connection' ? `${name}: ${value}` : name))
      .filter((header) => !leftOut.has(header));
    expect(unshown).toStrictEqual([]);
  });
});
