// What the soak suite sends and what it reads of the service: its requests (creates alone, or a
// mix of creates, reads, pages and deletes), its webhook receivers, and its memory.
import { randomBytes } from 'node:crypto';
import { plantBody, startReceiver } from './harness.js';
import type { LoadRequest } from './load.js';
import { statusBytes } from './proc.js';

/** How many recent bodies a replay is drawn from. */
const REPLAY_WINDOW = 1024;
/** A plant is deleted only once this many creates were sent after its own: it is stored by then. */
const DELETE_LAG = 5000;
/** Shares of the mixed load, in percent: creates, reads by id, pages, deletes. */
export const MIX = { creates: 40, reads: 35, pages: 15, deletes: 10 } as const;
const PAGE_SIZE = 100;

/** Requests sent: creates of a new id, replays of an earlier create, reads, pages, deletes. */
export interface Sent {
  fresh: number;
  replays: number;
  reads: number;
  pages: number;
  deletes: number;
}

export interface SoakRequests {
  next: () => LoadRequest;
  sent: () => Sent;
}

/**
 * Fresh ids (a random 62-bit base plus a counter), `replayPercent` % of the creates replaying a
 * recent body. With `stored`, the mix of MIX: reads and pages of the plants stored before the
 * load, deletes of the plants this load created, oldest first, each once.
 */
export function soakRequests(
  replayPercent: number,
  stored?: { count: number; step: bigint },
): SoakRequests {
  const base = BigInt.asUintN(62, randomBytes(8).readBigUInt64BE());
  const recent: string[] = [];
  const sent: Sent = { fresh: 0, replays: 0, reads: 0, pages: 0, deletes: 0 };
  const create = (): LoadRequest => {
    if (recent.length > 0 && Math.random() * 100 < replayPercent) {
      sent.replays++;
      return {
        method: 'POST',
        path: '/plants',
        body: recent[Math.floor(Math.random() * recent.length)] as string,
      };
    }
    const body = plantBody(base + BigInt(sent.fresh));
    recent[sent.fresh % REPLAY_WINDOW] = body;
    sent.fresh++;
    return { method: 'POST', path: '/plants', body };
  };
  const storedId = (below: number) =>
    BigInt(Math.floor(Math.random() * below) + 1) * (stored?.step ?? 1n);
  const next = (): LoadRequest => {
    if (!stored) return create();
    const pick = Math.random() * 100;
    if (pick < MIX.creates) return create();
    if (pick < MIX.creates + MIX.reads) {
      sent.reads++;
      return { method: 'GET', path: `/plants/${storedId(stored.count)}` };
    }
    if (pick < MIX.creates + MIX.reads + MIX.pages) {
      sent.pages++;
      return {
        method: 'GET',
        path: `/plants?limit=${PAGE_SIZE}&after=${storedId(stored.count - PAGE_SIZE)}`,
      };
    }
    if (sent.deletes >= sent.fresh - DELETE_LAG) return create();
    return { method: 'DELETE', path: `/plants/${base + BigInt(sent.deletes++)}` };
  };
  return { next, sent: () => ({ ...sent }) };
}

/**
 * How a receiver of receiver.ts answers a delivery: 200 at once, 500, 429 with Retry-After: 1,
 * 200 after SLOW_MS (later than WEBHOOK_TIMEOUT_MS), never (nor closes), or with a reset.
 */
export const BEHAVIOURS = ['ok', 'error', 'throttle', 'slow', 'hang', 'reset'] as const;
export type Behaviour = (typeof BEHAVIOURS)[number];

/** The service's settings for the webhook: attempts end within a second, retries within seconds. */
export const WEBHOOK_TIMEOUT_MS = 1000;
export const WEBHOOK_RETRY_SCHEDULE = '1,2,4';
const SLOW_MS = WEBHOOK_TIMEOUT_MS + 500;

export const WEBHOOK_SECRET = `whsec_${randomBytes(32).toString('base64')}`;

/** The receivers, one per behaviour; receiver k behaves as BEHAVIOURS[k + round - 1], rotated. */
export async function startUnrulyReceivers() {
  const receiver = await startReceiver();
  return {
    urls: BEHAVIOURS.map((_, k) => `${receiver.url}/receivers/${k}`),
    async behaveForRound(round: number) {
      const behaviours = BEHAVIOURS.map((_, k) => BEHAVIOURS[(k + round - 1) % BEHAVIOURS.length]);
      await receiver.ask({ behaviours: behaviours as string[], slowMs: SLOW_MS });
      return behaviours as string[];
    },
    requests: async () => (await receiver.ask('report')).byBehaviour,
    stop: receiver.stop,
  };
}

/** The service's memory at one moment: the kernel's view and V8's (from its /metrics). */
export interface MemoryReading {
  rss?: number | undefined;
  /** Anonymous pages: the heaps (V8's and malloc's) and stacks. */
  rssAnon?: number | undefined;
  heapUsed?: number | undefined;
  heapTotal?: number | undefined;
  /** Memory outside V8's heap that its objects hold (Buffers among it). */
  external?: number | undefined;
  /** V8's young generation (new space) as committed. */
  newSpace?: number | undefined;
  /** Metrics of the webhook: attempts by result, and the backlog. */
  attempts?: Record<string, number>;
  backlog?: number | undefined;
  /** Seconds spent in V8's garbage collections so far: scavenges, and the others. */
  gcSeconds?: { minor: number; major: number };
}

/** The value of one sample of Prometheus' text format, e.g. `name{space="new"}`. */
function sample(text: string, name: string): number | undefined {
  const at = text.indexOf(`\n${name} `);
  if (at < 0) return undefined;
  const value = Number(text.slice(at + name.length + 2, text.indexOf('\n', at + 1)));
  return Number.isFinite(value) ? value : undefined;
}

export async function readMemory(pid: number, baseUrl: string): Promise<MemoryReading> {
  const reading: MemoryReading = {
    rss: statusBytes(pid, 'VmRSS'),
    rssAnon: statusBytes(pid, 'RssAnon'),
  };
  const text = await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(30_000) }).then(
    (response) => response.text(),
    () => undefined,
  );
  if (text === undefined) return reading;
  const body = `\n${text}`;
  reading.heapUsed = sample(body, 'nodejs_heap_size_used_bytes');
  reading.heapTotal = sample(body, 'nodejs_heap_size_total_bytes');
  reading.external = sample(body, 'nodejs_external_memory_bytes');
  reading.newSpace = sample(body, 'nodejs_heap_space_size_total_bytes{space="new"}');
  reading.backlog = sample(body, 'plant_store_webhook_backlog{state="pending"}');
  const attempts: Record<string, number> = {};
  for (const match of body.matchAll(
    /\nplant_store_webhook_attempts_total\{result="(\w+)"\} (\d+)/g,
  )) {
    attempts[match[1] as string] = Number(match[2]);
  }
  reading.attempts = attempts;
  const gc = { minor: 0, major: 0 };
  for (const match of body.matchAll(
    /\nnodejs_gc_duration_seconds_sum\{kind="(\w+)"\} ([\d.e+-]+)/g,
  )) {
    gc[match[1] === 'minor' ? 'minor' : 'major'] += Number(match[2]);
  }
  reading.gcSeconds = gc;
  return reading;
}
