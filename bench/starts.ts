// The start and engines suites: how long `npm start` takes, from spawning it to the first
// /readyz 200 (polled every 5 ms), and, for engines, the creates it then answers, on the
// PostgreSQL server (the session's database) and on the embedded engine.
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { runHttpLoad } from './http-load.js';
import { projectRoot } from './paths.js';
import { type Child, spawnChild, stopChild } from './processes.js';
import { fixed, markdownTable, type SuiteReport, textTable } from './report.js';
import { plantBodies, type Session, say } from './session.js';

interface Started {
  child: Child;
  baseUrl: string;
  /** From the spawn to the first /readyz 200. */
  ms: number;
}

/** Spawns `npm start` on a free port and resolves once /readyz answers 200. */
async function npmStart(session: Session, env: Record<string, string>): Promise<Started> {
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const baseUrl = `http://127.0.0.1:${port}`;
  const started = performance.now();
  const child = spawnChild('npm start', 'npm', ['start'], {
    cwd: projectRoot,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      HOST: '127.0.0.1',
      PORT: String(port),
      API_TOKENS: session.token,
      // Nothing load-balances here: stop at once.
      SHUTDOWN_DELAY_MS: '0',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline && !session.signal.aborted) {
    const ready = await fetch(`${baseUrl}/readyz`).then(
      (response) => response.status === 200,
      () => false,
    );
    if (ready) return { child, baseUrl, ms: performance.now() - started };
    if (child.exit) throw new Error('npm start exited before /readyz answered 200');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  await stopChild(child);
  throw new Error('npm start was not ready within 120 s');
}

async function timeStart(session: Session, env: Record<string, string>): Promise<number> {
  const { child, ms } = await npmStart(session, env);
  await stopChild(child);
  return ms;
}

/** Runs `work` with a source file changed (a comment of its own added), then restores it. */
async function withSourceChanged<T>(work: () => Promise<T>): Promise<T> {
  const file = join(projectRoot, 'src', 'logger.ts');
  const original = readFileSync(file);
  const comment = `\n// bench start ${randomBytes(4).toString('hex')}\n`;
  writeFileSync(file, Buffer.concat([original, Buffer.from(comment)]));
  try {
    return await work();
  } finally {
    writeFileSync(file, original);
  }
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2
    ? (sorted[middle] ?? 0)
    : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
};

/** BENCH_ROUNDS starts of each kind, one after another. */
export async function startSuite(session: Session): Promise<SuiteReport> {
  const { rounds } = session.options;
  const loadBefore = loadavg();
  const server = { DATABASE_URL: session.databaseUrl };
  const embedded = { DATA_DIR: join(session.work, 'existing') };
  // Builds when needed and migrates both databases, so that the starts below find both done.
  await timeStart(session, server);
  await timeStart(session, embedded);
  const kinds: [string, () => Promise<number>][] = [
    ['PostgreSQL server, built tree, schema in place', () => timeStart(session, server)],
    ['embedded engine, existing database', () => timeStart(session, embedded)],
    [
      'embedded engine, new database',
      () =>
        timeStart(session, {
          DATA_DIR: join(session.work, `new-${randomBytes(4).toString('hex')}`),
        }),
    ],
    [
      'PostgreSQL server, after a source file changed (builds)',
      () => withSourceChanged(() => timeStart(session, server)),
    ],
  ];
  const rows: string[][] = [];
  for (const [name, start] of kinds) {
    const ms: number[] = [];
    for (let round = 0; round < rounds; round++) ms.push(await start());
    say(`${name}: ${ms.map((value) => value.toFixed(0)).join(', ')} ms`);
    rows.push([
      name,
      median(ms).toFixed(0),
      Math.min(...ms).toFixed(0),
      Math.max(...ms).toFixed(0),
    ]);
  }
  // Leave dist/ built from the sources as they are.
  await timeStart(session, server);
  const loadAfter = loadavg();
  const header = ['npm start -> /readyz 200', 'median ms', 'min ms', 'max ms'];
  say(`\n${textTable(header, rows)}`);
  return {
    title: 'Start time',
    body: `From spawning \`npm start\` to the first /readyz 200, polled every 5 ms; ${rounds} starts of each, one after another.\n\n${markdownTable(header, rows)}`,
    settings: {
      'starts of each': rounds,
      'load average (1 min)': `${loadBefore[0]?.toFixed(1)} before, ${loadAfter[0]?.toFixed(1)} after`,
    },
    failed: false,
  };
}

/** Each engine started afresh, restarted on the data it made, then loaded at each level. */
export async function enginesSuite(session: Session): Promise<SuiteReport> {
  const { options } = session;
  const nextBody = plantBodies();
  const engines: [string, Record<string, string>][] = [
    ['PostgreSQL server', { DATABASE_URL: session.databaseUrl }],
    ['embedded (PGlite)', { DATA_DIR: join(session.work, 'data') }],
  ];
  const rows: string[][] = [];
  for (const [engine, env] of engines) {
    const fresh = await timeStart(session, env);
    const again = await npmStart(session, env);
    try {
      for (const connections of options.connections) {
        const load = await runHttpLoad({
          baseUrl: again.baseUrl,
          connections,
          durationSeconds: options.durationSeconds,
          token: session.token,
          nextBody,
          signal: session.signal,
          rate: options.rate,
        });
        rows.push([
          engine,
          fixed(fresh, 0),
          fixed(again.ms, 0),
          String(connections),
          fixed(load.throughput, 1),
          fixed(load.p50Ms, 2),
          fixed(load.p99Ms, 2),
          String(load.errors),
        ]);
        say(`${engine} at ${connections}: ${load.throughput.toFixed(0)} creates/s`);
      }
    } finally {
      await stopChild(again.child);
    }
  }
  const header = [
    'engine',
    'start, fresh (ms)',
    'start, restart (ms)',
    'connections',
    'POST /s',
    'p50 ms',
    'p99 ms',
    'errors',
  ];
  say(`\n${textTable(header, rows)}`);
  return {
    title: 'Server and embedded engine',
    body: `Start time runs from spawning \`npm start\` to the first /readyz 200; "fresh" starts on an empty database, "restart" on the data the first start made. Throughput: POST /plants with new ids for ${options.durationSeconds} s after the restart.\n\n${markdownTable(header, rows)}`,
    settings: {
      connections: options.connections.join(', '),
      'duration per level (s)': options.durationSeconds,
      'requests per second': options.rate ?? 'as many as answered',
    },
    failed: rows.some((row) => row[7] !== '0'),
  };
}
