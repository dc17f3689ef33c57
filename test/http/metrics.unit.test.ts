import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/http/metrics.js';

/** The lines of one metric family in a Prometheus text exposition. */
const family = (text: string, name: string) =>
  text.split('\n').filter((line) => line.startsWith(name) || line.includes(` ${name} `));

describe('the request duration histogram', () => {
  it("exposes what prom-client's own Histogram would for the same requests", async () => {
    const requests: Array<[string, string, number, number]> = [
      ['POST', '/plants', 200, 0.0005],
      ['POST', '/plants', 200, 0.003],
      ['POST', '/plants', 200, 0.001],
      ['POST', '/plants', 409, 0.7],
      ['GET', '/plants/:id', 200, 20],
      ['POST', '/plants', 200, 0.25],
      ['GET', 'unmatched', 404, 0],
    ];
    const metrics = createMetrics();
    const reference = new Registry();
    const histogram = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'Time from receiving a request to sending its answer, by method, route and status',
      labelNames: ['method', 'route', 'status_code'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [reference],
    });
    for (const [method, route, status, seconds] of requests) {
      metrics.observeRequest(method, route, status, seconds);
      histogram.observe({ method, route, status_code: status }, seconds);
    }
    const name = 'http_request_duration_seconds';
    const exposed = family(await metrics.registry.metrics(), name);
    expect(exposed).toContain('# TYPE http_request_duration_seconds histogram');
    expect(exposed).toContain(
      'http_request_duration_seconds_bucket{le="0.001",method="POST",route="/plants",status_code="200"} 2',
    );
    expect(exposed).toEqual(family(await reference.metrics(), name));
  });

  it('counts requests, not scrapes', async () => {
    const metrics = createMetrics();
    metrics.observeRequest('POST', '/plants', 200, 0.002);
    const first = family(await metrics.registry.metrics(), 'http_');
    expect(family(await metrics.registry.metrics(), 'http_')).toEqual(first);
    expect(first).toContain(
      'http_requests_total{method="POST",route="/plants",status_code="200"} 1',
    );
  });

  it('starts again from zero when the registry is reset', async () => {
    const metrics = createMetrics();
    metrics.observeRequest('POST', '/plants', 200, 0.002);
    metrics.registry.resetMetrics();
    expect(family(await metrics.registry.metrics(), 'http_')).not.toContainEqual(
      expect.stringContaining('route="/plants"'),
    );
    metrics.observeRequest('POST', '/plants', 201, 0.002);
    const exposed = family(await metrics.registry.metrics(), 'http_');
    expect(exposed).toContain(
      'http_requests_total{method="POST",route="/plants",status_code="201"} 1',
    );
    expect(exposed).toContain(
      'http_request_duration_seconds_count{method="POST",route="/plants",status_code="201"} 1',
    );
    expect(exposed).not.toContainEqual(expect.stringContaining('status_code="200"'));
  });
});
