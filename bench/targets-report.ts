import { endpointRows, endpointsMarkdown, endpointsTextTable } from './endpoints-report.js';
import type { Target } from './options.js';
import { fixed, markdownTable, mebibytes, textTable } from './report.js';
import type { RunResult } from './run-result.js';
import type { CpuUse } from './session.js';

// The targets suite's results: what each run measured, the ratios between targets, and the
// tables of the printout and the Markdown report.

interface Ratio {
  connections: number;
  /** service throughput / http-ceiling throughput */
  serviceToCeiling: number | null;
  /** service throughput / pgbench throughput */
  serviceToPgbench: number | null;
  /** service throughput / service-unbatched throughput: what coalescing buys */
  serviceToUnbatched: number | null;
  /** get-by-id throughput / http-ceiling throughput (a POST): reads against the HTTP stack */
  getByIdToCeiling: number | null;
  /** get-by-id throughput / get-by-id-unbatched throughput: what coalescing buys reads */
  getByIdToUnbatched: number | null;
  /** service+webhooks throughput / service throughput: what sending the webhook costs creates */
  webhooksToService: number | null;
  /** service-traced throughput / service throughput: what exporting traces costs creates */
  tracedToService: number | null;
  /** CPU µs per answer, of the target's process: service / floor */
  serviceCpuToFloor: number | null;
  /** CPU µs per answer of the target's process: get-by-id / service (a create) */
  getByIdCpuToCreate: number | null;
  /** The same, of the target's process and PostgreSQL together */
  getByIdTotalCpuToCreate: number | null;
  /** CPU µs per answer of the target's process: get-page / service (a create) */
  getPageCpuToCreate: number | null;
  /** The same, of the target's process and PostgreSQL together */
  getPageTotalCpuToCreate: number | null;
  /** CPU µs per answer of the target's process: service+webhooks / service */
  webhooksCpuToService: number | null;
}

function ratios(runs: RunResult[], levels: number[]): Ratio[] {
  const throughput = (target: Target, connections: number) => {
    const run = runs.find((r) => r.target === target && r.connections === connections);
    return run?.status === 'ok' && run.throughput !== undefined ? run.throughput : undefined;
  };
  const divide = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined || b === 0 ? null : a / b;
  const cpu = (target: Target, connections: number, withPostgres = false) => {
    const run = runs.find((r) => r.target === target && r.connections === connections);
    if (run?.status !== 'ok') return undefined;
    const perAnswer = cpuMicrosecondsPerAnswer(run);
    if (!withPostgres) return perAnswer.target;
    return perAnswer.target === undefined || perAnswer.postgres === undefined
      ? undefined
      : perAnswer.target + perAnswer.postgres;
  };
  return levels.map((connections) => {
    const service = throughput('service', connections);
    const getById = throughput('get-by-id', connections);
    const ceiling = throughput('http-ceiling', connections);
    const create = cpu('service', connections);
    const createTotal = cpu('service', connections, true);
    return {
      connections,
      serviceToCeiling: divide(service, ceiling),
      serviceToPgbench: divide(service, throughput('pgbench', connections)),
      serviceToUnbatched: divide(service, throughput('service-unbatched', connections)),
      getByIdToCeiling: divide(getById, ceiling),
      getByIdToUnbatched: divide(getById, throughput('get-by-id-unbatched', connections)),
      webhooksToService: divide(throughput('service+webhooks', connections), service),
      tracedToService: divide(throughput('service-traced', connections), service),
      serviceCpuToFloor: divide(create, cpu('floor', connections)),
      getByIdCpuToCreate: divide(cpu('get-by-id', connections), create),
      getByIdTotalCpuToCreate: divide(cpu('get-by-id', connections, true), createTotal),
      getPageCpuToCreate: divide(cpu('get-page', connections), create),
      getPageTotalCpuToCreate: divide(cpu('get-page', connections, true), createTotal),
      webhooksCpuToService: divide(cpu('service+webhooks', connections), create),
    };
  });
}

// ---- formatting ----

const cpuCell = (cpu: CpuUse | undefined) =>
  cpu
    ? [cpu.server, cpu.loadGenerator, cpu.machine].map((value) => fixed(value, 2)).join(' / ')
    : '-';

const connectionsCell = (run: RunResult) =>
  run.clients !== undefined && run.clients !== run.connections
    ? `${run.connections} (ran ${run.clients})`
    : String(run.connections);

