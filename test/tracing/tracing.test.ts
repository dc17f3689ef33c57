import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, TOKEN_ENTRIES } from '../helpers/app.js';
import {
  createScratchDatabase,
  holdPlantsTable,
  type ScratchDatabase,
  serverUrlOf,
} from '../helpers/database.js';
import {
  type OtlpReceiver,
  type ReceivedSpan,
  SPAN_KIND,
  startOtlpReceiver,
} from '../helpers/otlp.js';
import { killIfRunning, type RunningServer, startServer } from '../helpers/process.js';
import { type Receiver, startReceiver, WEBHOOK_SECRET } from '../helpers/receiver.js';

const tokens = TOKEN_ENTRIES.join(',');

/** The variables that turn tracing on, exporting to `receiver` quickly, as OTLP/JSON. */
const tracingTo = (receiver: OtlpReceiver) => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
  OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
  OTEL_BSP_SCHEDULE_DELAY: '50',
});

const hex = (bytes: number) => randomBytes(bytes).toString('hex');

/** A client's W3C trace context: a trace id and its own span id, sampled unless told. */
function clientTrace(sampled = true) {
  const traceId = hex(16);
  const spanId = hex(8);
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-${sampled ? '01' : '00'}` };
}

function request(
  baseUrl: string,
  path: string,
  { body, headers = {} }: { body?: object; headers?: Record<string, string> } = {},
) {
  return fetch(`${baseUrl}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: {
      authorization: `Bearer ${TOKEN}`,
      ...(body !== undefined && { 'content-type': 'application/json' }),
      ...headers,
    },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
}

