import { isDeepStrictEqual } from 'node:util';
import { TOKEN } from './app.js';

/** A plant as a client sends it; the id may exceed 2^53, so it travels as a bigint. */
export interface SentPlant {
  id: bigint;
  name: string;
  tag?: string;
}

/** What a client got back for one POST /plants. */
export type Answer =
  | {
      kind: 'status';
      status: number;
      body: unknown;
      retryAfter: string | null;
      /** The response closed its connection: the service was draining. */
      connectionClose: boolean;
      ms: number;
    }
  /** The connection failed before a whole answer arrived (refused, reset, closed). */
  | { kind: 'network-error'; error: string; ms: number }
  /** No answer within the client's timeout. */
  | { kind: 'timeout'; ms: number };

export interface Attempt {
  plant: SentPlant;
  answer: Answer;
  /** When it was sent (performance.now()), where known; the answer came `answer.ms` later. */
  sentAt?: number;
}

export function plantJson(plant: SentPlant): string {
  const tag = plant.tag === undefined ? '' : `,"tag":${JSON.stringify(plant.tag)}`;
  return `{"id":${plant.id},"name":${JSON.stringify(plant.name)}${tag}}`;
}

/** The Plant a 200 must answer for `plant`. */
export function expectedAnswer(plant: SentPlant): object {
  return plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag };
}

const names = ['Monstera', 'Ficus lyrata 🌿', 'Ölbaum', '日本のカエデ', 'x'];
const tags = [undefined, '', 'aroid', 'tag with "quotes" and \\ backslash', 'ü'];

/** A plant for `id` with a name and tag that vary, so a row mixed up with another shows. */
export function plantFor(id: bigint): SentPlant {
  const n = Number(id % 1000n);
  const name = `${names[n % names.length]} #${id}`;
  const tag = tags[(n >> 2) % tags.length];
  return tag === undefined ? { id, name } : { id, name, tag };
}

const networkErrorText = (error: unknown): string => {
  const { message, cause } = error as { message?: string; cause?: { code?: string } };
  return cause?.code ?? message ?? String(error);
};