const percent = (ratio: number | null) => (ratio === null ? '-' : `${(ratio * 100).toFixed(1)} %`);

/** CPU microseconds per answer: of the target's process, of PostgreSQL, of the whole machine. */
function cpuMicrosecondsPerAnswer(run: RunResult): {
  target?: number;
  postgres?: number;
  machine?: number;
} {
  const per = (cores: number | undefined) =>
    cores === undefined || !run.throughput ? undefined : (cores / run.throughput) * 1e6;
  const figures: { target?: number; postgres?: number; machine?: number } = {};
  const target = per(run.cpu?.server);
  const postgres = per(run.cpu?.postgres);
  const machine = per(run.cpu?.machine);
  if (target !== undefined) figures.target = target;
  if (postgres !== undefined) figures.postgres = postgres;
  if (machine !== undefined) figures.machine = machine;
  return figures;
}

const microsecondsCell = (run: RunResult) => {
  const { target, postgres, machine } = cpuMicrosecondsPerAnswer(run);
  return [target, postgres, machine].map((value) => fixed(value, 0)).join(' / ');
};

const TABLE_HEADER = [
  'target',
  'connections',
  'throughput /s',
  'plants /s',
  'p50 ms',
  'p99 ms',
  'errors',
  'peak RSS MiB',
  'CPU server / loadgen / machine',
  'CPU µs per answer: target / PostgreSQL / machine',
];

function tableRows(runs: RunResult[]): string[][] {
  return runs.map((run) =>
    run.status === 'ok'
      ? [
          run.target,
          connectionsCell(run),
          fixed(run.throughput, 1),
          fixed(
            run.throughput === undefined ? undefined : run.throughput * (run.rowsPerAnswer ?? 1),
            1,
          ),
          fixed(run.p50Ms, 2),
          fixed(run.p99Ms, 2),
          String(run.errors ?? '-'),
          mebibytes(run.peakRssBytes),
          cpuCell(run.cpu),
          microsecondsCell(run),
        ]
      : [run.target, connectionsCell(run), run.status, '', '', '', '', '', '', run.note ?? ''],
  );
}

const RATIO_HEADER = [
  'connections',
  'service / http-ceiling',
  'service / pgbench',
  'service / service-unbatched',
  'get-by-id / http-ceiling',
  'get-by-id / get-by-id-unbatched',
  'service+webhooks / service',
  'service-traced / service',
];

const times = (ratio: number | null) => (ratio === null ? '-' : `${ratio.toFixed(2)} ×`);

/** Ratios of CPU microseconds per answer; "with PostgreSQL" adds the server's to the target's. */
const CPU_RATIO_HEADER = [
  'connections',
  'service / floor',
  'get-by-id / create',
  'with PostgreSQL',
  'get-page / create',
  'with PostgreSQL',
  'service+webhooks / service',
];

function cpuRatioRows(list: Ratio[]): string[][] {
  return list.map((ratio) => [
    String(ratio.connections),
    times(ratio.serviceCpuToFloor),
    times(ratio.getByIdCpuToCreate),
    times(ratio.getByIdTotalCpuToCreate),
    times(ratio.getPageCpuToCreate),
    times(ratio.getPageTotalCpuToCreate),
    times(ratio.webhooksCpuToService),
  ]);
}

function ratioRows(list: Ratio[]): string[][] {
  return list.map((ratio) => [
    String(ratio.connections),
    percent(ratio.serviceToCeiling),
    percent(ratio.serviceToPgbench),
    percent(ratio.serviceToUnbatched),
    percent(ratio.getByIdToCeiling),
    percent(ratio.getByIdToUnbatched),
    percent(ratio.webhooksToService),
    percent(ratio.tracedToService),
  ]);
}

const WEBHOOK_HEADER = [
  'target',
  'connections',
  'subscribers',
  'plants',
  'delivered',
  'to every subscriber',
  'deliveries per plant',
  'duplicates',
  'behind at end',
  'drain s',
  'commit to delivery p50 ms',
  'p99 ms',
  'max ms',
  'within 1 s',
  'receiver CPU',
];

