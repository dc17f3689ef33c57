import { execFile, spawn } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createScratchDatabase, type ScratchDatabase, testEngine } from '../helpers/database.js';
import { projectFile } from '../helpers/deploy-files.js';
import {
  freePort,
  projectRoot,
  type RunningProcess,
  run,
  startServer,
} from '../helpers/process.js';

// The README and the pages of docs/ are run as a reader runs them: every command of their
// console blocks, page after page in the order of the README's map, on one fresh store, its
// output compared with what the page shows after it (docs/development.md says how). Then the
// store is emptied as the README's "Start again" says, and the pages are walked once more.

const README_ORIGIN = 'http://localhost:3000';
const RECEIVER_PORT = '4000';
// The PostgreSQL server the pages name (the README's Start again empties it), and its address
// as the log writes it: here, the test's scratch database on its server.
const README_DATABASE = 'postgres://postgres@127.0.0.1:5432/postgres';
const README_SERVER = '127.0.0.1:5432';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
// A Consistency-Token as the service writes one: a timeline, then a WAL position.
const CONSISTENCY_TOKEN = /^t\d+-[0-9A-F]{1,8}\/[0-9A-F]{1,8}$/;

// The headers whose values vary from run to run, and the form they must have.
const varying = new Map([
  ['x-request-id', UUID],
  ['consistency-token', CONSISTENCY_TOKEN],
]);

// What the pages say they leave out of every answer they show.
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

// The commands a ```sh block may show, which no test here runs, and why. Keep this list short.
const notRun: { command: RegExp; why: string }[] = [
  { command: /^npm ci$/, why: 'it installs the dependencies this test runs with' },
  {
    command: /^(TEST_DATABASE_URL=\S+ )?(npm test|npm run build|npx vitest run .+)$/,
    why: 'the test suite itself, and its build',
  },
  {
    command: /^(DATABASE_URL|OTEL_EXPORTER_OTLP_ENDPOINT)=.* npm start$/,
    why: 'a server, pooler or collector at the address shown; process.test.ts, pooler.test.ts and tracing.test.ts start the service so',
  },
  {
    command: /^docker /,
    why: 'a container runtime and an image build; compose.test.ts and image-rehearsal.test.ts hold the files to the pages',
  },
  { command: /^kubectl /, why: 'a cluster; deploy.test.ts holds the manifests to the pages' },
  {
    command: /^(\w+=\S+ )*(npm run bench( -- \w+)?|node dist-bench\/bench\/run\.js( \w+)?)$/,
    why: 'minutes of load on a quiet machine; the pages cite the results files',
  },
  {
    command: /^npm run webhooks:redeliver/,
    why: "it acts on a deployment's failed deliveries; webhooks-process.test.ts runs it",
  },
  {
    command: /^npm run webhooks:rekey$/,
    why: "it re-seals a deployment's stored keys; webhooks-rekey.test.ts runs it",
  },
  {
    command: /^(rm -rf \.data|psql .*TRUNCATE .*)$/,
    why: "it empties the reader's own store; this test runs the SQL (or removes .data) before its second walk",
  },
  {
    command: /^(npm pack|npm install \S+\.tgz)$/,
    why: 'it packs and installs the client; typescript-client-package.test.ts does, and this test builds the client into its scratch directory',
  },
  {
    command: /^npm run client:generate$/,
    why: "it rewrites the client's generated code; typescript-client-generated.test.ts runs the generator",
  },
  {
    command: /^(systemctl --user start podman\.socket|export \w+=\S+)$/,
    why: 'the setup of a container runtime for the test suite',
  },
];

type Kind = 'run' | 'start' | 'background' | 'shown' | 'file';

interface Step {
  page: string;
  line: number;
  kind: Kind;
  /** From a ```console server block: it needs a PostgreSQL server, which the embedded engine is not. */
  server: boolean;
  /** For a file, its name. */
  command: string;
  /** For a file, its content. */
  output: string;
}

