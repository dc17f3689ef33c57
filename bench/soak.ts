// The soak suite: the service as shipped under load for minutes, in BENCH_ROUNDS rounds. The load
// is a mix of creates (a small share replaying earlier ones), reads by id, pages and deletes of
// what it created, or creates alone (BENCH_SOAK_LOAD=creates). With BENCH_SOAK_WEBHOOKS=unruly
// (the default) the webhook is on, to six receivers: one answers 200 and the others fail in
// each of the ways a receiver can (500, 429 with Retry-After, too late, never, a reset), which
// of them does what changing round after round. The server's resident memory is sampled every
// BENCH_SAMPLE_SECONDS; after each round, and once more after a quiet spell at the end, so is
// V8's heap (from /metrics). Fails when the server died, answered anything but 2xx, lost a
// create, or did not stop cleanly.
import { mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { runHttpLoad } from './http-load.js';
import { describeExit, readStatusBytes } from './processes.js';
import { fixed, markdownTable, mebibytes, type SuiteReport, textTable } from './report.js';
import { exitedEarly, measureLoad, type Session, say, startService } from './session.js';
import {
  type Behaviour,
  type MemoryReading,
  MIX,
  readMemory,
  type Sent,
  soakRequests,
  startUnrulyReceivers,
  type UnrulyReceivers,
  WEBHOOK_RETRY_SCHEDULE,
  WEBHOOK_SECRET,
  WEBHOOK_TIMEOUT_MS,
} from './soak-load.js';
import { type StoredPlants, storePlantsToRead } from './targets.js';

/** Plants stored before a mixed load, for its reads and pages. */
const STORED_PLANTS = 20_000;
/** After the last round, the service idles this long before its memory is read once more. */
const QUIET_SECONDS = 15;
/** Heap snapshots go here (the service's --diagnostic-dir). */
const SNAPSHOT_FOLDER = join(tmpdir(), 'plant-store-heap-snapshots');

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

interface Round {
  name: string;
  /** Which receiver failed how in this round. */
  behaviours: Behaviour[] | undefined;
  succeeded: number;
  errors: number;
  p99Ms: number | null;
  memory: MemoryReading;
}

const attemptsOf = (memory: MemoryReading) =>
  Object.values(memory.attempts ?? {}).reduce((sum, n) => sum + n, 0);

/** GC seconds since the previous reading: scavenges / the others. */
function gcColumn(memory: MemoryReading, previous: MemoryReading | undefined): string {
  if (!memory.gcSeconds) return '-';
  const minor = memory.gcSeconds.minor - (previous?.gcSeconds?.minor ?? 0);
  const major = memory.gcSeconds.major - (previous?.gcSeconds?.major ?? 0);
  return `${minor.toFixed(2)} / ${major.toFixed(2)}`;
}

function roundRow(round: Round, previous: Round | undefined): string[] {
  const { memory } = round;
  const attempts = attemptsOf(memory);
  const failed = attempts - (memory.attempts?.['2xx'] ?? 0);
  const before = previous ? attemptsOf(previous.memory) : 0;
  const failedBefore = previous
    ? attemptsOf(previous.memory) - (previous.memory.attempts?.['2xx'] ?? 0)
    : 0;
  return [
    round.name,
    String(round.succeeded),
    String(round.errors),
    fixed(round.p99Ms, 1),
    memory.attempts ? `${attempts - before} (${failed - failedBefore} failed)` : '-',
    memory.backlog === undefined ? '-' : String(memory.backlog),
    gcColumn(memory, previous?.memory),
    mebibytes(memory.rss),
    mebibytes(memory.rssAnon),
    mebibytes(memory.heapUsed),
    mebibytes(memory.heapTotal),
    mebibytes(memory.newSpace),
    mebibytes(memory.external),
  ];
}

const ROUND_HEADER = [
  'round',
  '2xx',
  'errors',
  'p99 ms',
  'webhook attempts',
  'backlog',
  'GC s',
  'RSS MiB',
  'anon MiB',
  'heap used MiB',
  'heap total MiB',
  'new space MiB',
  'external MiB',
];

interface Snapshot {
  round: number;
  file: string;
  objects: number;
  /** The self sizes of every object in it: what was live after the full GC it starts with. */
  liveBytes: number;
}

/**
 * Asks the service for a heap snapshot (SIGUSR2), waits until it answers again, and sums what
 * the snapshot holds.
 */
async function heapSnapshot(pid: number, baseUrl: string, round: number): Promise<Snapshot> {
  const before = new Set(readdirSync(SNAPSHOT_FOLDER));
  process.kill(pid, 'SIGUSR2');
  await new Promise((resolve) => setTimeout(resolve, 500));
  // The snapshot is written on the service's thread: it answers once it is done.
  await fetch(`${baseUrl}/healthz`, { signal: AbortSignal.timeout(120_000) });
  const file = readdirSync(SNAPSHOT_FOLDER).find(
    (name) => !before.has(name) && name.includes(`.${pid}.`) && name.endsWith('.heapsnapshot'),
  );
  if (file === undefined) throw new Error(`no heap snapshot appeared in ${SNAPSHOT_FOLDER}`);
  const { snapshot, nodes } = JSON.parse(readFileSync(join(SNAPSHOT_FOLDER, file), 'utf8')) as {
    snapshot: { meta: { node_fields: string[] } };
    nodes: number[];
  };
  const fields = snapshot.meta.node_fields.length;
  const selfSize = snapshot.meta.node_fields.indexOf('self_size');
  let liveBytes = 0;
  for (let at = selfSize; at < nodes.length; at += fields) liveBytes += nodes[at] ?? 0;
  return { round, file, objects: nodes.length / fields, liveBytes };
}

export async function soakSuite(session: Session): Promise<SuiteReport> {
  const { options } = session;
  const connections = options.connections[0] ?? 1;
  const roundSeconds = Math.max(1, Math.round(options.durationSeconds / options.rounds));
  const mixed = options.soakLoad === 'mixed';
  const stored: StoredPlants | undefined = mixed
    ? await storePlantsToRead(session.databaseUrl, STORED_PLANTS)
    : undefined;
  const receivers: UnrulyReceivers | undefined =
    options.soakWebhooks === 'unruly' ? await startUnrulyReceivers() : undefined;
  // Without its folder, the signal would kill the service rather than write a snapshot.
  if (options.heapSnapshotRounds.length > 0) mkdirSync(SNAPSHOT_FOLDER, { recursive: true });
  const nodeOptions = [
    options.serviceNodeOptions,
    ...(options.heapSnapshotRounds.length > 0
      ? [`--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${SNAPSHOT_FOLDER}`]
      : []),
  ]
    .filter((option) => option !== '')
    .join(' ');
  const serviceEnvironment: Record<string, string> = {
    ...(receivers && {
      WEBHOOK_URLS: receivers.urls.join(','),
      WEBHOOK_SECRET,
      WEBHOOK_TIMEOUT_MS: String(WEBHOOK_TIMEOUT_MS),
      WEBHOOK_RETRY_SCHEDULE,
    }),
    ...(nodeOptions !== '' && { NODE_OPTIONS: nodeOptions }),
    ...(options.serviceMallocArenaMax !== '' && {
      MALLOC_ARENA_MAX: options.serviceMallocArenaMax,
    }),
  };
  const service = await startService(session, 'service', serviceEnvironment);
  const server = service.child;
  const requests = soakRequests(options.replayPercent, stored);
  say(
    `service pid ${server.pid} at ${service.baseUrl}; ${connections} connections, ` +
      `${options.rounds} rounds of ${roundSeconds} s, ${mixed ? 'mixed load' : 'creates'}, ` +
      `webhook ${receivers ? 'to unruly receivers' : 'off'}` +
      (nodeOptions === '' ? '' : `, NODE_OPTIONS=${nodeOptions}`) +
      (options.serviceMallocArenaMax === ''
        ? ''
        : `, MALLOC_ARENA_MAX=${options.serviceMallocArenaMax}`),
  );
  const rss = () => readStatusBytes(server.pid, 'VmRSS');
  const samples: Array<{ seconds: number; rssBytes: number }> = [];
  const startMemory = await readMemory(server.pid, service.baseUrl);
  const rounds: Round[] = [
    {
      name: 'start',
      behaviours: undefined,
      succeeded: 0,
      errors: 0,
      p99Ms: null,
      memory: startMemory,
    },
  ];
  const loadStartedAt = performance.now();
  const total = (sent: Sent) => sent.fresh + sent.replays + sent.reads + sent.pages + sent.deletes;
  let lastSent = 0;
  let lastAt = loadStartedAt;
  if (startMemory.rss !== undefined) samples.push({ seconds: 0, rssBytes: startMemory.rss });
  const sampler = setInterval(() => {
    const now = performance.now();
    const seconds = Math.round((now - loadStartedAt) / 1000);
    const bytes = rss();
    if (bytes !== undefined) samples.push({ seconds, rssBytes: bytes });
    const sent = total(requests.sent());
    const rate = ((sent - lastSent) * 1000) / (now - lastAt);
    lastSent = sent;
    lastAt = now;
    say(
      `${String(seconds).padStart(6)} s  RSS ${mebibytes(bytes)} MiB  ${rate.toFixed(0)} requests/s sent`,
    );
  }, options.sampleSeconds * 1000);
  let peakRssBytes: number | undefined;
  const snapshots: Snapshot[] = [];
  let serverCpuSeconds = 0;
  let loadSeconds = 0;
  try {
    for (let round = 1; round <= options.rounds && !session.signal.aborted; round++) {
      const behaviours = await receivers?.behaveForRound(round);
      const measured = await measureLoad(session, server.pid, {}, () =>
        runHttpLoad({
          baseUrl: service.baseUrl,
          connections,
          durationSeconds: roundSeconds,
          token: session.token,
          nextRequest: requests.next,
          signal: session.signal,
          rate: options.rate,
        }),
      );
      const { result } = measured;
      loadSeconds += measured.seconds;
      serverCpuSeconds += (measured.cpu.server ?? 0) * measured.seconds;
      if (measured.peakRssBytes !== undefined) {
        peakRssBytes = Math.max(peakRssBytes ?? 0, measured.peakRssBytes);
      }
      const memory = await readMemory(server.pid, service.baseUrl);
      rounds.push({
        name: String(round),
        behaviours,
        succeeded: result.succeeded,
        errors: result.errors,
        p99Ms: result.p99Ms,
        memory,
      });
      say(
        `round ${round}: ${textTable(ROUND_HEADER, [roundRow(rounds.at(-1) as Round, rounds.at(-2))]).split('\n')[2]}`,
      );
      if (options.heapSnapshotRounds.includes(round)) {
        const taken = await heapSnapshot(server.pid, service.baseUrl, round);
        snapshots.push(taken);
        say(
          `heap snapshot after round ${round}: ${taken.objects} objects, ` +
            `${mebibytes(taken.liveBytes)} MiB, in ${join(SNAPSHOT_FOLDER, taken.file)}`,
        );
      }
    }
  } finally {
    clearInterval(sampler);
  }
  if (session.signal.aborted) throw new Error('interrupted');
  await new Promise((resolve) => setTimeout(resolve, QUIET_SECONDS * 1000));
  rounds.push({
    name: `idle ${QUIET_SECONDS} s`,
    behaviours: undefined,
    succeeded: 0,
    errors: 0,
    p99Ms: null,
    memory: await readMemory(server.pid, service.baseUrl),
  });

  const problems: string[] = [];
  const exited = exitedEarly(service);
  if (exited !== undefined) {
    problems.push('the service exited during the load');
    process.stderr.write(`bench: ${exited}\n`);
  }
  const rowsStored = await countPlants(session.databaseUrl);
  const requestLogBytes = statSync(service.logFile).size;
  const received = await receivers?.requests();
  await receivers?.stop();
  const exit = await service.stop();
  const shutdown = `SIGTERM: exited with ${describeExit(exit)}`;
  if (exit.code !== 0) problems.push(`the service did not stop cleanly (${shutdown})`);
  const succeeded = rounds.reduce((sum, round) => sum + round.succeeded, 0);
  const errors = rounds.reduce((sum, round) => sum + round.errors, 0);
  if (errors > 0) problems.push(`${errors} requests failed`);
  if (succeeded === 0) problems.push('no request succeeded');
  // Every fresh id sent is stored (and the deleted gone), but for the few requests cut off when
  // a round stopped: at most one per connection and round.
  const sent = requests.sent();
  const expected = (stored?.count ?? 0) + sent.fresh - sent.deletes;
  const slack = connections * options.rounds;
  if (rowsStored > expected + slack || rowsStored < expected - slack) {
    problems.push(`${rowsStored} rows stored where ${expected} were expected`);
  }
  const last = rounds.at(-1) as Round;
  const second = rounds[2] ?? rounds[1];
  const summary = [
    ['rounds', `${options.rounds} of ${roundSeconds} s`],
    ['connections', String(connections)],
    [
      'requests sent',
      `${total(sent)}: ${sent.fresh + sent.replays} creates (${sent.replays} replays), ` +
        `${sent.reads} reads, ${sent.pages} pages, ${sent.deletes} deletes`,
    ],
    ['throughput', `${(succeeded / loadSeconds).toFixed(1)} successful requests/s`],
    ['errors', String(errors)],
    ['RSS at start', `${mebibytes(startMemory.rss)} MiB`],
    ['RSS after the last round', `${mebibytes(rounds.at(-2)?.memory.rss)} MiB`],
    [`RSS after ${QUIET_SECONDS} s idle`, `${mebibytes(last.memory.rss)} MiB`],
    ['RSS peak (sampled)', `${mebibytes(peakRssBytes)} MiB`],
    [
      `RSS growth, round ${second?.name} to the last`,
      `${mebibytes(
        (rounds.at(-2)?.memory.rss ?? 0) - (second?.memory.rss ?? 0),
      )} MiB (heap used ${mebibytes((rounds.at(-2)?.memory.heapUsed ?? 0) - (second?.memory.heapUsed ?? 0))} MiB)`,
    ],
    ['server CPU', `${fixed(serverCpuSeconds / loadSeconds, 2)} cores`],
    ['rows stored', `${rowsStored} (expected ${expected})`],
    ...(received
      ? [
          [
            'deliveries received',
            Object.entries(received)
              .map(([behaviour, n]) => `${behaviour} ${n}`)
              .join(', '),
          ],
        ]
      : []),
    ['request log written', `${mebibytes(requestLogBytes)} MiB`],
    ['shutdown', shutdown],
    ['verdict', problems.length === 0 ? 'pass' : `fail: ${problems.join('; ')}`],
  ];
  const roundRows = rounds.map((round, i) => roundRow(round, rounds[i - 1]));
  say(`\n${textTable(['soak', ''], summary)}\n\n${textTable(ROUND_HEADER, roundRows)}`);
  const memory = samples.map((sample) => [String(sample.seconds), mebibytes(sample.rssBytes)]);
  const behaviours = rounds
    .filter((round) => round.behaviours)
    .map((round) => `${round.name}: ${round.behaviours?.join(', ')}`);
  return {
    title: 'Plant Store soak check',
    body: `## Result

${markdownTable(['', ''], summary)}

Throughput counts 2xx answers per second; errors are other answers plus socket errors and
timeouts. RSS is the server process's resident memory (VmRSS): at the start (before the load),
after the last round, after ${QUIET_SECONDS} s without requests, and the largest of the samples
taken every 100 ms.

## Each round

${markdownTable(ROUND_HEADER, roundRows)}

Read after each round's load stopped: the requests it answered 2xx and the others, the p99
latency of the 2xx answers, the webhook attempts the service made during the round (and those
that failed), the deliveries still pending (from \`plant_store_webhook_backlog\`), the seconds
the round spent in V8's scavenges (young generation) and in its other collections (from
\`nodejs_gc_duration_seconds\`), the resident
memory and its anonymous part (RssAnon: V8's heap, malloc's heap, stacks; the rest is mapped
files), and V8's heap from \`/metrics\` (\`nodejs_heap_size_used_bytes\`,
\`nodejs_heap_size_total_bytes\`, the new space's \`nodejs_heap_space_size_total_bytes\`,
\`nodejs_external_memory_bytes\`).
${
  behaviours.length > 0
    ? `\nThe receivers, by their order in \`WEBHOOK_URLS\`, round by round:\n\n${behaviours.map((line) => `- ${line}`).join('\n')}\n`
    : ''
}
${
  snapshots.length > 0
    ? `## Heap snapshots\n\n${markdownTable(
        ['after round', 'objects', 'live MiB', 'file'],
        snapshots.map((taken) => [
          String(taken.round),
          String(taken.objects),
          mebibytes(taken.liveBytes),
          taken.file,
        ]),
      )}\n\nWritten by the service on SIGUSR2 (\`--heapsnapshot-signal\`) into ${SNAPSHOT_FOLDER}, each after a full collection: what was live. The rounds after a snapshot hold the memory that writing it took.\n\n`
    : ''
}## Resident memory over the run

${markdownTable(['seconds', 'RSS MiB'], memory)}`,
    settings: {
      rounds: options.rounds,
      'seconds per round': roundSeconds,
      connections,
      load: mixed
        ? `mixed: ${MIX.creates} % creates, ${MIX.reads} % reads by id, ${MIX.pages} % pages, ${MIX.deletes} % deletes (of plants it created), over ${STORED_PLANTS} plants stored first`
        : 'creates',
      'memory sample interval (s)': options.sampleSeconds,
      'replays (% of creates)': options.replayPercent,
      'requests per second': options.rate ?? 'as many as answered',
      'service environment': `DATABASE_URL, API_TOKENS (a fresh token), HOST=127.0.0.1, PORT=0, LOG_LEVEL=info${
        receivers
          ? `, WEBHOOK_URLS (${receivers.urls.length} receivers), WEBHOOK_SECRET, WEBHOOK_TIMEOUT_MS=${WEBHOOK_TIMEOUT_MS}, WEBHOOK_RETRY_SCHEDULE=${WEBHOOK_RETRY_SCHEDULE}`
          : ''
      }${nodeOptions === '' ? '' : `, NODE_OPTIONS=${nodeOptions}`}${
        options.serviceMallocArenaMax === ''
          ? ''
          : `, MALLOC_ARENA_MAX=${options.serviceMallocArenaMax}`
      }; everything else at the defaults`,
    },
    failed: problems.length > 0,
  };
}
