// The soak suite: the service as shipped under steady load for minutes, every request POST
// /plants with a fresh id, a small share of them replays of earlier ones. The server's resident
// memory is sampled at the start, every BENCH_SAMPLE_SECONDS and at the end. Fails when the
// server died, answered anything but 200, lost a create, or did not stop cleanly.
import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { type HttpLoadResult, runHttpLoad } from './http-load.js';
import { describeExit, readStatusBytes } from './processes.js';
import { fixed, markdownTable, mebibytes, type SuiteReport, textTable } from './report.js';
import {
  exitedEarly,
  type Measured,
  measureLoad,
  PLANT_NAME,
  PLANT_TAG,
  type Session,
  say,
  startService,
} from './session.js';

/** How many recent bodies a replay is drawn from. */
const REPLAY_WINDOW = 1024;

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

interface MemorySample {
  /** Seconds since the load began. */
  seconds: number;
  rssBytes: number;
}

export async function soakSuite(session: Session): Promise<SuiteReport> {
  const { options } = session;
  const connections = options.connections[0] ?? 1;
  const service = await startService(session, 'service');
  const server = service.child;
  const bodies = plantBodies(options.replayPercent);
  say(
    `service pid ${server.pid} at ${service.baseUrl}; ${connections} connections for ` +
      `${options.durationSeconds} s, ${options.replayPercent} % replays, RSS sampled every ` +
      `${options.sampleSeconds} s`,
  );
  const rss = () => readStatusBytes(server.pid, 'VmRSS');
  const samples: MemorySample[] = [];
  const startBytes = rss();
  if (startBytes !== undefined) samples.push({ seconds: 0, rssBytes: startBytes });
  const loadStartedAt = performance.now();
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
  let measured: Measured<HttpLoadResult>;
  try {
    measured = await measureLoad(session, server.pid, {}, () =>
      runHttpLoad({
        baseUrl: service.baseUrl,
        connections,
        durationSeconds: options.durationSeconds,
        token: session.token,
        nextBody: bodies.next,
        signal: session.signal,
        rate: options.rate,
      }),
    );
  } finally {
    clearInterval(sampler);
  }
  const { result: load, seconds: loadSeconds } = measured;
  const endBytes = rss();
  if (endBytes !== undefined && (samples.at(-1)?.seconds ?? -1) < Math.round(loadSeconds)) {
    samples.push({ seconds: Math.round(loadSeconds), rssBytes: endBytes });
  }
  if (session.signal.aborted) throw new Error('interrupted');

  const problems: string[] = [];
  const exited = exitedEarly(service);
  if (exited !== undefined) {
    problems.push('the service exited during the load');
    process.stderr.write(`bench: ${exited}\n`);
  }
  const rowsStored = await countPlants(session.databaseUrl);
  const requestLogBytes = statSync(service.logFile).size;
  const exit = await service.stop();
  const shutdown = `SIGTERM: exited with ${describeExit(exit)}`;
  if (exit.code !== 0) problems.push(`the service did not stop cleanly (${shutdown})`);
  if (load.errors > 0) problems.push(`${load.errors} requests failed`);
  if (load.succeeded === 0) problems.push('no request succeeded');
  // Every fresh id sent is stored, but for the few requests cut off when the load stopped.
  const { fresh, replays } = bodies.sent();
  if (rowsStored > fresh || rowsStored < fresh - connections) {
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
  const summary = [
    ['duration', `${load.durationSeconds} s`],
    ['connections', String(connections)],
    ['requests sent', `${fresh + replays} (${replays} replays)`],
    ['throughput', `${load.throughput.toFixed(1)} successful requests/s`],
    ['latency p50 / p99', `${fixed(load.p50Ms, 2)} / ${fixed(load.p99Ms, 2)} ms`],
    ['errors', String(load.errors)],
    ['RSS at start', `${mebibytes(startBytes)} MiB`],
    ['RSS at end', `${mebibytes(endBytes)} MiB`],
    ['RSS peak (sampled)', `${mebibytes(measured.peakRssBytes)} MiB`],
    [
      'RSS growth, 2nd half',
      `${mebibytes(endBytes !== undefined && middle !== undefined ? endBytes - middle.rssBytes : undefined)} MiB`,
    ],
    ['server CPU', `${fixed(measured.cpu.server, 2)} cores`],
    ['rows stored', `${rowsStored} (fresh ids sent: ${fresh})`],
    ['request log written', `${mebibytes(requestLogBytes)} MiB`],
    ['shutdown', shutdown],
    ['verdict', problems.length === 0 ? 'pass' : `fail: ${problems.join('; ')}`],
  ];
  say(`\n${textTable(['soak', ''], summary)}`);
  const memory = samples.map((sample) => [String(sample.seconds), mebibytes(sample.rssBytes)]);
  return {
    title: 'Plant Store soak check',
    body: `## Result

${markdownTable(['', ''], summary)}

Throughput counts 200 answers per second; p50 and p99 are their latencies as the load generator
saw them. Errors are non-2xx answers plus socket errors and timeouts. RSS is the server process's
resident memory (VmRSS): at the start (before the load), at the end (before SIGTERM), and the
largest of the samples taken every 100 ms.

## Resident memory over the run

${markdownTable(['seconds', 'RSS MiB'], memory)}`,
    settings: {
      'duration (s)': options.durationSeconds,
      connections,
      'memory sample interval (s)': options.sampleSeconds,
      'replays (%)': options.replayPercent,
      'requests per second': options.rate ?? 'as many as answered',
      'service environment':
        'DATABASE_URL, API_TOKENS (a fresh token), HOST=127.0.0.1, PORT=0, LOG_LEVEL=info; everything else at the defaults',
    },
    failed: problems.length > 0,
  };
}
