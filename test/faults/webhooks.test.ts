import { describe, expect, inject, it } from 'vitest';
import { generateSecret } from '../../src/webhooks/security/secrets.js';
import { TOKEN_ENTRIES } from '../helpers/app.js';
import {
  createClusterDatabase,
  ensureClusterRunning,
  queryUrl,
  restartCluster,
} from '../helpers/cluster.js';
import {
  type Attempt,
  plantJson,
  retryUnacknowledged,
  type StoredRow,
  startLoad,
} from '../helpers/load.js';
import {
  freePort,
  killIfRunning,
  type RunningServer,
  startServer,
  waitUntilReady,
} from '../helpers/process.js';
import {
  type Answer,
  type ReceivedRequest,
  startReceiver,
  WEBHOOK_SECRET,
} from '../helpers/receiver.js';

const cluster = inject('cluster');

const CLIENTS = 48;
const ACKNOWLEDGED_BEFORE = 300;
const ACKNOWLEDGED_AFTER = 300;
const WITHIN_MS = 60_000;
const FIRST_ID = 2n ** 53n + 1n;

async function readPlants(databaseUrl: string): Promise<StoredRow[]> {
  return queryUrl<StoredRow & Record<string, unknown>>(
    databaseUrl,
    'select id::text as id, name, tag from plants',
  );
}

/**
 * How the receiver subscribes: a static URL (WEBHOOK_URLS, signed with WEBHOOK_SECRET), or an
 * endpoint with a key of its own, stored as the management API stores it.
 */
type Subscription = 'static URL' | 'endpoint';

const ENDPOINT_SECRET = generateSecret();

