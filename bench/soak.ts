// The soak suite: the service as shipped under load for minutes, in BENCH_ROUNDS rounds: a mix
// of creates (a share replaying earlier ones), reads by id, pages and deletes of what it created,
// or creates alone (BENCH_SOAK_LOAD=creates). With BENCH_SOAK_WEBHOOKS=unruly (the default) the
// webhook is on, to six receivers: one answers 200, the others fail in each way a receiver can,
// which does what changing round after round. After each round, and after a quiet spell at the
// end, it reads the service's memory. Fails when the service died, answered anything but 2xx,
// lost or kept a row it should not, or did not stop cleanly.
import { mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  fixed,
  markdownTable,
  measure,
  mebibytes,
  type Session,
  type SuiteReport,
  say,
  shippedNodeOptions,
  startService,
  storePlants,
  withClient,
} from './harness.js';
import { runLoad } from './load.js';
import {
  type MemoryReading,
  MIX,
  readMemory,
  soakRequests,
  startUnrulyReceivers,
  WEBHOOK_RETRY_SCHEDULE,
  WEBHOOK_SECRET,
  WEBHOOK_TIMEOUT_MS,
} from './soak-load.js';

/** Plants stored before a mixed load, for its reads and pages. */
const STORED_PLANTS = 20_000;
/** After the last round, the service idles this long before its memory is read once more. */
const QUIET_SECONDS = 15;
/** Heap snapshots go here (the service's --diagnostic-dir). */
const SNAPSHOT_FOLDER = join(tmpdir(), 'plant-store-heap-snapshots');

interface Round {
  name: string;
  behaviours?: string[];
  succeeded: number;
  errors: number;
  p99Ms: number | null;
  memory: MemoryReading;
}

const attempts = (memory: MemoryReading | undefined) =>
  Object.values(memory?.attempts ?? {}).reduce((sum, n) => sum + n, 0);
const failedAttempts = (memory: MemoryReading | undefined) =>
  attempts(memory) - (memory?.attempts?.['2xx'] ?? 0);

const ROUND_HEADER = (
  'round|2xx|errors|p99 ms|webhook attempts|backlog|GC s|RSS MiB|anon MiB|heap used MiB|' +
  'heap total MiB|new space MiB|external MiB'
).split('|');

function roundRow(round: Round, previous: Round | undefined): string[] {
  const { memory } = round;
  const gc = memory.gcSeconds;
  const gcBefore = previous?.memory.gcSeconds ?? { minor: 0, major: 0 };
  return [
    round.name,
    String(round.succeeded),
    String(round.errors),
    fixed(round.p99Ms, 1),
    memory.attempts
      ? `${attempts(memory) - attempts(previous?.memory)} (${failedAttempts(memory) - failedAttempts(previous?.memory)} failed)`
      : '-',
    memory.backlog === undefined ? '-' : String(memory.backlog),
    gc
      ? `${(gc.minor - gcBefore.minor).toFixed(2)} / ${(gc.major - gcBefore.major).toFixed(2)}`
      : '-',
    mebibytes(memory.rss),
    mebibytes(memory.rssAnon),
    mebibytes(memory.heapUsed),
    mebibytes(memory.heapTotal),
    mebibytes(memory.newSpace),
    mebibytes(memory.external),
  ];
}

/** Asks the service for a heap snapshot (SIGUSR2) and sums what it holds: what was live. */
async function heapSnapshot(pid: number, baseUrl: string, round: number): Promise<string[]> {
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
  let live = 0;
  for (let at = snapshot.meta.node_fields.indexOf('self_size'); at < nodes.length; at += fields) {
    live += nodes[at] ?? 0;
  }
  say(`heap snapshot after round ${round}: ${mebibytes(live)} MiB live, in ${file}`);
  return [String(round), String(nodes.length / fields), mebibytes(live), file];
}

