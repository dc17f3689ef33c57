// `npm run soak`: the service as shipped (`node dist/server.js`, default settings, request log
// at info) under steady load for minutes, against a database of its own on the PostgreSQL at
// SOAK_DATABASE_URL (created, migrated, dropped). Every request is POST /plants with a fresh id,
// a small share of them replays of earlier ones. The server's resident memory is sampled at the
// start, every SOAK_SAMPLE_SECONDS and at the end. Prints memory (start, end, peak), throughput,
// latency and errors, and writes bench/results/soak.{json,md}. Exits non-zero when the server
// died, answered anything but 200, or did not stop cleanly.
import { randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, mkdtempSync, openSync, statSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, release, tmpdir, totalmem } from 'node:os';
import { join, relative } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { cleanUpOnExit } from './cleanup.js';
import { commandLine, gitRevision, packageVersion } from './facts.js';
import { type HttpLoadResult, runHttpLoad } from './http-load.js';
import { OptionsError, positiveInteger, redactUrl, withDatabase } from './options.js';
import { distFolder, projectRoot, resultsFolder } from './paths.js';
import {
  type Child,
  describeExit,
  readProcessCpuSeconds,
  readStatusBytes,
  runToCompletion,
  sampleResidentMemory,
  spawnChild,
  stopChild,
  tailOf,
  waitForListening,
} from './processes.js';
import { mebibytes, textTable } from './report.js';

const PLANT_NAME = 'Monstera deliciosa';
const PLANT_TAG = 'aroid';
const START_TIMEOUT_MS = 30_000;
/** How many recent bodies a replay is drawn from. */
const REPLAY_WINDOW = 1024;

interface SoakOptions {
  databaseUrl: string;
  durationSeconds: number;
  connections: number;
  sampleSeconds: number;
  /** Share of requests, in percent, that replay an earlier body (same id, same content). */
  replayPercent: number;
}

function readSoakOptions(env: NodeJS.ProcessEnv): SoakOptions {
  const get = (name: string, fallback: string) => {
    const value = env[name];
    return value === undefined || value.trim() === '' ? fallback : value;
  };
  const databaseUrl = get('SOAK_DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/postgres');
  if (!/^postgres(ql)?:\/\//.test(databaseUrl) || !URL.canParse(databaseUrl)) {
    throw new OptionsError('SOAK_DATABASE_URL must be a postgres:// URL');
  }
  const replayPercent = positiveInteger('SOAK_REPLAY_PERCENT', get('SOAK_REPLAY_PERCENT', '5'), 0);
  if (replayPercent > 100) throw new OptionsError('SOAK_REPLAY_PERCENT must be at most 100');
  return {
    databaseUrl,
    durationSeconds: positiveInteger('SOAK_DURATION_SECONDS', get('SOAK_DURATION_SECONDS', '300')),
    connections: positiveInteger('SOAK_CONNECTIONS', get('SOAK_CONNECTIONS', '32')),
    sampleSeconds: positiveInteger('SOAK_SAMPLE_SECONDS', get('SOAK_SAMPLE_SECONDS', '10')),
    replayPercent,
  };
}

const say = (line: string) => process.stdout.write(`${line}\n`);
const { scratch, abort, runAndExit } = cleanUpOnExit('soak', say);

// ---- the load ----

interface Bodies {
  next: () => string;
  sent: () => { fresh: number; replays: number };
}

/** Fresh ids (a random 62-bit base plus a counter); `replayPercent` % replay a recent body. */
function plantBodies(replayPercent: number): Bodies {
  const base = BigInt.asUintN(62, randomBytes(8).readBigUInt64BE());
  let counter = 0n;
  const recent: string[] = [];
  let fresh = 0;
  let replays = 0;
  return {
    next() {
      if (recent.length > 0 && Math.random() * 100 < replayPercent) {
        replays++;
        return recent[Math.floor(Math.random() * recent.length)] as string;
      }
      const body = `{"id":${base + counter++},"name":"${PLANT_NAME}","tag":"${PLANT_TAG}"}`;
      recent[fresh % REPLAY_WINDOW] = body;
      fresh++;
      return body;
    },
    sent: () => ({ fresh, replays }),
  };
}

