import { describe, expect, it } from 'vitest';
import { startTracing, tracingRequested } from '../../src/tracing/start.js';

describe('when the environment asks for traces', () => {
  it.each([
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, true],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' }, true],
    [{}, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' }, false],
    [{ OTEL_SERVICE_NAME: 'plant-store', OTEL_TRACES_SAMPLER: 'always_on' }, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'TRUE' }, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'false' }, true],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' }, false],
  ])('%j: %s', (env, requested) => {
    expect(tracingRequested(env)).toBe(requested);
  });

  it('starts nothing when it does not', async () => {
    expect(await startTracing({})).toBeUndefined();
  });
});
