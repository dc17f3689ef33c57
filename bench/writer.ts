import { plantBody, plantIds } from './harness.js';

// Creates plants through a service at a steady pace, keeping each one's id and the
// Consistency-Token its create answered, for reads that send it back.

/** Creates a second: the primary keeps moving while reads run, and every 10 ms has a token. */
const WRITES_PER_SECOND = 100;

export interface Written {
  id: bigint;
  token: string;
  /** When its answer came (performance.now()). */
  at: number;
}

export interface Writer {
  perSecond: number;
  /** In the order their answers came. */
  written: Written[];
  /** Creates that failed, by status or error. */
  failures: Map<string, number>;
  /** Resolves once some plant's answer is at least `ms` old. */
  aged(ms: number): Promise<void>;
  /** Stops creating; resolves once every create sent has its answer. */
  stop(): Promise<void>;
}

export function startWriter(baseUrl: string, token: string): Writer {
  const nextId = plantIds();
  const pending = new Set<Promise<void>>();
  const writer: Writer = {
    perSecond: WRITES_PER_SECOND,
    written: [],
    failures: new Map(),
    async aged(ms) {
      for (;;) {
        const first = writer.written[0];
        if (first && performance.now() - first.at >= ms) return;
        if (writer.failures.size > 0) {
          throw new Error(`the writer could not create a plant: ${[...writer.failures.keys()]}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async stop() {
      clearInterval(timer);
      await Promise.all(pending);
    },
  };
  const failed = (why: string) => writer.failures.set(why, (writer.failures.get(why) ?? 0) + 1);
  const create = async () => {
    const id = nextId();
    try {
      const response = await fetch(`${baseUrl}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: plantBody(id),
      });
      await response.arrayBuffer();
      const answered = response.headers.get('consistency-token');
      if (response.ok && answered) {
        writer.written.push({ id, token: answered, at: performance.now() });
      } else failed(response.ok ? 'no Consistency-Token' : `${response.status}`);
    } catch (error) {
      failed((error as Error).message);
    }
  };
  const timer = setInterval(() => {
    const sent = create();
    pending.add(sent);
    void sent.finally(() => pending.delete(sent));
  }, 1000 / WRITES_PER_SECOND);
  return writer;
}