async function checkAnswers(baseUrl: string, token: string, bodies: Bodies): Promise<void> {
  const ready = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(10_000) });
  if (ready.status !== 200) throw new Error(`/readyz answered ${ready.status}`);
  const response = await fetch(`${baseUrl}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: bodies.next(),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  if (response.status !== 200 || text !== JSON.stringify({ name: PLANT_NAME, tag: PLANT_TAG })) {
    throw new Error(`POST /plants answered ${response.status} ${text}`);
  }
}

async function countPlants(databaseUrl: string): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ n: string }>('select count(*) as n from plants');
    return Number(rows[0]?.n ?? 0);
  } finally {
    await client.end();
  }
}

// ---- the report ----

interface MemorySample {
  /** Seconds since the load began. */
  seconds: number;
  rssBytes: number;
}

interface SoakReport {
  date: string;
  command: string;
  machine: Record<string, string | number>;
  settings: Record<string, string | number>;
  result: {
    durationSeconds: number;
    requestsSent: number;
    freshRequests: number;
    replayRequests: number;
    succeeded: number;
    throughput: number;
    p50Ms: number | null;
    p99Ms: number | null;
    errors: number;
    errorDetail: Pick<HttpLoadResult, 'non2xx' | 'socketErrors' | 'timeouts' | 'statusCodes'>;
    rowsStored: number;
    requestLogBytes: number;
  };
  memory: {
    startBytes: number | undefined;
    endBytes: number | undefined;
    /** The largest VmRSS sampled every 100 ms during the load. */
    peakBytes: number | undefined;
    /** End minus the sample nearest the middle of the run: growth once warmed up. */
    secondHalfGrowthBytes: number | undefined;
    samples: MemorySample[];
  };
  /** Cores' worth of CPU the server used during the load. */
  serverCpuCores: number | undefined;
  shutdown: string;
  verdict: 'pass' | 'fail';
  problems: string[];
}

function summaryRows(report: SoakReport): string[][] {
  const { result, memory } = report;
  const ms = (value: number | null) => (value === null ? '-' : value.toFixed(2));
  return [
    ['duration', `${result.durationSeconds} s`],
    ['connections', String(report.settings.connections)],
    ['requests sent', `${result.requestsSent} (${result.replayRequests} replays)`],
    ['throughput', `${result.throughput.toFixed(1)} successful requests/s`],
    ['latency p50 / p99', `${ms(result.p50Ms)} / ${ms(result.p99Ms)} ms`],
    ['errors', String(result.errors)],
    ['RSS at start', `${mebibytes(memory.startBytes)} MiB`],
    ['RSS at end', `${mebibytes(memory.endBytes)} MiB`],
    ['RSS peak (sampled)', `${mebibytes(memory.peakBytes)} MiB`],
    ['RSS growth, 2nd half', `${mebibytes(memory.secondHalfGrowthBytes)} MiB`],
    ['server CPU', `${report.serverCpuCores?.toFixed(2) ?? '-'} cores`],
    ['rows stored', `${result.rowsStored} (fresh ids sent: ${result.freshRequests})`],
    ['request log written', `${mebibytes(result.requestLogBytes)} MiB`],
    ['shutdown', report.shutdown],
    ['verdict', report.problems.length === 0 ? 'pass' : `fail: ${report.problems.join('; ')}`],
  ];
}

function markdownReport(report: SoakReport): string {
  const table = (header: string[], rows: string[][]) =>
    [
      `| ${header.join(' | ')} |`,
      `| ${header.map((_, i) => (i === 0 ? '---' : '---:')).join(' | ')} |`,
      ...rows.map((row) => `| ${row.map((cell) => cell.replaceAll('|', '\\|')).join(' | ')} |`),
    ].join('\n');
  const facts = (record: Record<string, string | number>) =>
    Object.entries(record)
      .map(([key, value]) => `- ${key}: ${value}`)
      .join('\n');
  return `# Plant Store soak check

Run on ${report.date} with:

\`\`\`sh
${report.command}
\`\`\`

## Result

${table(['', ''], summaryRows(report))}

Throughput counts 200 answers per second; p50 and p99 are their latencies as the load generator
saw them. Errors are non-2xx answers plus socket errors and timeouts. RSS is the server process's
resident memory (VmRSS): at the start (before the load), at the end (before SIGTERM), and the
largest of the samples taken every 100 ms.

## Resident memory over the run

${table(
  ['seconds', 'RSS MiB'],
  report.memory.samples.map((sample) => [String(sample.seconds), mebibytes(sample.rssBytes)]),
)}

## Settings

${facts(report.settings)}

## Machine

${facts(report.machine)}
`;
}

