// Loaded only when the environment asks for traces (see start.ts): the SDK and its exporters
// cost nothing otherwise.
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';

/** The exporter's endpoint for the log: origin and path, never a password or a query. */
function describeEndpoint(endpoint: string | undefined): string {
  try {
    const url = new URL(endpoint ?? '');
    return `${url.origin}${url.pathname === '/' ? '' : url.pathname}`;
  } catch {
    return 'an endpoint that is not a URL';
  }
}

/**
 * Starts the OpenTelemetry SDK (@opentelemetry/sdk-node) from the standard OTEL_* variables:
 * the exporter and its protocol, endpoint, headers and timeout, the sampler, the batch span
 * processor, the resource. It exports traces only: the service's metrics are Prometheus's, and
 * its logs are JSON lines on stdout. Registered globally, it gives the spans that the modules
 * make through @opentelemetry/api somewhere to go.
 */
export function startSdk(): { endpoint: string; shutdown(): Promise<void> } {
  const sdk = new NodeSDK({
    // The variables (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) override this name.
    resource: defaultResource().merge(
      resourceFromAttributes({ [ATTR_SERVICE_NAME]: 'plant-store' }),
    ),
    instrumentations: [],
    metricReaders: [],
    logRecordProcessors: [],
  });
  sdk.start();
  return {
    endpoint: describeEndpoint(
      process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || process.env.OTEL_EXPORTER_OTLP_ENDPOINT,
    ),
    shutdown: () => sdk.shutdown(),
  };
}