/** The "request completed" log line of the request with this x-request-id, once written. */
async function logLineOf(
  server: RunningServer,
  requestId: string,
): Promise<Record<string, unknown>> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const line = server.stdout
      .filter((text) => text.startsWith('{'))
      .map((text) => JSON.parse(text) as Record<string, unknown>)
      .find((entry) => entry.msg === 'request completed' && entry.reqId === requestId);
    if (line) return line;
    if (Date.now() > deadline) throw new Error(`no log line for request ${requestId}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const inTrace = (spans: ReceivedSpan[], traceId: string) =>
  spans.filter((span) => span.traceId === traceId);

const named = (spans: ReceivedSpan[], name: string) => spans.filter((span) => span.name === name);

describe('tracing on, with an OTLP endpoint', () => {
  let database: ScratchDatabase;
  let collector: OtlpReceiver;
  let hook: Receiver;
  let server: RunningServer;
  beforeAll(async () => {
    database = await createScratchDatabase({ migrated: false });
    collector = await startOtlpReceiver();
    hook = await startReceiver();
    server = await startServer({
      DATABASE_URL: serverUrlOf(database),
      API_TOKENS: tokens,
      WEBHOOK_URLS: hook.url,
      WEBHOOK_SECRET,
      WRITE_CONCURRENCY: '1',
      OTEL_SERVICE_NAME: 'plant-store-under-test',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=test',
      ...tracingTo(collector),
    });
  });
  afterAll(async () => {
    if (server) await killIfRunning(server);
    await hook?.close();
    await collector?.close();
    await database?.drop();
  });

  /**
   * Sends a request in a trace of its own, expects `status`, and waits until the collector holds
   * one span named `awaited` in that trace; returns the client's trace, the answer and the trace.
   */
  async function tracedRequest(
    path: string,
    body: object | undefined,
    status: number,
    awaited: string,
  ): Promise<{
    client: ReturnType<typeof clientTrace>;
    response: Response;
    trace: ReceivedSpan[];
  }> {
    const client = clientTrace();
    const response = await request(server.baseUrl, path, {
      ...(body === undefined ? {} : { body }),
      headers: { traceparent: client.traceparent },
    });
    expect(response.status).toBe(status);
    const spans = await collector.waitFor(
      (all) => named(inTrace(all, client.traceId), awaited).length === 1,
    );
    return { client, response, trace: inTrace(spans, client.traceId) };
  }

  it('exports a POST /plants as a server span and its INSERT, in the trace the client began', async () => {
    const { client, response, trace } = await tracedRequest(
      '/plants',
      { id: 1, name: 'Monstera' },
      200,
      'INSERT plants',
    );
    const requestId = response.headers.get('x-request-id') ?? '';
    const [serverSpan] = named(trace, 'POST /plants');
    const [insert] = named(trace, 'INSERT plants');
    expect(serverSpan).toMatchObject({
      kind: SPAN_KIND.server,
      parentSpanId: client.spanId,
      statusCode: 0,
      attributes: {
        'http.request.method': 'POST',
        'http.route': '/plants',
        'url.path': '/plants',
        'url.scheme': 'http',
        'http.response.status_code': 200,
        'http.response.header.x-request-id': [requestId],
      },
      resource: {
        'service.name': 'plant-store-under-test',
        'deployment.environment.name': 'test',
      },
    });
    // The coalesced INSERT is the request's child and is linked to every request it served.
    expect(insert).toMatchObject({
      kind: SPAN_KIND.client,
      parentSpanId: serverSpan?.spanId,
      links: [{ traceId: client.traceId, spanId: serverSpan?.spanId }],
      attributes: {
        'db.system.name': 'postgresql',
        'db.operation.name': 'INSERT',
        'db.collection.name': 'plants',
        'db.query.summary': 'INSERT plants',
        'db.namespace': new URL(serverUrlOf(database)).pathname.slice(1),
        'server.address': new URL(serverUrlOf(database)).hostname,
      },
    });

    // The request's log line names the same trace and the server span.
    expect(await logLineOf(server, requestId)).toMatchObject({
      trace_id: client.traceId,
      span_id: serverSpan?.spanId,
    });
  });

  it('exports the webhook delivery of the new plant as a client span in the same trace', async () => {
    const { trace } = await tracedRequest('/plants', { id: 2, name: 'Fern' }, 200, 'POST');
    const [insert] = named(trace, 'INSERT plants');
    const [delivery] = named(trace, 'POST');
    const hookUrl = new URL(hook.url);
    expect(delivery).toMatchObject({
      kind: SPAN_KIND.client,
      parentSpanId: insert?.spanId,
      statusCode: 0,
      attributes: {
        'http.request.method': 'POST',
        'url.full': hook.url,
        'server.address': hookUrl.hostname,
        'server.port': Number(hookUrl.port),
        'http.response.status_code': 200,
        'webhook.id': hook.requests.at(-1)?.headers['webhook-id'],
      },
    });
  });

  it('exports a GET /plants/{id} with its coalesced SELECT', async () => {
    const { client, trace } = await tracedRequest('/plants/1', undefined, 200, 'SELECT plants');
    const [serverSpan] = named(trace, 'GET /plants/:id');
    expect(serverSpan).toMatchObject({
      kind: SPAN_KIND.server,
      parentSpanId: client.spanId,
      attributes: { 'http.route': '/plants/:id', 'http.response.status_code': 200 },
    });
    expect(named(trace, 'SELECT plants')[0]).toMatchObject({
      kind: SPAN_KIND.client,
      parentSpanId: serverSpan?.spanId,
      links: [{ traceId: client.traceId, spanId: serverSpan?.spanId }],
      attributes: { 'db.operation.name': 'SELECT', 'db.collection.name': 'plants' },
    });
  });

  it('exports a page and a delete with their statements as children, the delete linked as a batch', async () => {
    const page = clientTrace();
    const listed = await request(server.baseUrl, '/plants?limit=1', {
      headers: { traceparent: page.traceparent },
    });
    expect(listed.status).toBe(200);
    const removal = clientTrace();
    const deleted = await fetch(`${server.baseUrl}/plants/2`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${TOKEN}`, traceparent: removal.traceparent },
    });
    expect(deleted.status).toBe(204);
    const spans = await collector.waitFor(
      (all) =>
        inTrace(all, page.traceId).length === 2 && inTrace(all, removal.traceId).length === 2,
    );
    for (const [client, route, statement] of [
      [page, 'GET /plants', 'SELECT plants'],
      [removal, 'DELETE /plants/:id', 'DELETE plants'],
    ] as const) {
      const trace = inTrace(spans, client.traceId);
      const [serverSpan] = named(trace, route);
      expect(serverSpan?.parentSpanId).toBe(client.spanId);
      // A page is one request's statement; a delete goes in a batch, linked to each request.
      const links =
        route === 'GET /plants' ? [] : [{ traceId: client.traceId, spanId: serverSpan?.spanId }];
      expect(named(trace, statement)[0]).toMatchObject({
        kind: SPAN_KIND.client,
        parentSpanId: serverSpan?.spanId,
        links,
        attributes: { 'db.operation.name': statement.split(' ')[0] },
      });
    }
    expect(named(inTrace(spans, page.traceId), 'GET /plants')[0]?.attributes).toMatchObject({
      'url.path': '/plants',
      'url.query': 'limit=1',
    });
  });

  it('makes one INSERT span for a batch of creates, linked to each request it served', async () => {
    const release = await holdPlantsTable(database);
    const clients = Array.from({ length: 6 }, () => clientTrace());
    // With the table held, the first INSERT waits and the other creates queue behind it.
    const responses = clients.map((client, n) =>
      request(server.baseUrl, '/plants', {
        body: { id: 100 + n, name: 'Ivy' },
        headers: { traceparent: client.traceparent },
      }),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    await release();
    for (const response of await Promise.all(responses)) expect(response.status).toBe(200);

    const traceIds = new Set(clients.map((client) => client.traceId));
    const serverSpans = await collector
      .waitFor((all) => all.filter((span) => traceIds.has(span.traceId)).length >= 12)
      .then((all) => named(all, 'POST /plants').filter((span) => traceIds.has(span.traceId)));
    expect(serverSpans).toHaveLength(clients.length);
    const inserts = named(collector.spans, 'INSERT plants').filter((span) =>
      span.links.some((link) => traceIds.has(link.traceId)),
    );
    // Every request is linked from exactly one INSERT, and one INSERT served several.
    const linked = inserts.flatMap((insert) => insert.links.map((link) => link.spanId)).sort();
    expect(linked).toStrictEqual(serverSpans.map((span) => span.spanId).sort());
    const batch = inserts.find((insert) => insert.links.length > 1);
    expect(batch?.attributes['db.operation.batch.size']).toBe(batch?.links.length);
    // Its parent is one of the requests it served.
    expect(batch?.links.map((link) => link.spanId)).toContain(batch?.parentSpanId);
  });

  it('honours the sampling decision of the client: an unsampled trace is not exported', async () => {
    const unsampled = clientTrace(false);
    const response = await request(server.baseUrl, '/plants/1', {
      headers: { traceparent: unsampled.traceparent },
    });
    expect(response.status).toBe(200);
    // A sampled request sent after it is exported; by then the first would have been too.
    const sampled = clientTrace();
    await request(server.baseUrl, '/plants/1', { headers: { traceparent: sampled.traceparent } });
    await collector.waitFor((all) => inTrace(all, sampled.traceId).length === 2);
    expect(inTrace(collector.spans, unsampled.traceId)).toStrictEqual([]);
    // Its log line still carries the trace id, to find the client's side.
    const requestId = response.headers.get('x-request-id') ?? '';
    expect((await logLineOf(server, requestId)).trace_id).toBe(unsampled.traceId);
  });
});

