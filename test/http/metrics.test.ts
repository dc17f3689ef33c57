import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postPlant, startTestApp, type TestApp } from '../helpers/app.js';
import { testEngine } from '../helpers/database.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

async function scrape(app = t.app) {
  const response = await app.inject({ method: 'GET', url: '/metrics' });
  expect(response.statusCode).toBe(200);
  return response;
}

/** The value of the first sample whose name and labels start with `prefix`. */
function sample(text: string, prefix: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(prefix));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('GET /metrics', () => {
  it('serves Prometheus text without a token', async () => {
    const response = await scrape();
    expect(response.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(response.body).toContain('# TYPE http_requests_total counter');
    expect(response.body).toContain('# TYPE process_cpu_seconds_total counter');
    expect(response.body).toContain('# TYPE nodejs_eventloop_lag_seconds gauge');
  });

  it('counts requests and their durations by method, route and status', async () => {
    await postPlant(t.app, { id: 1, name: 'counted' });
    await postPlant(t.app, { id: 1, name: 'conflicting' });
    await postPlant(t.app, '{');
    const { body } = await scrape();
    const route = 'method="POST",route="/plants"';
    expect(sample(body, `http_requests_total{${route},status_code="200"}`)).toBe(1);
    expect(sample(body, `http_requests_total{${route},status_code="409"}`)).toBe(1);
    expect(sample(body, `http_requests_total{${route},status_code="400"}`)).toBe(1);
    expect(sample(body, `http_request_duration_seconds_count{${route},status_code="200"}`)).toBe(1);
    expect(
      sample(body, `http_request_duration_seconds_bucket{le="+Inf",${route},status_code="200"}`),
    ).toBe(1);
    // Counted, not accumulated, by each scrape: a second one reads the same figures.
    const again = (await scrape()).body;
    expect(sample(again, `http_requests_total{${route},status_code="200"}`)).toBe(1);
    await postPlant(t.app, { id: 2, name: 'counted' });
    const after = (await scrape()).body;
    expect(sample(after, `http_requests_total{${route},status_code="200"}`)).toBe(2);
  });

  it('labels every unknown path as one unmatched route', async () => {
    await t.app.inject({ method: 'GET', url: '/a' });
    await t.app.inject({ method: 'GET', url: '/b' });
    const { body } = await scrape();
    expect(
      sample(body, 'http_requests_total{method="GET",route="unmatched",status_code="404"}'),
    ).toBe(2);
    expect(body).not.toContain('route="/a"');
  });

  it('reports the write path: batch sizes and the queue', async () => {
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => postPlant(t.app, { id: 100 + i, name: 'batched' })),
    );
    const { body } = await scrape();
    const batches = sample(body, 'plant_store_write_batch_size_count') ?? 0;
    const rows = sample(body, 'plant_store_write_batch_size_sum') ?? 0;
    expect(rows).toBeGreaterThanOrEqual(20);
    expect(batches).toBeGreaterThanOrEqual(1);
    expect(sample(body, 'plant_store_write_queue{state="queued"}')).toBe(0);
    expect(sample(body, 'plant_store_write_queue{state="in_flight"}')).toBe(0);
    expect(sample(body, 'plant_store_read_queue{state="queued"}')).toBe(0);
    expect(sample(body, 'plant_store_read_queue{state="in_flight"}')).toBe(0);
    expect(sample(body, 'plant_store_delete_queue{state="queued"}')).toBe(0);
    expect(sample(body, 'plant_store_delete_queue{state="in_flight"}')).toBe(0);
  });

  it.runIf(testEngine() === 'postgres')('reports the database pool', async () => {
    const { body } = await scrape();
    expect(sample(body, 'plant_store_db_pool_connections{state="in_use"}')).toBe(0);
    expect(sample(body, 'plant_store_db_pool_connections{state="idle"}')).toBeGreaterThanOrEqual(1);
    expect(sample(body, 'plant_store_db_pool_waiting')).toBe(0);
  });
});

describe('with METRICS_PORT set', () => {
  it('does not serve /metrics on the main port', async () => {
    const other = await startTestApp({ env: { METRICS_PORT: '9464' } });
    try {
      const response = await other.app.inject({ method: 'GET', url: '/metrics' });
      expect(response.statusCode).toBe(404);
    } finally {
      await other.close();
    }
  });
});