/** One POST /plants with the test token; never throws. */
export async function sendPlant(
  baseUrl: string,
  plant: SentPlant,
  timeoutMs: number,
): Promise<Answer> {
  const started = performance.now();
  const ms = () => Math.round(performance.now() - started);
  try {
    const response = await fetch(`${baseUrl}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: plantJson(plant),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await response.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {}
    return {
      kind: 'status',
      status: response.status,
      body,
      retryAfter: response.headers.get('retry-after'),
      connectionClose: response.headers.get('connection') === 'close',
      ms: ms(),
    };
  } catch (error) {
    if ((error as Error).name === 'TimeoutError') return { kind: 'timeout', ms: ms() };
    return { kind: 'network-error', error: networkErrorText(error), ms: ms() };
  }
}

export interface LoadOptions {
  baseUrl: string;
  /** Clients sending one create after another, each with a fresh id. */
  clients: number;
  /** The first id; the others follow it. */
  firstId: bigint;
  /** A request without an answer after this long counts as a timeout. */
  timeoutMs?: number;
  /** A client waits this long after a failure before its next request, as a client would. */
  pauseAfterFailureMs?: number;
}

export interface Load {
  /** Every create sent so far that has its answer. */
  readonly attempts: readonly Attempt[];
  acknowledged(): number;
  /** Resolves once `count` more creates than now are acknowledged; rejects after `withinMs`. */
  moreAcknowledged(count: number, withinMs: number): Promise<void>;
  /** Stops sending and resolves once every create sent has its answer. */
  stop(): Promise<Attempt[]>;
}

export function startLoad({
  baseUrl,
  clients,
  firstId,
  timeoutMs = 15_000,
  pauseAfterFailureMs = 50,
}: LoadOptions): Load {
  const attempts: Attempt[] = [];
  let nextId = firstId;
  let acknowledged = 0;
  let stopping = false;

  async function client(): Promise<void> {
    while (!stopping) {
      const plant = plantFor(nextId++);
      const sentAt = performance.now();
      const answer = await sendPlant(baseUrl, plant, timeoutMs);
      attempts.push({ plant, answer, sentAt });
      if (answer.kind === 'status' && answer.status === 200) acknowledged++;
      else await new Promise((resolve) => setTimeout(resolve, pauseAfterFailureMs));
    }
  }
  const running = Promise.all(Array.from({ length: clients }, client));

  return {
    attempts,
    acknowledged: () => acknowledged,
    async moreAcknowledged(count, withinMs) {
      const target = acknowledged + count;
      const deadline = Date.now() + withinMs;
      while (acknowledged < target) {
        if (Date.now() > deadline) {
          throw new Error(
            `only ${acknowledged - (target - count)} of ${count} more creates were acknowledged within ${withinMs} ms: ${JSON.stringify(summarize(attempts))}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async stop() {
      stopping = true;
      await running;
      return attempts;
    },
  };
}

/** How many answers of each kind: `200`, `503`, `network-error`, `timeout`... */
export function summarize(attempts: readonly Attempt[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const { answer } of attempts) {
    const key = answer.kind === 'status' ? String(answer.status) : answer.kind;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

/** A row of the plants table, id as text. */
export interface StoredRow {
  id: string;
  name: string;
  tag: string | null;
}

export interface DurabilityReport {
  /** Creates sent. */
  requests: number;
  /** Creates answered 200. */
  acknowledged: number;
  /** Acknowledged creates whose row holds exactly the name and tag sent. */
  verified: number;
  /** Acknowledged creates whose row is missing or holds something else. */
  lost: number;
  /** 200s whose body was not the plant sent. */
  wrongAnswers: number;
  /** Answers by kind (status code, network-error, timeout). */
  answers: Record<string, number>;
  /** Creates without a 200 whose plant was stored anyway, with exactly its content. */
  storedUnacknowledged: number;
  /** Rows whose content differs from what was sent with their id. */
  corrupted: number;
  /** Rows whose id no create sent. */
  phantoms: number;
  /** A few of the failures above, to read in the test's message. */
  examples: string[];
}

function holds(row: StoredRow | undefined, plant: SentPlant): boolean {
  return row !== undefined && row.name === plant.name && row.tag === (plant.tag ?? null);
}

/** Compares what clients were told with what the table holds. */
export function checkDurability(
  attempts: readonly Attempt[],
  rows: readonly StoredRow[],
): DurabilityReport {
  const stored = new Map(rows.map((row) => [row.id, row]));
  const sent = new Set<string>();
  const report: DurabilityReport = {
    requests: attempts.length,
    acknowledged: 0,
    verified: 0,
    lost: 0,
    wrongAnswers: 0,
    answers: summarize(attempts),
    storedUnacknowledged: 0,
    corrupted: 0,
    phantoms: 0,
    examples: [],
  };
  const example = (text: string) => {
    if (report.examples.length < 10) report.examples.push(text);
  };
  for (const { plant, answer } of attempts) {
    const id = String(plant.id);
    sent.add(id);
    const row = stored.get(id);
    const acknowledged = answer.kind === 'status' && answer.status === 200;
    if (acknowledged) {
      report.acknowledged++;
      if (!isDeepStrictEqual(answer.body, expectedAnswer(plant))) {
        report.wrongAnswers++;
        example(`id ${id}: 200 answered ${JSON.stringify(answer.body)} for ${plantJson(plant)}`);
      }
      if (holds(row, plant)) {
        report.verified++;
      } else {
        report.lost++;
        example(`id ${id}: acknowledged, but the table holds ${JSON.stringify(row ?? null)}`);
      }
    } else if (row !== undefined) {
      if (holds(row, plant)) {
        report.storedUnacknowledged++;
      } else {
        report.corrupted++;
        example(`id ${id}: answered ${JSON.stringify(answer)}, stored ${JSON.stringify(row)}`);
      }
    }
  }
  for (const id of stored.keys()) {
    if (!sent.has(id)) {
      report.phantoms++;
      example(`id ${id}: stored, but never sent`);
    }
  }
  return report;
}

/** The ids of `plants` that the table lacks or holds with another name or tag. */
export function notStoredAsSent(
  plants: readonly SentPlant[],
  rows: readonly StoredRow[],
): string[] {
  const stored = new Map(rows.map((row) => [row.id, row]));
  return plants
    .filter((plant) => !holds(stored.get(String(plant.id)), plant))
    .map((plant) => String(plant.id));
}

/** One line for the test output, tagged with the suite's name. */
export function formatReport(scenario: string, report: DurabilityReport, suite = 'faults'): string {
  const { requests, acknowledged, verified, lost } = report;
  return `[${suite}] ${scenario}: requests=${requests} acknowledged=${acknowledged} verified=${verified} lost=${lost} | answers=${JSON.stringify(report.answers)} storedUnacknowledged=${report.storedUnacknowledged} corrupted=${report.corrupted} phantoms=${report.phantoms} wrongAnswers=${report.wrongAnswers}`;
}

/**
 * Sends every create that did not get a 200 again, unchanged, `concurrency` at a time, as a
 * client that retries would. Returns how many it sent, and the answers that were still not a
 * 200 with the plant.
 */
export async function retryUnacknowledged(
  baseUrl: string,
  attempts: readonly Attempt[],
  concurrency = 32,
): Promise<{ retried: number; failures: Attempt[] }> {
  const pending = attempts
    .filter(({ answer }) => !(answer.kind === 'status' && answer.status === 200))
    .map(({ plant }) => plant);
  const retried = pending.length;
  const failures: Attempt[] = [];
  async function worker(): Promise<void> {
    for (let plant = pending.pop(); plant; plant = pending.pop()) {
      const sentAt = performance.now();
      const answer = await sendPlant(baseUrl, plant, 15_000);
      const ok =
        answer.kind === 'status' &&
        answer.status === 200 &&
        isDeepStrictEqual(answer.body, expectedAnswer(plant));
      if (!ok) failures.push({ plant, answer, sentAt });
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { retried, failures };
}