/** The pages in reading order: the README, then docs/ and the client's as its map lists them. */
function pages(): string[] {
  const readme = projectFile('README.md');
  const map = readme.slice(readme.indexOf('## Documentation'));
  return [
    'README.md',
    ...[...map.matchAll(/\]\(((?:docs\/[a-z-]+|clients\/[a-z-]+\/README)\.md)\)/g)].map(
      ([, page = '']) => page,
    ),
  ];
}

/** An unfinished command: a trailing backslash, or a double quote still open. */
function continues(command: string): boolean {
  return command.endsWith('\\') || (command.replaceAll('\\"', '').split('"').length - 1) % 2 === 1;
}

/**
 * The commands of a page's console and sh blocks, each with the output shown after it, and the
 * code blocks the paragraph before them has the reader save (`Saved as \`name\``).
 */
function stepsOf(page: string): Step[] {
  const steps: Step[] = [];
  let block: Kind | undefined;
  let server = false;
  let current: (Step & { open: boolean }) | undefined;
  // The last paragraph of prose, and whether a blank line has ended it.
  let paragraph = '';
  let paragraphEnded = false;
  const finish = () => {
    if (current) steps.push({ ...current, output: current.output.trimEnd() });
    current = undefined;
  };
  projectFile(page)
    .split('\n')
    .forEach((text, index) => {
      if (text.startsWith('```')) {
        finish();
        const info = text.slice(3).trim();
        const saved = block === undefined ? /Saved as `([\w.-]+)`/.exec(paragraph)?.[1] : undefined;
        paragraph = '';
        server = false;
        if (info !== '' && saved !== undefined) {
          block = 'file';
          current = {
            page,
            line: index + 1,
            kind: block,
            server,
            command: saved,
            output: '',
            open: false,
          };
          return;
        }
        server = info === 'console server';
        block =
          info === 'console' || info === 'console server'
            ? 'run'
            : info === 'console background'
              ? 'background'
              : info === 'sh'
                ? 'shown'
                : undefined;
        return;
      }
      if (block === undefined) {
        if (text.trim() === '') {
          paragraphEnded = true;
        } else {
          paragraph = paragraphEnded ? text : `${paragraph} ${text}`;
          paragraphEnded = false;
        }
        return;
      }
      if (block === 'file') {
        if (current) current.output += `${text}\n`;
        return;
      }
      if (current?.open) {
        current.command += `\n${text}`;
        current.open = continues(current.command);
      } else if (block === 'shown') {
        const command = text.replace(/\s+#.*$/, '').trim();
        if (command !== '' && !command.startsWith('#')) {
          current = {
            page,
            line: index + 1,
            kind: block,
            server,
            command,
            output: '',
            open: false,
          };
          current.open = continues(command);
          if (!current.open) finish();
        }
      } else if (text.startsWith('$ ')) {
        finish();
        const command = text.slice(2);
        const kind = block === 'run' && /\bnpm start$/.test(command) ? 'start' : block;
        current = {
          page,
          line: index + 1,
          kind,
          server,
          command,
          output: '',
          open: continues(command),
        };
      } else if (current) {
        current.output += `${text}\n`;
      }
    });
  finish();
  return steps;
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

/**
 * The log messages a start shows, as patterns: numbers, the data directory's path and the
 * server's address vary. The build's lines are npm's prestart, which this run has done already.
 */
function shownMessages(output: string): RegExp[] {
  return output
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .filter((line) => testEngine() === 'pglite' || !line.includes('"engine":"pglite"'))
    .map((line) => /"msg":"((?:[^"\\]|\\.)*)"/.exec(line)?.[1] ?? '')
    .map((message) =>
      message
        .replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
        .replace('/home/me/plant-store/\\.data', '.+')
        .replaceAll(README_SERVER.replace(/[.]/g, '\\.'), '\\S+')
        .replace(/\d+/g, '\\d+'),
    )
    .map((pattern) => new RegExp(`"msg":"${pattern}"`));
}

async function waitFor(condition: () => boolean, withinMs: number): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!condition() && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const runFile = promisify(execFile);
const steps = pages().flatMap(stepsOf);

