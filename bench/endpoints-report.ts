import { endpointsOf, type Target } from './options.js';
import { fixed, markdownTable, textTable } from './report.js';
import type { RunResult } from './run-result.js';

// What webhook subscribers cost a create: the service with none (service), one static URL
// (service+webhooks) and 1, 10 or 100 endpoints (service+endpoints-N), at each level.

/** Subscribers of each target that delivers, in the order of the table. */
const SUBSCRIBERS: Array<[Target, number, string]> = [
  ['service', 0, 'none'],
  ['service+webhooks', 1, 'static URL'],
  ...(['service+endpoints-1', 'service+endpoints-10', 'service+endpoints-100'] as const).map(
    (target): [Target, number, string] => [
      target,
      endpointsOf(target) ?? 0,
      `${endpointsOf(target)} endpoint${endpointsOf(target) === 1 ? '' : 's'}`,
    ],
  ),
];

export const ENDPOINTS_HEADER = [
  'connections',
  'subscribers',
  'target',
  'creates /s',
  'create p50 ms',
  'p99 ms',
  'service CPU µs per create',
  'PostgreSQL CPU µs per create',
  'service CPU / service',
  'service CPU µs per subscriber-delivery',
  'that / service CPU per create',
];

const perCreate = (cores: number | undefined, run: RunResult) =>
  cores === undefined || !run.throughput ? undefined : (cores / run.throughput) * 1e6;

const times = (ratio: number | undefined) => (ratio === undefined ? '-' : `${ratio.toFixed(2)} ×`);

/** One row per target with subscribers (and service, the base) that ran at each level. */
export function endpointRows(runs: RunResult[], levels: number[]): string[][] {
  if (!runs.some((run) => run.target.startsWith('service+'))) return [];
  return levels.flatMap((connections) => {
    const runOf = (target: Target) =>
      runs.find((r) => r.target === target && r.connections === connections && r.status === 'ok');
    const base = runOf('service');
    const baseCpu = base && perCreate(base.cpu?.server, base);
    return SUBSCRIBERS.flatMap(([target, subscribers, label]) => {
      const run = runOf(target);
      if (!run) return [];
      const cpu = perCreate(run.cpu?.server, run);
      const ratio = cpu !== undefined && baseCpu ? cpu / baseCpu : undefined;
      const perDelivery =
        subscribers > 0 && cpu !== undefined && baseCpu !== undefined
          ? (cpu - baseCpu) / subscribers
          : undefined;
      return [
        [
          String(connections),
          label,
          target,
          fixed(run.throughput, 1),
          fixed(run.p50Ms, 2),
          fixed(run.p99Ms, 2),
          fixed(cpu, 0),
          fixed(perCreate(run.cpu?.postgres, run), 0),
          target === 'service' ? '1.00 ×' : times(ratio),
          fixed(perDelivery, 0),
          times(perDelivery !== undefined && baseCpu ? perDelivery / baseCpu : undefined),
        ],
      ];
    });
  });
}

export const endpointsTextTable = (rows: string[][]) => textTable(ENDPOINTS_HEADER, rows, 3);

export function endpointsMarkdown(rows: string[][]): string {
  if (rows.length === 0) return '';
  return `
What subscribers cost a create, at one request rate: the service with none, with one static URL
(\`service+webhooks\`) and with 1, 10 or 100 endpoints (\`service+endpoints-N\`), all answered
by the same receiver. CPU per create is the service process's (and all of PostgreSQL's) over the
measured seconds divided by the creates answered in them; deliveries run beside the creates, so
at a rate the target keeps up with (see "behind at end" below) it holds the cost of delivering
them too. "Per subscriber-delivery" is (target's service CPU per create − service's) / N,
and that divided by the service's CPU per create: what one more delivery costs, in creates. At a
low rate the service's CPU per create holds its idle work too (polls, timers, metrics), which
the difference cancels but the division does not.

${markdownTable(ENDPOINTS_HEADER, rows, 3)}
`;
}