describe('tracing at shutdown', () => {
  it('exports the spans still buffered before the process exits', async () => {
    const database = await createScratchDatabase({ migrated: false });
    const collector = await startOtlpReceiver();
    const server = await startServer({
      DATABASE_URL: serverUrlOf(database),
      API_TOKENS: tokens,
      ...tracingTo(collector),
      // Nothing is exported on its own for a minute.
      OTEL_BSP_SCHEDULE_DELAY: '60000',
    });
    try {
      const client = clientTrace();
      const response = await request(server.baseUrl, '/plants', {
        body: { id: 1, name: 'Aloe' },
        headers: { traceparent: client.traceparent },
      });
      expect(response.status).toBe(200);
      expect(collector.spans).toStrictEqual([]);
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
      expect(
        inTrace(collector.spans, client.traceId)
          .map((span) => span.name)
          .sort(),
      ).toStrictEqual(['INSERT plants', 'POST /plants']);
    } finally {
      await killIfRunning(server);
      await collector.close();
      await database.drop();
    }
  });
});

describe('tracing off', () => {
  it.each([
    ['without an OTLP endpoint', { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }],
    ['with OTEL_SDK_DISABLED=true', { OTEL_SDK_DISABLED: 'true' }],
  ])('exports nothing and logs no trace ids %s', async (_, env) => {
    const database = await createScratchDatabase({ migrated: false });
    const collector = await startOtlpReceiver();
    const endpoint = 'OTEL_SDK_DISABLED' in env ? tracingTo(collector) : {};
    const server = await startServer({
      DATABASE_URL: serverUrlOf(database),
      API_TOKENS: tokens,
      ...endpoint,
      ...env,
    });
    try {
      const client = clientTrace();
      const response = await request(server.baseUrl, '/plants', {
        body: { id: 1, name: 'Aloe' },
        headers: { traceparent: client.traceparent },
      });
      expect(response.status).toBe(200);
      const line = await logLineOf(server, response.headers.get('x-request-id') ?? '');
      expect(line).not.toHaveProperty('trace_id');
      expect(line).not.toHaveProperty('span_id');
      expect(server.stdout.join('\n')).not.toContain('tracing');
      // Stopped, it would have flushed whatever it held.
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
      expect(collector.requests).toStrictEqual([]);
    } finally {
      await killIfRunning(server);
      await collector.close();
      await database.drop();
    }
  });
});