function webhookRows(runs: RunResult[]): string[][] {
  return runs.flatMap((run) =>
    run.webhooks
      ? [
          [
            run.target,
            String(run.connections),
            String(run.webhooks.subscribers),
            String(run.webhooks.plants),
            String(run.webhooks.delivered),
            String(run.webhooks.complete),
            fixed(run.webhooks.deliveriesPerPlant, 2),
            String(run.webhooks.duplicates),
            run.webhooks.behindAtEnd === undefined ? '-' : String(run.webhooks.behindAtEnd),
            fixed(run.webhooks.drainSeconds, 1),
            fixed(run.webhooks.p50Ms, 1),
            fixed(run.webhooks.p99Ms, 1),
            fixed(run.webhooks.maxMs, 1),
            percent(run.webhooks.withinOneSecond),
            fixed(run.webhooks.receiverCpu, 2),
          ],
        ]
      : [],
  );
}

/** One line for the progress output. */
export function runSummary(run: RunResult): string {
  const head = `${run.target} @ ${connectionsCell(run)}:`;
  if (run.status !== 'ok') return `${head} ${run.status}${run.note ? ` (${run.note})` : ''}`;
  const parts = [
    `${fixed(run.throughput, 1)}/s`,
    `p50 ${fixed(run.p50Ms, 2)} ms`,
    `p99 ${fixed(run.p99Ms, 2)} ms`,
    `errors ${run.errors ?? '-'}`,
  ];
  if (run.peakRssBytes !== undefined) parts.push(`peak RSS ${mebibytes(run.peakRssBytes)} MiB`);
  if (run.cpu) {
    parts.push(`CPU server/loadgen/machine ${cpuCell(run.cpu)}`);
    parts.push(`µs per answer target/PostgreSQL/machine ${microsecondsCell(run)}`);
  }
  if (run.note) parts.push(run.note);
  return `${head} ${parts.join(', ')}`;
}

/** The tables, as the harness prints them when the runs are done. */
export function textTables(runs: RunResult[], levels: number[]): string {
  const list = ratios(runs, levels);
  const webhooks = webhookRows(runs);
  const endpoints = endpointRows(runs, levels);
  return [
    textTable(TABLE_HEADER, tableRows(runs)),
    textTable(RATIO_HEADER, ratioRows(list), 0),
    textTable(CPU_RATIO_HEADER, cpuRatioRows(list), 0),
    ...(webhooks.length > 0 ? [textTable(WEBHOOK_HEADER, webhooks, 2)] : []),
    ...(endpoints.length > 0 ? [endpointsTextTable(endpoints)] : []),
  ].join('\n\n');
}

/** The report's sections: results, ratios, what each target is, notes, the server's settings. */
export function markdownBody(
  runs: RunResult[],
  levels: number[],
  notes: string[],
  postgres: Record<string, string>,
): string {
  const list = ratios(runs, levels);
  const webhooks = webhookRows(runs);
  return `## Results

Throughput counts successful answers (HTTP 2xx, or pgbench transactions) per second; plants/s
counts the plants they carry (a page of get-page carries 100). p50 and p99 are the
latencies of those answers as the load generator saw them. Errors are non-2xx answers plus socket
errors and timeouts (pgbench: failed transactions plus aborted clients). Peak RSS is the largest
VmRSS of the server process sampled every 100 ms while measured. CPU is in cores' worth used
while measured (1.00 = one core busy the whole time): the server process, the load generator
(this harness's process running autocannon), and the whole machine; per answer, it is in
microseconds of the target's process, of all PostgreSQL's processes together, and of the whole
machine (load generator included), the figures that hold still on a shared machine where
throughput does not.

${markdownTable(TABLE_HEADER, tableRows(runs))}

Throughput of the service relative to the other targets, per concurrency level:

${markdownTable(RATIO_HEADER, ratioRows(list), 0)}

CPU microseconds per answer relative to others in the same run: the service's process against
the floor's for a create; a read by id and a page of 100 against a create (the service's
process alone, and with PostgreSQL's processes added); a create with the webhook on against one
without:

${markdownTable(CPU_RATIO_HEADER, cpuRatioRows(list), 0)}
${
  webhooks.length === 0
    ? ''
    : `
The newPlant webhook of service+webhooks and service+endpoints-N: plants each stored (warm-up
included), plants its receiver got at least once and from every subscriber, requests per plant,
deliveries beyond one per plant and subscriber, deliveries still owed when the measured load
ended, seconds until the last came, and the time from each plant's \`created_at\` (the start
of its transaction, a little before its commit) to its first delivery's arrival:

