// Memory of a running service under the load of the bound in docs/operations.md (Memory), read
// from its /metrics: 8 clients of mixed load (creates, reads by id, pages of 1000) for 50 s,
// 15 s idle, then a second round of 20 s of pages of 1000 and 15 s idle. It prints the resident
// memory, V8's heap and the service's CPU per request at each step, and exits non-zero when a
// bound is broken. Loopback only; it stops by itself. Usage, with the service started by
// `npm start` on port 3000 (PROBE_TOKEN: one of its API_TOKENS, dev-token-change-me unless set;
// PROBE_PID: the service's process id, to split the resident memory as /proc reads it):
//   node scripts/memory-probe.js [http://127.0.0.1:3000]
import { readFileSync } from 'node:fs';

const MIB = 1024 * 1024;
const CLIENTS = 8;
const MIXED_MS = 50_000;
const PAGES_MS = 20_000;
const IDLE_MS = 15_000;
const SAMPLE_MS = 200;

const base = new URL(process.argv[2] ?? 'http://127.0.0.1:3000');
if (!['127.0.0.1', 'localhost', '[::1]'].includes(base.hostname)) {
  throw new Error(`the probe loads loopback only, not ${base.hostname}`);
}
const token = process.env.PROBE_TOKEN ?? 'dev-token-change-me';
const auth = { authorization: `Bearer ${token}` };
// Ids of this run only, so that runs against one database never collide.
let nextId = Date.now() * 1000;
const created = [];

async function memory() {
  const text = await (await fetch(new URL('/metrics', base))).text();
  const value = (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return {
    rss: value('process_resident_memory_bytes') / MIB,
    heapUsed: value('nodejs_heap_size_used_bytes') / MIB,
    heapTotal: value('nodejs_heap_size_total_bytes') / MIB,
    external: value('nodejs_external_memory_bytes') / MIB,
    cpuSeconds: value('process_cpu_seconds_total'),
    ...(process.env.PROBE_PID && residentParts(process.env.PROBE_PID)),
  };
}

/** The anonymous and file-backed parts of the resident memory of process `pid`. */
function residentParts(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (name) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1]) / 1024;
  return { anon: kib('RssAnon'), file: kib('RssFile') };
}

async function call(path, init) {
  const response = await fetch(new URL(path, base), {
    ...init,
    headers: { ...auth, ...init?.headers },
  });
  await response.arrayBuffer();
  if (!response.ok) throw new Error(`${init?.method ?? 'GET'} ${path} answered ${response.status}`);
}

async function createPlant() {
  const id = nextId++;
  await call('/plants', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id, name: `Plant ${id}`, tag: 'probe' }),
  });
  created.push(id);
}
const readPlant = () => call(`/plants/${created[Math.floor(Math.random() * created.length)]}`);
const pageOf1000 = () => call('/plants?limit=1000');

/**
 * Runs the steps round-robin on CLIENTS connections for ms; returns the requests made, the
 * largest RSS seen and the service's CPU time per request.
 */
async function load(steps, ms) {
  const { cpuSeconds } = await memory();
  const until = performance.now() + ms;
  let requests = 0;
  const clients = Array.from({ length: CLIENTS }, async (_, client) => {
    for (let i = client; performance.now() < until; i++) {
      await steps[i % steps.length]();
      requests++;
    }
  });
  let peak = 0;
  let done = false;
  const sampling = (async () => {
    while (!done) {
      peak = Math.max(peak, (await memory()).rss);
      await new Promise((resolve) => setTimeout(resolve, SAMPLE_MS));
    }
  })();
  await Promise.all(clients);
  done = true;
  await sampling;
  const cpuMicros = (((await memory()).cpuSeconds - cpuSeconds) * 1e6) / requests;
  return { peak, requests, cpuMicros };
}

const idle = () => new Promise((resolve) => setTimeout(resolve, IDLE_MS));
const show = (label, { rss, heapUsed, heapTotal, external, anon, file }) =>
  console.log(
    `${label.padEnd(12)} RSS ${rss.toFixed(1)} MiB${anon === undefined ? '' : ` (anonymous ${anon.toFixed(1)}, files ${file.toFixed(1)})`}, heap used ${heapUsed.toFixed(1)} of ${heapTotal.toFixed(1)} MiB, external ${external.toFixed(1)} MiB`,
  );

// Enough rows for full pages of 1000 from the first second of the load.
for (let i = 0; i < 1000; i += CLIENTS)
  await Promise.all(Array.from({ length: CLIENTS }, createPlant));
const before = await memory();
show('before', before);
const mixed = await load([createPlant, readPlant, pageOf1000], MIXED_MS);
console.log(
  `mixed load, ${MIXED_MS / 1000} s: ${mixed.requests} requests, ${mixed.cpuMicros.toFixed(0)} µs of service CPU each, RSS peak ${mixed.peak.toFixed(1)} MiB`,
);
await idle();
const afterMixed = await memory();
show(`${IDLE_MS / 1000} s after`, afterMixed);
const pages = await load([pageOf1000], PAGES_MS);
console.log(
  `pages of 1000, ${PAGES_MS / 1000} s: ${pages.requests} requests, ${pages.cpuMicros.toFixed(0)} µs of service CPU each, RSS peak ${pages.peak.toFixed(1)} MiB`,
);
await idle();
const afterPages = await memory();
show(`${IDLE_MS / 1000} s after`, afterPages);

const back = afterMixed.rss - before.rss;
const secondRound = afterPages.rss - afterMixed.rss;
const peak = Math.max(mixed.peak, pages.peak);
const verdicts = [
  [`peak ${peak.toFixed(1)} MiB under 256 MiB`, peak < 256],
  [
    `15 s after: ${back.toFixed(1)} MiB above before, within 48 MiB or 25 %`,
    back <= Math.max(48, before.rss * 0.25),
  ],
  [`second round of pages adds ${secondRound.toFixed(1)} MiB, under 32 MiB`, secondRound < 32],
];
for (const [text, ok] of verdicts) console.log(`${ok ? 'ok  ' : 'FAIL'} ${text}`);
process.exitCode = verdicts.every(([, ok]) => ok) ? 0 : 1;