describe('tracing of an endpoint with custom headers', () => {
  it('exports its PUT and its delivery without a value of its headers, nor the process log', async () => {
    const credential = 'Bearer receiver-credential-91d2aa';
    const database = await createScratchDatabase({ migrated: false });
    const collector = await startOtlpReceiver();
    const hook = await startReceiver();
    const server = await startServer({
      DATABASE_URL: serverUrlOf(database),
      API_TOKENS: tokens,
      ADMIN_TOKENS: 'admin-token-tracing-4e0c',
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      ...tracingTo(collector),
    });
    try {
      const admin = (method: string, path: string, body: object) =>
        fetch(`${server.baseUrl}${path}`, {
          method,
          headers: {
            authorization: 'Bearer admin-token-tracing-4e0c',
            'content-type': 'application/json',
          },
          body: JSON.stringify(body),
        });
      const created = await admin('POST', '/webhooks/endpoints', {
        url: hook.url,
        secret: WEBHOOK_SECRET,
      });
      expect(created.status).toBe(201);
      const { id } = (await created.json()) as { id: string };
      const set = await admin('PUT', `/webhooks/endpoints/${id}/headers`, {
        headers: { Authorization: credential },
      });
      expect(set.status).toBe(204);
      const client = clientTrace();
      const response = await request(server.baseUrl, '/plants', {
        body: { id: 1, name: 'Aloe' },
        headers: { traceparent: client.traceparent },
      });
      expect(response.status).toBe(200);
      await collector.waitFor(
        (all) => named(inTrace(all, client.traceId), 'POST').length === 1 && all.length > 3,
      );
      expect(hook.requests[0]?.headers.authorization).toBe(credential);
      expect(collector.spans.map((span) => span.name)).toContain(
        'PUT /webhooks/endpoints/:id/headers',
      );
      expect(JSON.stringify(collector.spans)).not.toContain('receiver-credential');
      expect(server.stdout.join('\n')).not.toContain('receiver-credential');
    } finally {
      await killIfRunning(server);
      await hook.close();
      await collector.close();
      await database.drop();
    }
  });
});
