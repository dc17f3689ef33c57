// The rate limit of an endpoint kept by two service processes together: both claim its
// deliveries, and PostgreSQL is all they share. Every event is delivered, none fails, and no
// second sees more than rateLimit + 1 attempts start. The figures are printed for
// bench/results/rate-limit.md.
import { describe, expect, inject, it } from 'vitest';
import { generateSecret } from '../../src/webhooks/security/secrets.js';
import { TOKEN, TOKEN_ENTRIES } from '../helpers/app.js';
import { createClusterDatabase, ensureClusterRunning, queryUrl } from '../helpers/cluster.js';
import { killIfRunning, type RunningServer, startServer } from '../helpers/process.js';
import { maxInAnySecond } from '../helpers/rates.js';
import { startReceiver } from '../helpers/receiver.js';

const cluster = inject('cluster');

const RATE = 20;
const PLANTS = 300;
/** Creates in flight at once, on each process. */
const CLIENTS = 8;
const ADMIN_TOKEN = 'admin-token-rate-limit-5d0e';
const SECRET = generateSecret();

/** Creates the plants `ids` on `service`, `CLIENTS` at a time. */
async function createPlants(service: RunningServer, ids: number[]): Promise<void> {
  const queue = [...ids];
  const client = async () => {
    for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
      const response = await fetch(`${service.baseUrl}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ id, name: `Paced ${id}` }),
      });
      expect(response.status).toBe(200);
    }
  };
  await Promise.all(Array.from({ length: CLIENTS }, client));
}

/** Attempts this process made, as its /metrics counts them. */
async function attemptsMadeBy(service: RunningServer): Promise<number> {
  const text = await (await fetch(`${service.baseUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith('plant_store_webhook_attempts_total'))
    .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
}

describe('the rate limit of an endpoint, across two service processes', () => {
  it(`keeps to rateLimit ${RATE} together, delivering all ${PLANTS} events and failing none`, async () => {
    await ensureClusterRunning(cluster);
    const databaseUrl = await createClusterDatabase(cluster);
    const receiver = await startReceiver(undefined, { secret: SECRET });
    const env = {
      DATABASE_URL: databaseUrl,
      API_TOKENS: TOKEN_ENTRIES.join(','),
      ADMIN_TOKENS: ADMIN_TOKEN,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      WEBHOOK_TIMEOUT_MS: '2000',
    };
    const services = [await startServer(env), await startServer(env)];
    try {
      const created = await fetch(`${services[0]?.baseUrl}/webhooks/endpoints`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ url: receiver.url, secret: SECRET, rateLimit: RATE }),
      });
      expect(created.status).toBe(201);
      const startedAt = Date.now();
      const ids = Array.from({ length: PLANTS }, (_, i) => i + 1);
      await Promise.all(
        services.map((service, n) =>
          createPlants(
            service,
            ids.filter((id) => id % services.length === n),
          ),
        ),
      );
      const createdIn = Date.now() - startedAt;
      await receiver.waitFor(PLANTS, (PLANTS / RATE) * 1000 + 30_000);
      const deliveredIn = Date.now() - startedAt;
      // The attempt log is written in batches: wait for the last ones.
      let log: Array<{ at: number; succeeded: boolean }> = [];
      for (const deadline = Date.now() + 10_000; Date.now() < deadline; ) {
        log = await queryUrl(
          databaseUrl,
          `select (extract(epoch from attempted_at) * 1000)::float8 as at, succeeded
             from webhook_attempts order by attempted_at`,
        );
        if (log.length >= receiver.requests.length) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const [left] = await queryUrl<{ count: number }>(
        databaseUrl,
        'select count(*)::int4 as count from webhook_deliveries',
      );
      const byProcess = await Promise.all(services.map(attemptsMadeBy));
      const starts = log.map((row) => row.at);
      const spanS = ((starts.at(-1) ?? 0) - (starts[0] ?? 0)) / 1000;
      const figures = {
        rateLimit: RATE,
        plants: PLANTS,
        createdInMs: createdIn,
        deliveredInMs: deliveredIn,
        attempts: log.length,
        failedAttempts: log.filter((row) => !row.succeeded).length,
        attemptsByProcess: byProcess,
        events: new Set(receiver.requests.map((request) => request.headers['webhook-id'])).size,
        badSignatures: receiver.requests.filter((request) => !request.verified).length,
        maxStartsInAnySecond: maxInAnySecond(starts),
        maxArrivalsInAnySecond: maxInAnySecond(receiver.requests.map((request) => request.at)),
        firstToLastStartS: Number(spanS.toFixed(2)),
        meanStartsPerSecond: Number(((starts.length - 1) / spanS).toFixed(2)),
        deliveriesLeft: left?.count,
      };
      console.log(`[faults] rate limit, two processes: ${JSON.stringify(figures)}`);
      expect(figures.events).toBe(PLANTS);
      expect(figures.badSignatures).toBe(0);
      expect(figures.attempts).toBe(PLANTS);
      expect(figures.failedAttempts).toBe(0);
      expect(figures.deliveriesLeft).toBe(0);
      // Both processes delivered: the limit was kept between them, not by one alone.
      for (const made of byProcess) expect(made).toBeGreaterThan(PLANTS / 10);
      expect(figures.maxStartsInAnySecond).toBeLessThanOrEqual(RATE + 1);
      // And together they reach it.
      expect(figures.meanStartsPerSecond).toBeGreaterThan(RATE * 0.8);
    } finally {
      for (const service of services) await killIfRunning(service);
      await receiver.close();
    }
  });
});
