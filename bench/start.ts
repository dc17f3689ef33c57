// `npm run bench:start`: how long `npm start` takes, from spawning it to the first /readyz 200
// (polled every 5 ms), on a built tree: on a PostgreSQL server (BENCH_DATABASE_URL) with its
// schema in place, on an existing embedded database, on a new embedded database (the first start
// of a fresh clone, less its build), and once more on the server after a source file changed
// (the start that builds). BENCH_START_RUNS (5) starts of each, one after another. Writes
// bench/results/start.{json,md}.
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { withDatabase } from './options.js';
import { projectRoot, resultsFolder } from './paths.js';
import { type Child, spawnChild, stopAllChildren, stopChild } from './processes.js';
import { textTable } from './report.js';

const serverUrl = process.env.BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const runs = Number(process.env.BENCH_START_RUNS || 5);

/** Spawns `npm start` and resolves with the milliseconds until /readyz answered 200. */
async function timeStart(env: Record<string, string>, port: number): Promise<number> {
  const started = performance.now();
  const child: Child = spawnChild('npm start', 'npm', ['start'], {
    cwd: projectRoot,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      HOST: '127.0.0.1',
      PORT: String(port),
      API_TOKENS: randomBytes(16).toString('hex'),
      SHUTDOWN_DELAY_MS: '0',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  try {
    const deadline = Date.now() + 120_000;
    while (Date.now() < deadline) {
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(
        (response) => response.status === 200,
        () => false,
      );
      if (ready) return performance.now() - started;
      if (child.exit) throw new Error('npm start exited before /readyz answered 200');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    throw new Error('npm start was not ready within 120 s');
  } finally {
    await stopChild(child);
  }
}

async function onServer(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Runs `work` with a source file changed (a comment of its own added), then restores it. */
async function withSourceChanged<T>(work: () => Promise<T>): Promise<T> {
  const file = join(projectRoot, 'src', 'logger.ts');
  const original = readFileSync(file);
  const comment = `\n// bench:start ${randomBytes(4).toString('hex')}\n`;
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

const work = mkdtempSync(join(tmpdir(), 'plant-store-start-'));
const database = `plant_store_start_${randomBytes(4).toString('hex')}`;
const port = 20_000 + Math.floor(Math.random() * 20_000);
const loadBefore = loadavg();
try {
  await onServer(`create database ${database}`);
  const server = { DATABASE_URL: withDatabase(serverUrl, database) };
  // Builds when needed and migrates the database, so that the starts below find both done.
  await timeStart(server, port);
  const embedded = { DATA_DIR: join(work, 'existing') };
  await timeStart(embedded, port);

  const cases: [string, () => Promise<number>][] = [
    ['PostgreSQL server, built tree, schema in place', () => timeStart(server, port)],
    ['embedded engine, existing database', () => timeStart(embedded, port)],
    [
      'embedded engine, new database',
      () => timeStart({ DATA_DIR: join(work, `new-${randomBytes(4).toString('hex')}`) }, port),
    ],
    [
      'PostgreSQL server, after a source file changed (builds)',
      () => withSourceChanged(() => timeStart(server, port)),
    ],
  ];
  const results: { name: string; ms: number[] }[] = [];
  for (const [name, start] of cases) {
    const ms: number[] = [];
    for (let run = 0; run < runs; run++) ms.push(await start());
    results.push({ name, ms });
    process.stdout.write(`${name}: ${ms.map((value) => value.toFixed(0)).join(', ')} ms\n`);
  }
  // Leave dist/ built from the sources as they are.
  await timeStart(server, port);

  const rows = results.map(({ name, ms }) => [
    name,
    median(ms).toFixed(0),
    Math.min(...ms).toFixed(0),
    Math.max(...ms).toFixed(0),
  ]);
  const table = textTable(['npm start -> /readyz 200', 'median ms', 'min ms', 'max ms'], rows);
  const loadAfter = loadavg();
  const facts =
    `\`npm run bench:start\` (BENCH_START_RUNS=${runs}), ${new Date().toISOString()}, Node ${process.version}, ` +
    `load average ${loadBefore[0]?.toFixed(1)} before and ${loadAfter[0]?.toFixed(1)} after (2 cores, shared).`;
  process.stdout.write(`\n${table}\n${facts}\n`);
  mkdirSync(resultsFolder, { recursive: true });
  writeFileSync(
    join(resultsFolder, 'start.json'),
    `${JSON.stringify({ date: new Date().toISOString(), node: process.version, runs: results, loadBefore, loadAfter }, null, 2)}\n`,
  );
  writeFileSync(
    join(resultsFolder, 'start.md'),
    `# Start time\n\n${facts}\n\nFrom spawning \`npm start\` to the first /readyz 200, polled every 5 ms.\n\n\`\`\`\n${table}\n\`\`\`\n`,
  );
  process.stdout.write(`wrote ${join(resultsFolder, 'start.md')}\n`);
} finally {
  await stopAllChildren();
  await onServer(`drop database if exists ${database} with (force)`).catch(() => {});
  rmSync(work, { recursive: true, force: true });
}