export async function soakSuite(session: Session): Promise<SuiteReport> {
  const { options } = session;
  const connections = options.connections[0] ?? 1;
  const roundSeconds = Math.max(1, Math.round(options.durationSeconds / options.rounds));
  const stored =
    options.soakLoad === 'mixed' ? await storePlants(session, STORED_PLANTS) : undefined;
  const receivers = options.soakWebhooks === 'unruly' ? await startUnrulyReceivers() : undefined;
  const snapshotting = options.heapSnapshotRounds.length > 0;
  // Without its folder, the signal would kill the service rather than write a snapshot.
  if (snapshotting) mkdirSync(SNAPSHOT_FOLDER, { recursive: true });
  const nodeOptions = [
    options.serviceNodeOptions || shippedNodeOptions,
    snapshotting ? `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${SNAPSHOT_FOLDER}` : '',
  ]
    .filter((option) => option !== '')
    .join(' ');
  const env: Record<string, string> = {
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
  const service = await startService(session, 'service', env);
  const requests = soakRequests(options.replayPercent, stored);
  const noLoad = { succeeded: 0, errors: 0, p99Ms: null };
  const rounds: Round[] = [
    { name: 'start', ...noLoad, memory: await readMemory(service.pid, service.baseUrl) },
  ];
  const snapshots: string[][] = [];
  let cpuSeconds = 0;
  let loadSeconds = 0;
  let peakRssBytes = 0;
  for (let round = 1; round <= options.rounds && !session.signal.aborted; round++) {
    const behaviours = await receivers?.behaveForRound(round);
    const measured = await measure(session, service.pid, {}, () =>
      runLoad({
        baseUrl: service.baseUrl,
        token: session.token,
        connections,
        seconds: roundSeconds,
        rate: options.rate,
        next: requests.next,
        signal: session.signal,
      }),
    );
    loadSeconds += measured.seconds;
    cpuSeconds += (measured.cpu.service ?? 0) * measured.seconds;
    peakRssBytes = Math.max(peakRssBytes, measured.peakRssBytes ?? 0);
    const { succeeded, errors, p99Ms } = measured.result;
    const memory = await readMemory(service.pid, service.baseUrl);
    rounds.push({
      name: String(round),
      ...(behaviours && { behaviours }),
      succeeded,
      errors,
      p99Ms,
      memory,
    });
    say(`round ${round}: ${roundRow(rounds.at(-1) as Round, rounds.at(-2)).join('  ')}`);
    if (options.heapSnapshotRounds.includes(round)) {
      snapshots.push(await heapSnapshot(service.pid, service.baseUrl, round));
    }
  }
  if (session.signal.aborted) throw new Error('interrupted');
  await new Promise((resolve) => setTimeout(resolve, QUIET_SECONDS * 1000));
  const memory = await readMemory(service.pid, service.baseUrl);
  rounds.push({ name: `idle ${QUIET_SECONDS} s`, ...noLoad, memory });

  const problems: string[] = [];
  if (service.exited()) problems.push('the service exited during the load');
  const rowsStored = await withClient(session, async (client) => {
    const { rows } = await client.query<{ n: number }>('select count(*)::int as n from plants');
    return rows[0]?.n ?? 0;
  });
  const logBytes = statSync(service.logFile).size;
  const received = await receivers?.requests();
  await receivers?.stop();
  const exit = await service.stop();
  if (exit !== 0) problems.push(`the service did not stop cleanly on SIGTERM (${exit})`);
  const succeeded = rounds.reduce((sum, round) => sum + round.succeeded, 0);
  const errors = rounds.reduce((sum, round) => sum + round.errors, 0);
  if (errors > 0) problems.push(`${errors} requests failed`);
  if (succeeded === 0) problems.push('no request succeeded');
  // Every fresh id sent is stored and the deleted gone, but for the requests cut off when a
  // round stopped: at most one per connection and round.
  const sent = requests.sent();
  const expected = (stored?.count ?? 0) + sent.fresh - sent.deletes;
  if (Math.abs(rowsStored - expected) > connections * options.rounds) {
    problems.push(`${rowsStored} rows stored where ${expected} were expected`);
  }
  const lastRound = rounds.at(-2);
  const summary = [
    ['rounds', `${options.rounds} of ${roundSeconds} s, ${connections} connections`],
    [
      'requests sent',
      `${sent.fresh + sent.replays} creates (${sent.replays} replays), ${sent.reads} reads, ${sent.pages} pages, ${sent.deletes} deletes`,
    ],
    ['throughput', `${(succeeded / loadSeconds).toFixed(1)} successful requests/s`],
    ['errors', String(errors)],
    [
      'RSS at start / after the last round / idle',
      `${mebibytes(rounds[0]?.memory.rss)} / ${mebibytes(lastRound?.memory.rss)} / ${mebibytes(memory.rss)} MiB`,
    ],
    ['RSS peak (sampled every 100 ms)', `${mebibytes(peakRssBytes)} MiB`],
    ['service CPU', `${fixed(cpuSeconds / loadSeconds, 2)} cores`],
    ['rows stored', `${rowsStored} (expected ${expected})`],
    [
      'deliveries received',
      Object.entries(received ?? {})
        .map(([how, n]) => `${how} ${n}`)
        .join(', ') || '-',
    ],
    ['request log written', `${mebibytes(logBytes)} MiB`],
    ['shutdown on SIGTERM', `exit ${exit}`],
    ['verdict', problems.length === 0 ? 'pass' : `fail: ${problems.join('; ')}`],
  ];
  say(`\n${summary.map(([key, value]) => `${key}: ${value}`).join('\n')}`);
  const behaviours = rounds.flatMap((round) =>
    round.behaviours ? [`- ${round.name}: ${round.behaviours.join(', ')}`] : [],
  );
  const load =
    options.soakLoad === 'mixed'
      ? `${MIX.creates} % creates, ${MIX.reads} % reads by id, ${MIX.pages} % pages and ${MIX.deletes} % deletes (of plants it created), over ${STORED_PLANTS} plants stored first`
      : 'creates alone';
  return {
    title: 'Plant Store soak check',
    body: `${load}; ${options.replayPercent} % of the creates replay an earlier one; ${options.rate === undefined ? 'as fast as answered' : `${options.rate} requests/s`}. The service's environment beside the database, token and port: ${Object.keys(env).join(', ') || 'nothing'}${nodeOptions === '' ? '' : ` (NODE_OPTIONS=${nodeOptions})`}.

## Result

${markdownTable(['', ''], summary)}

## Each round

${markdownTable(
  ROUND_HEADER,
  rounds.map((round, i) => roundRow(round, rounds[i - 1])),
)}

Read after each round's load stopped: the 2xx answers and the others, the p99 latency of the 2xx,
the webhook attempts made during the round (and those that failed), the deliveries pending
(\`plant_store_webhook_backlog\`), the seconds spent in V8's scavenges and in its other
collections (\`nodejs_gc_duration_seconds\`), the resident memory and its anonymous part
(RssAnon), and V8's heap from \`/metrics\`.
${behaviours.length > 0 ? `\nThe receivers, by their order in \`WEBHOOK_URLS\`, round by round:\n\n${behaviours.join('\n')}\n` : ''}${
  snapshots.length > 0
    ? `\n## Heap snapshots\n\n${markdownTable(['after round', 'objects', 'live MiB', 'file'], snapshots)}\n\nWritten by the service on SIGUSR2 into ${SNAPSHOT_FOLDER}, each after a full collection.\n`
    : ''
}`,
    failed: problems.length > 0,
  };
}