${markdownTable(WEBHOOK_HEADER, webhooks, 1)}
`
}${endpointsMarkdown(endpointRows(runs, levels))}

## What each target is

- **floor**: \`bench/floor.ts\`, bare Fastify answering \`POST /plants\` with the shapes of the
  service's NewPlant and Plant schemas in plain TypeBox, a plain bearer check, no database, no
  logging, no metrics: the least a Fastify service with these schemas spends per create here.
- **service**: \`node dist/server.js\`, the service as shipped, with its default pool
  (\`DB_POOL_MAX\`), request logging at \`info\` into a file, and PostgreSQL's durable commits
  (the server's own \`synchronous_commit\` and \`fsync\`, listed below; the harness changes
  neither). Every request is \`POST /plants\` with a new id
  (\`{"id": <per-run random base + counter>, "name": "Monstera deliciosa", "tag": "aroid"}\`).
- **service+webhooks**: the same service with the newPlant webhook on (\`WEBHOOK_URLS\` one
  receiver on loopback, \`bench/receiver.ts\` in a process of its own, answering 200 at once):
  every create also writes its event in the same statement, and the service delivers it.
- **service+endpoints-1, -10, -100**: the same service with no \`WEBHOOK_URLS\` and that many
  webhook endpoints, rows of \`webhook_endpoints\` written before the first create (each a
  path of its own on the same receiver, \`<receiver>/<i>\`, and a \`whsec_\` key of its own,
  unsealed), with \`WEBHOOK_ALLOW_PRIVATE_NETWORKS=true\` so they may reach loopback: every
  create writes its event, a fan-out writes one delivery per endpoint, and each is signed with
  its endpoint's key, sent, and logged in \`webhook_attempts\`. The endpoints (and their
  deliveries and log) are removed when the run ends.
- **service-traced**: the same service with tracing on (\`OTEL_EXPORTER_OTLP_ENDPOINT\` a
  collector on loopback, \`bench/otlp-receiver.ts\` in a process of its own, answering 200 at
  once), everything else at the SDK's defaults: every request sampled, a server span per create and
  an INSERT span per batch of creates, exported as protobuf in batches. Its CPU
  per answer against the service's is what tracing costs.
- **service-unbatched**: the same service with coalescing switched off
  (\`WRITE_BATCH_MAX=1\`, \`WRITE_CONCURRENCY\` equal to the pool): one INSERT and one commit per
  request, as an everyday service does. The service's advantage over it is what coalescing buys.
- **http-ceiling**: \`bench/ceiling.ts\`, the service built by the same compiled
  \`createService\` (\`dist/service.js\`) with the same logging, metrics, auth, parsing,
  validation and serialisation, but a repository that does no I/O and answers as if the plant
  were created. It bounds what the service can reach
  on this machine with this HTTP stack.
- **pgbench**: PostgreSQL's own client running the service's statement (\`insert into plants
  ... on conflict (id) do nothing returning name, tag\`, prepared, a random int64 id per
  transaction, one transaction per statement), with as many clients as the level has
  connections. It bounds what the database can commit on this machine.
- **get-by-id**: the service as shipped answering \`GET /plants/{id}\` for a stored plant chosen
  at random; reads that arrive together share one \`select ... where id = any($1)\`.
- **get-by-id-unbatched**: the same with \`READ_BATCH_MAX=1\` (\`READ_CONCURRENCY\` equal to the
  pool): one SELECT per read. The difference is what coalescing buys reads.
- **get-page**: the service as shipped answering \`GET /plants?limit=100&after=<a stored id>\`,
  a full page of 100 plants each time (one index range scan per page).

Each target runs in its own process, started afresh for every level, with a warm-up that is
not counted; the levels alternate the targets (every target at one level,
then the next level), so slow drifts of the machine touch them all alike. All of them share
this machine's cores with the load generator and PostgreSQL, so none of
them has the machine to itself: the figures compare the targets with each other here, not
with a deployment where the database and the clients run elsewhere.

## Notes

${notes.map((note) => `- ${note}`).join('\n')}

## PostgreSQL

${Object.entries(postgres)
  .map(([name, value]) => `- ${name}: ${value}`)
  .join('\n')}
`;
}
