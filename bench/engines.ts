// `npm run bench:engines`: how long `npm start` takes to answer /readyz 200, and POST /plants
// throughput, on the PostgreSQL server (BENCH_DATABASE_URL) and on the embedded engine, in one
// run on one machine: the server first, then the embedded engine, each started afresh and then
// restarted on the data it made. Writes bench/results/engines.{json,md}.
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { runHttpLoad } from './http-load.js';
import { withDatabase } from './options.js';
import { projectRoot, resultsFolder } from './paths.js';
import { type Child, spawnChild, stopAllChildren, stopChild } from './processes.js';
import { textTable } from './report.js';

const serverUrl = process.env.BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const durationSeconds = Number(process.env.BENCH_DURATION_SECONDS || 10);
const connections = Number(process.env.BENCH_CONNECTIONS || 64);
const token = randomBytes(16).toString('hex');
const abort = new AbortController();

interface EngineRun {
  engine: 'server' | 'embedded';
  firstStartMs: number;
  restartMs: number;
  throughput: number;
  p50Ms: number | null;
  p99Ms: number | null;
  errors: number;
}

let idBase = BigInt(Date.now()) * 1_000_000n;
const nextBody = () => {
  idBase += 1n;
  return `{"id":${idBase},"name":"Monstera deliciosa","tag":"aroid"}`;
};

/** Runs `npm start` and resolves with the base URL and the milliseconds until /readyz said 200. */
async function start(
  env: Record<string, string>,
  log: string,
): Promise<{ child: Child; baseUrl: string; ms: number }> {
  const started = performance.now();
  const child = spawnChild('npm start', 'npm', ['start'], {
    cwd: projectRoot,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      HOST: '127.0.0.1',
      PORT: '0',
      API_TOKENS: token,
      // Nothing load-balances here: stop at once.
      SHUTDOWN_DELAY_MS: '0',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  child.process.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString('utf8');
  });
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const baseUrl = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output)?.[1];
    if (baseUrl) {
      const ready = await fetch(`${baseUrl}/readyz`).catch(() => undefined);
      if (ready?.status === 200) {
        writeFileSync(log, output);
        return { child, baseUrl, ms: performance.now() - started };
      }
    }
    if (child.exit) throw new Error(`npm start exited early:\n${output}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`npm start was not ready within 120 s:\n${output}`);
}

async function measure(
  engine: EngineRun['engine'],
  env: Record<string, string>,
  work: string,
): Promise<EngineRun> {
  const first = await start(env, join(work, `${engine}-first.log`));
  await stopChild(first.child);
  const again = await start(env, join(work, `${engine}-restart.log`));
  try {
    const load = await runHttpLoad({
      baseUrl: again.baseUrl,
      connections,
      durationSeconds,
      token,
      nextBody,
      signal: abort.signal,
    });
    return {
      engine,
      firstStartMs: first.ms,
      restartMs: again.ms,
      throughput: load.throughput,
      p50Ms: load.p50Ms,
      p99Ms: load.p99Ms,
      errors: load.errors,
    };
  } finally {
    await stopChild(again.child);
  }
}

async function onServer(sql: string) {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

const work = mkdtempSync(join(tmpdir(), 'plant-store-engines-'));
const database = `plant_store_engines_${randomBytes(4).toString('hex')}`;
process.on('SIGINT', () => abort.abort());
try {
  await onServer(`create database ${database}`);
  const runs = [
    await measure('server', { DATABASE_URL: withDatabase(serverUrl, database) }, work),
    await measure('embedded', { DATA_DIR: join(work, 'data') }, work),
  ];
  const fixed = (value: number | null, digits = 1) =>
    value === null ? '-' : value.toFixed(digits);
  const header = [
    'engine',
    'npm start -> /readyz 200, fresh (ms)',
    'restart (ms)',
    `POST /s @ ${connections}`,
    'p50 ms',
    'p99 ms',
    'errors',
  ];
  const rows = runs.map((run) => [
    run.engine,
    fixed(run.firstStartMs, 0),
    fixed(run.restartMs, 0),
    fixed(run.throughput),
    fixed(run.p50Ms, 2),
    fixed(run.p99Ms, 2),
    String(run.errors),
  ]);
  const table = textTable(header, rows);
  process.stdout.write(`${table}\n`);
  mkdirSync(resultsFolder, { recursive: true });
  const command = `BENCH_CONNECTIONS=${connections} BENCH_DURATION_SECONDS=${durationSeconds} npm run bench:engines`;
  writeFileSync(
    join(resultsFolder, 'engines.json'),
    `${JSON.stringify({ date: new Date().toISOString(), command, node: process.version, runs }, null, 2)}\n`,
  );
  writeFileSync(
    join(resultsFolder, 'engines.md'),
    `# Server and embedded engine\n\n\`${command}\`, ${new Date().toISOString()}, Node ${process.version}.\n\n` +
      'Start time runs from spawning `npm start` (which compiles first) to the first /readyz 200; ' +
      '"fresh" starts on an empty database, "restart" on the data the first start made. ' +
      `Throughput: POST /plants with new ids from ${connections} connections for ${durationSeconds} s after the restart.\n\n` +
      `\`\`\`\n${table}\n\`\`\`\n`,
  );
  process.stdout.write(`wrote ${join(resultsFolder, 'engines.md')}\n`);
} finally {
  await stopAllChildren();
  await onServer(`drop database if exists ${database} with (force)`).catch(() => {});
  rmSync(work, { recursive: true, force: true });
}