function serviceEnv(
  databaseUrl: string,
  receiverUrl: string,
  subscription: Subscription,
): Record<string, string> {
  return {
    DATABASE_URL: databaseUrl,
    API_TOKENS: TOKEN_ENTRIES.join(','),
    DB_CONNECT_TIMEOUT_MS: '1000',
    DB_STATEMENT_TIMEOUT_MS: '2000',
    ...(subscription === 'static URL'
      ? { WEBHOOK_URLS: receiverUrl, WEBHOOK_SECRET }
      : { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' }),
    // Claims of a killed process expire 7 s after they were taken.
    WEBHOOK_TIMEOUT_MS: '2000',
    WEBHOOK_RETRY_SCHEDULE: '0.2,0.5,1,1,1,1,1,1',
  };
}

/** A receiver that answers `status()` and keeps, per plant id, the webhook-ids it accepted. */
async function countingReceiver(subscription: Subscription, status: () => number = () => 200) {
  const accepted = new Map<string, string[]>();
  let badSignatures = 0;
  let received = 0;
  const receiver = await startReceiver(
    (request: ReceivedRequest): Answer => {
      received++;
      if (!request.verified) badSignatures++;
      const answer = status();
      if (answer === 200) {
        const id = /^\{"id":(-?\d+),/.exec(request.body)?.[1] ?? 'unparsable';
        const list = accepted.get(id) ?? [];
        list.push(`${request.headers['webhook-id']} ${request.body}`);
        accepted.set(id, list);
      }
      return { status: answer };
    },
    { secret: subscription === 'endpoint' ? ENDPOINT_SECRET : WEBHOOK_SECRET },
  );
  return {
    receiver,
    accepted,
    stats: () => ({ received, badSignatures }),
  };
}

type Counting = Awaited<ReturnType<typeof countingReceiver>>;

/** Plants in the table whose create got no 200 (cut off by the fault): committed all the same. */
function storedUnacknowledged(attempts: Attempt[], rows: StoredRow[]): number {
  const acknowledged = new Set(
    attempts
      .filter(({ answer }) => answer.kind === 'status' && answer.status === 200)
      .map(({ plant }) => String(plant.id)),
  );
  return rows.filter((row) => !acknowledged.has(row.id)).length;
}

/**
 * Waits until every plant in the table was accepted by the receiver, then checks each one's
 * deliveries: the body is the plant as stored, one webhook-id per plant, and no delivery for a
 * plant that is not in the table. Returns the counts to print.
 */
async function checkDeliveries(
  name: string,
  databaseUrl: string,
  hook: Counting,
  storedWithoutAnswer: number,
) {
  const rows = await readPlants(databaseUrl);
  const deadline = Date.now() + WITHIN_MS;
  while (rows.some((row) => !hook.accepted.has(row.id)) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const stored = new Map(rows.map((row) => [row.id, row]));
  const missing = rows.filter((row) => !hook.accepted.has(row.id)).map((row) => row.id);
  const phantoms = [...hook.accepted.keys()].filter((id) => !stored.has(id));
  let accepted = 0;
  let wrongBodies = 0;
  let eventsWithOneId = 0;
  for (const [id, deliveries] of hook.accepted) {
    accepted += deliveries.length;
    const row = stored.get(id);
    if (!row) continue;
    const body = plantJson({
      id: BigInt(row.id),
      name: row.name,
      ...(row.tag === null ? {} : { tag: row.tag }),
    });
    const ids = new Set(deliveries.map((delivery) => delivery.split(' ')[0]));
    if (ids.size === 1) eventsWithOneId++;
    for (const delivery of deliveries)
      if (delivery.slice(delivery.indexOf(' ') + 1) !== body) wrongBodies++;
  }
  const counts = {
    plants: rows.length,
    storedWithoutA200: storedWithoutAnswer,
    received: hook.stats().received,
    accepted,
    events: hook.accepted.size,
    duplicates: accepted - hook.accepted.size,
    missing: missing.length,
    phantoms: phantoms.length,
    wrongBodies,
    badSignatures: hook.stats().badSignatures,
  };
  console.log(`[faults] webhooks, ${name}: ${JSON.stringify(counts)}`);
  expect(missing.slice(0, 10)).toStrictEqual([]);
  expect(phantoms.slice(0, 10)).toStrictEqual([]);
  expect(wrongBodies).toBe(0);
  expect(counts.badSignatures).toBe(0);
  expect(eventsWithOneId).toBe(rows.length);
  return counts;
}

/** Subscribes the receiver as an endpoint, once the service has migrated the database. */
async function subscribe(databaseUrl: string, subscription: Subscription, url: string) {
  if (subscription !== 'endpoint') return;
  await queryUrl(
    databaseUrl,
    `insert into webhook_endpoints (url, secret) values ('${url}', 'plain:${ENDPOINT_SECRET}')`,
  );
}

/** Creates under load against one service, with `fault` once writes flow; then every retry. */
async function underLoad(
  name: string,
  subscription: Subscription,
  fault: (service: RunningServer, restart: () => Promise<RunningServer>) => Promise<void>,
) {
  await ensureClusterRunning(cluster);
  const databaseUrl = await createClusterDatabase(cluster);
  const hook = await countingReceiver(subscription);
  const env = {
    ...serviceEnv(databaseUrl, hook.receiver.url, subscription),
    PORT: String(await freePort()),
  };
  let service = await startServer(env);
  await subscribe(databaseUrl, subscription, hook.receiver.url);
  const restart = async () => {
    service = await startServer(env);
    return service;
  };
  try {
    const load = startLoad({ baseUrl: service.baseUrl, clients: CLIENTS, firstId: FIRST_ID });
    let attempts: Attempt[];
    try {
      await load.moreAcknowledged(ACKNOWLEDGED_BEFORE, WITHIN_MS);
      await fault(service, restart);
      await waitUntilReady(service.baseUrl, WITHIN_MS);
      await load.moreAcknowledged(ACKNOWLEDGED_AFTER, WITHIN_MS);
    } finally {
      attempts = await load.stop();
    }
    const storedWithoutAnswer = storedUnacknowledged(attempts, await readPlants(databaseUrl));
    const { failures } = await retryUnacknowledged(service.baseUrl, attempts);
    expect(failures).toStrictEqual([]);
    return await checkDeliveries(name, databaseUrl, hook, storedWithoutAnswer);
  } finally {
    await killIfRunning(service);
    await hook.receiver.close();
  }
}

const subscriptions: Subscription[] = ['static URL', 'endpoint'];

describe.each(subscriptions)(
  'every committed plant is delivered (subscribed as a %s), and no other',
  (subscription) => {
    it('when the service is killed (SIGKILL) while creating, and started again', async () => {
      const counts = await underLoad(
        `service SIGKILL, ${subscription}`,
        subscription,
        async (service, restart) => {
          service.child.kill('SIGKILL');
          expect(await service.exited).toBe('SIGKILL');
          await restart();
        },
      );
      expect(counts.plants).toBeGreaterThanOrEqual(ACKNOWLEDGED_BEFORE + ACKNOWLEDGED_AFTER);
    });

    it('when PostgreSQL crashes while creating (pg_ctl restart -m immediate)', async () => {
      const counts = await underLoad(
        `PostgreSQL crash, ${subscription}`,
        subscription,
        async () => {
          await restartCluster(cluster, 'immediate');
        },
      );
      expect(counts.plants).toBeGreaterThanOrEqual(ACKNOWLEDGED_BEFORE + ACKNOWLEDGED_AFTER);
    });
  },
);

describe.each(subscriptions)(
  'two service processes on one database (subscribed as a %s)',
  (subscription) => {
    it('deliver each event exactly once after webhook-id deduplication, retries included', async () => {
      await ensureClusterRunning(cluster);
      const databaseUrl = await createClusterDatabase(cluster);
      // One answer in five fails, so retries are claimed by either process's poll.
      const hook = await countingReceiver(subscription, () => (Math.random() < 0.2 ? 500 : 200));
      const env = serviceEnv(databaseUrl, hook.receiver.url, subscription);
      const services = [await startServer(env), await startServer(env)];
      await subscribe(databaseUrl, subscription, hook.receiver.url);
      try {
        const loads = services.map((service, i) =>
          startLoad({
            baseUrl: service.baseUrl,
            clients: CLIENTS / 2,
            firstId: FIRST_ID + BigInt(i) * 10n ** 9n,
          }),
        );
        await Promise.all(
          loads.map((load) => load.moreAcknowledged(ACKNOWLEDGED_BEFORE, WITHIN_MS)),
        );
        const attempts = (await Promise.all(loads.map((load) => load.stop()))).flat();
        const counts = await checkDeliveries(
          `two processes, ${subscription}`,
          databaseUrl,
          hook,
          storedUnacknowledged(attempts, await readPlants(databaseUrl)),
        );
        expect(counts.events).toBe(counts.plants);
        expect(counts.received).toBeGreaterThan(counts.accepted);
      } finally {
        for (const service of services) await killIfRunning(service);
        await hook.receiver.close();
      }
    });
  },
);