describe('the README and docs/', () => {
  let scratch: string;
  let database: ScratchDatabase | undefined;
  let port: string;
  let receiverPort: string;
  let service: RunningProcess | undefined;
  const background: (RunningProcess & Step)[] = [];
  // Each Consistency-Token a page shows, and the one the service answered in its place.
  const tokens = new Map<string, string>();

  // A command as it runs here: the service, the receiver and the database of this test, and
  // the tokens this service answered where the page sends back those it shows, as a reader
  // copies the token from their own terminal.
  const local = (command: string) =>
    [...tokens].reduce(
      (text, [shown, answered]) => text.replaceAll(shown, answered),
      command
        .replaceAll(README_ORIGIN, `http://127.0.0.1:${port}`)
        .replaceAll(`localhost:${RECEIVER_PORT}`, `localhost:${receiverPort}`)
        .replaceAll(`listen(${RECEIVER_PORT})`, `listen(${receiverPort})`)
        .replaceAll(README_DATABASE, database?.url ?? README_DATABASE),
    );

  const stopService = async () => {
    if (!service) return;
    service.child.kill('SIGINT');
    await service.exited;
    service = undefined;
  };

  /** Stops the commands left running in the background, as a reader closes their terminal. */
  const stopBackground = async () => {
    for (const running of background) {
      if (running.child.exitCode !== null || running.child.signalCode !== null) continue;
      process.kill(-(running.child.pid ?? 0), 'SIGKILL');
      await running.exited;
    }
  };

  /**
   * Runs one step of a page, and compares what it prints with what the page shows; `again` on
   * the walk after the README's Start again.
   */
  const runStep = async (step: Step, again = false) => {
    const env: Record<string, string> = { HOME: scratch };
    if (step.kind === 'start') {
      await stopService();
      if (database?.url) env.DATABASE_URL = database.url;
      const started = await startServer(
        { ...env, PORT: port, HOST: '127.0.0.1' },
        {
          command: 'bash',
          args: ['-c', local(step.command).replace(/npm start$/, 'exec node dist/server.js')],
          cwd: scratch,
        },
      );
      service = started;
      // Emptied tables keep their schema: a server's second start applies no migration.
      const expected = shownMessages(step.output).filter(
        (message) => !(again && database?.url && message.source.includes('"msg":"applied')),
      );
      // What the service logs as it opens its database may come just after it says it started.
      await waitFor(
        () => expected.every((message) => started.stdout.some((line) => message.test(line))),
        5000,
      );
      for (const message of expected) {
        expect(
          started.stdout.some((line) => message.test(line)),
          String(message),
        ).toBe(true);
      }
      return;
    }
    if (step.kind === 'file') {
      writeFileSync(join(scratch, step.command), local(step.output));
      return;
    }
    if (step.kind === 'background') {
      background.push({
        ...run('bash', ['-c', local(step.command)], env, { cwd: scratch, detached: true }),
        ...step,
      });
      return;
    }
    const { stdout, stderr } = await new Promise<{ stdout: string; stderr: string }>((resolve) => {
      const child = spawn('bash', ['-c', local(step.command)], {
        cwd: scratch,
        env: { PATH: process.env.PATH ?? '', ...env },
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk));
      child.stderr.on('data', (chunk: Buffer) => (err += chunk));
      child.on('close', () => resolve({ stdout: out, stderr: err }));
    });
    // A command that only fails prints on stderr, as the reader's terminal shows it.
    const printed = stdout === '' ? stderr : stdout;
    if (!step.output.startsWith('HTTP/')) {
      expect(printed.trimEnd()).toBe(step.output);
      return;
    }
    const shown = parseAnswer(step.output);
    const answer = parseAnswer(printed);
    expect(answer.status).toBe(shown.status);
    expect(answer.body).toBe(shown.body);
    for (const [name, value] of shown.headers) {
      const sent = answer.headers.find(([candidate]) => candidate === name)?.[1];
      const form = varying.get(name);
      if (form) {
        expect(value, `${step.page} line ${step.line} shows ${name}`).toMatch(form);
        expect(sent, name).toMatch(form);
      } else expect(sent, name).toBe(value);
      if (name === 'consistency-token' && sent) tokens.set(value, sent);
    }
    const unshown = answer.headers
      .filter(([name]) => !shown.headers.some(([candidate]) => candidate === name))
      .map(([name, value]) => (name === 'connection' ? `${name}: ${value}` : name))
      .filter((header) => !leftOut.has(header));
    expect(unshown).toStrictEqual([]);
  };

  beforeAll(async () => {
    // A reader's directory: the project's build and packages, and nothing of theirs; the
    // client as its README has it installed, built from its sources into the directory.
    scratch = mkdtempSync(join(tmpdir(), 'plant-store-readme-'));
    symlinkSync(join(projectRoot, 'dist'), join(scratch, 'dist'));
    const client = join(scratch, 'client');
    await runFile('npx', ['tsc', '-p', 'tsconfig.build.json', '--outDir', join(client, 'dist')], {
      cwd: join(projectRoot, 'clients/typescript'),
    });
    copyFileSync(
      join(projectRoot, 'clients/typescript/package.json'),
      join(client, 'package.json'),
    );
    mkdirSync(join(scratch, 'node_modules/@plant-store'), { recursive: true });
    for (const name of readdirSync(join(projectRoot, 'node_modules'))) {
      if (name !== '@plant-store') {
        symlinkSync(join(projectRoot, 'node_modules', name), join(scratch, 'node_modules', name));
      }
    }
    symlinkSync(client, join(scratch, 'node_modules/@plant-store/client'));
    if (testEngine() === 'postgres') database = await createScratchDatabase({ migrated: false });
    port = String(await freePort());
    receiverPort = String(await freePort());
  }, 120_000);
  afterAll(async () => {
    await stopService();
    await stopBackground();
    await database?.drop();
    rmSync(scratch, { recursive: true, force: true });
  });

  it('runs the commands of every page', () => {
    expect(steps.filter(({ kind }) => kind !== 'shown').length).toBeGreaterThan(30);
    expect(new Set(steps.map(({ page }) => page)).size).toBeGreaterThan(5);
  });

  it.each(steps.filter(({ kind }) => kind === 'shown'))(
    '$page line $line shows only a command that cannot run here',
    ({ command }) => {
      expect(
        notRun.some((entry) => entry.command.test(command.replaceAll(/\\\n\s*/g, ''))),
        command,
      ).toBe(true);
    },
  );

  // A ```console server block needs a PostgreSQL server (DATABASE_REPLICA_URLS, for one):
  // on the embedded engine its commands are listed as skipped.
  const onThisEngine = (step: Step) => !step.server || testEngine() === 'postgres';
  const runSteps = steps.filter(({ kind }) => kind !== 'shown');
  const runHere = runSteps.filter(onThisEngine);
  const needServer = runSteps.filter((step) => !onThisEngine(step));
  it.each(runHere)('$page line $line answers as it shows', (step) => runStep(step), 120_000);
  it.skip.each(needServer)('$page line $line needs a PostgreSQL server', () => {});

  // The README's own way to start again: its SQL on a server, its rm on the embedded engine.
  it('starts again from an empty store as the README says', async () => {
    const reset = steps.find(
      ({ page, kind, command }) =>
        page === 'README.md' &&
        kind === 'shown' &&
        (testEngine() === 'postgres' ? /^psql .*TRUNCATE/ : /^rm -rf \.data$/).test(command),
    );
    expect(reset).toBeDefined();
    await stopService();
    await stopBackground();
    if (database?.url) {
      const sql = /-c '([^']+)'$/.exec(reset?.command ?? '')?.[1] ?? '';
      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      await client.query(sql).finally(() => client.end());
    } else {
      rmSync(join(scratch, '.data'), { recursive: true, force: true });
    }
  });

  it.each(runHere)(
    'again: $page line $line answers as it shows',
    (step) => runStep(step, true),
    120_000,
  );
  it.skip.each(needServer)('again: $page line $line needs a PostgreSQL server', () => {});

  it('prints in the background what the pages show', async () => {
    expect(background.length).toBeGreaterThan(0);
    for (const running of background) {
      const lines = running.output.split('\n');
      await waitFor(() => lines.every((line) => running.stdout.includes(line)), 10_000);
      expect(running.stdout, `${running.page} line ${running.line}`).toEqual(
        expect.arrayContaining(lines),
      );
    }
  });
});