function writeResults(report: SoakReport): void {
  mkdirSync(resultsFolder, { recursive: true });
  const json = join(resultsFolder, 'soak.json');
  const markdown = join(resultsFolder, 'soak.md');
  writeFileSync(json, `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(markdown, markdownReport(report));
  say(`\nwrote ${relative(projectRoot, json)}, ${relative(projectRoot, markdown)}`);
}

// ---- the run ----

async function soak(options: SoakOptions): Promise<number> {
  const startedAt = new Date();
  const loadAtStart = loadavg();
  const adminUrl = options.databaseUrl;
  scratch.adminUrl = adminUrl;
  const soakDatabase = `plant_store_soak_${randomBytes(4).toString('hex')}`;
  scratch.database = soakDatabase;
  const workFolder = mkdtempSync(join(tmpdir(), 'plant-store-soak-'));
  scratch.workFolder = workFolder;
  const admin = new pg.Client({ connectionString: adminUrl, application_name: 'plant-store-soak' });
  await admin.connect();
  let child: Child | undefined;
  try {
    const version = await admin.query<{ v: string }>(
      `select current_setting('server_version') as v`,
    );
    await admin.query(`create database ${soakDatabase}`);
    const databaseUrl = withDatabase(adminUrl, soakDatabase);
    say(`created database ${soakDatabase}; migrating it with dist/migrate.js`);
    await runToCompletion('migrate', process.execPath, [join(distFolder, 'migrate.js')], {
      cwd: projectRoot,
      env: { PATH: process.env.PATH ?? '', DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' },
    });

    const token = randomBytes(32).toString('base64url');
    const logFile = join(workFolder, 'service.log');
    const errorFile = join(workFolder, 'service.stderr');
    const stdout = openSync(logFile, 'w');
    const stderr = openSync(errorFile, 'w');
    try {
      child = spawnChild('service', process.execPath, [join(distFolder, 'server.js')], {
        cwd: projectRoot,
        // As shipped: only what it needs, everything else at its defaults.
        env: {
          PATH: process.env.PATH ?? '',
          DATABASE_URL: databaseUrl,
          API_TOKENS: token,
          HOST: '127.0.0.1',
          PORT: '0',
          // Nothing load-balances here: stop at once.
          SHUTDOWN_DELAY_MS: '0',
        },
        // The request log goes to a file, as a container's stdout would be drained.
        stdio: ['ignore', stdout, stderr],
      });
    } finally {
      closeSync(stdout);
      closeSync(stderr);
    }
    const server = child;
    const baseUrl = await waitForListening(server, logFile, errorFile, {
      timeoutMs: START_TIMEOUT_MS,
      signal: abort.signal,
    });
    const bodies = plantBodies(options.replayPercent);
    await checkAnswers(baseUrl, token, bodies);
    say(
      `service pid ${server.pid} at ${baseUrl}; ${options.connections} connections for ` +
        `${options.durationSeconds} s, ${options.replayPercent} % replays, RSS sampled every ` +
        `${options.sampleSeconds} s`,
    );

    const rss = () => readStatusBytes(server.pid, 'VmRSS');
    const samples: MemorySample[] = [];
    const startBytes = rss();
    if (startBytes !== undefined) samples.push({ seconds: 0, rssBytes: startBytes });
    say(`     0 s  RSS ${mebibytes(startBytes)} MiB`);
    const cpuBefore = readProcessCpuSeconds(server.pid);
    const loadStartedAt = performance.now();
    const peak = sampleResidentMemory(server.pid);
    let lastSent = 0;
    let lastAt = loadStartedAt;
    const sampler = setInterval(() => {
      const now = performance.now();
      const seconds = Math.round((now - loadStartedAt) / 1000);
      const bytes = rss();
      if (bytes !== undefined) samples.push({ seconds, rssBytes: bytes });
      const { fresh, replays } = bodies.sent();
      const rate = ((fresh + replays - lastSent) * 1000) / (now - lastAt);
      lastSent = fresh + replays;
      lastAt = now;
      say(
        `${String(seconds).padStart(6)} s  RSS ${mebibytes(bytes)} MiB  ${rate.toFixed(0)} requests/s sent`,
      );
    }, options.sampleSeconds * 1000);

    let load: HttpLoadResult;
    try {
      load = await runHttpLoad({
        baseUrl,
        connections: options.connections,
        durationSeconds: options.durationSeconds,
        token,
        nextBody: bodies.next,
        signal: abort.signal,
      });
    } finally {
      clearInterval(sampler);
    }
    const loadSeconds = (performance.now() - loadStartedAt) / 1000;
    const peakBytes = peak.stop();
    const endBytes = rss();
    const endSecond = Math.round(loadSeconds);
    if (endBytes !== undefined && (samples.at(-1)?.seconds ?? -1) < endSecond) {
      samples.push({ seconds: endSecond, rssBytes: endBytes });
    }
    const cpuAfter = readProcessCpuSeconds(server.pid);
    if (abort.signal.aborted) throw new Error('interrupted');

    const problems: string[] = [];
    if (server.exit) {
      problems.push(`the service exited during the load with ${describeExit(server.exit)}`);
      process.stderr.write(`soak: ${tailOf(errorFile)}\n`);
    }
    const rowsStored = await countPlants(databaseUrl);
    const requestLogBytes = statSync(logFile).size;
    const exit = await stopChild(server);
    const shutdown = `SIGTERM: exited with ${describeExit(exit)}`;
    if (exit.code !== 0) problems.push(`the service did not stop cleanly (${shutdown})`);
    if (load.errors > 0) problems.push(`${load.errors} requests failed`);
    if (load.succeeded === 0) problems.push('no request succeeded');
    // Every fresh id sent is stored, but for the few requests cut off when the load stopped.
    const { fresh, replays } = bodies.sent();
    if (rowsStored > fresh || rowsStored < fresh - options.connections) {
      problems.push(`${rowsStored} rows stored for ${fresh} fresh ids sent`);
    }

    const middle = samples.reduce<MemorySample | undefined>(
      (best, sample) =>
        best === undefined ||
        Math.abs(sample.seconds - loadSeconds / 2) < Math.abs(best.seconds - loadSeconds / 2)
          ? sample
          : best,
      undefined,
    );
    const report: SoakReport = {
      date: startedAt.toISOString(),
      command: commandLine('SOAK_', 'soak', 'soak.js'),
      machine: {
        cpu: cpus()[0]?.model ?? 'unknown',
        cores: availableParallelism(),
        memory: `${(totalmem() / 1024 ** 3).toFixed(1)} GiB`,
        kernel: release(),
        node: process.version,
        postgres: version.rows[0]?.v ?? 'unknown',
        autocannon: packageVersion('autocannon'),
        revision: gitRevision(),
        'load average at start': loadAtStart.map((value) => value.toFixed(2)).join(', '),
      },
      settings: {
        'duration (s)': options.durationSeconds,
        connections: options.connections,
        'memory sample interval (s)': options.sampleSeconds,
        'replays (%)': options.replayPercent,
        'database server': redactUrl(options.databaseUrl),
        'service environment':
          'DATABASE_URL, API_TOKENS (a fresh token), HOST=127.0.0.1, PORT=0; everything else (LOG_LEVEL=info, DB_POOL_MAX, batching, timeouts) at the defaults',
        'pipelining (autocannon)': 1,
      },
      result: {
        durationSeconds: load.durationSeconds,
        requestsSent: fresh + replays,
        freshRequests: fresh,
        replayRequests: replays,
        succeeded: load.succeeded,
        throughput: load.throughput,
        p50Ms: load.p50Ms,
        p99Ms: load.p99Ms,
        errors: load.errors,
        errorDetail: {
          non2xx: load.non2xx,
          socketErrors: load.socketErrors,
          timeouts: load.timeouts,
          statusCodes: load.statusCodes,
        },
        rowsStored,
        requestLogBytes,
      },
      memory: {
        startBytes,
        endBytes,
        peakBytes,
        secondHalfGrowthBytes:
          endBytes !== undefined && middle !== undefined ? endBytes - middle.rssBytes : undefined,
        samples,
      },
      serverCpuCores:
        cpuBefore !== undefined && cpuAfter !== undefined
          ? (cpuAfter - cpuBefore) / loadSeconds
          : undefined,
      shutdown,
      verdict: problems.length === 0 ? 'pass' : 'fail',
      problems,
    };
    say(`\n${textTable(['soak', ''], summaryRows(report))}`);
    writeResults(report);
    return problems.length === 0 ? 0 : 1;
  } finally {
    await admin.end().catch(() => {});
  }
}

await runAndExit(() => readSoakOptions(process.env), soak);
