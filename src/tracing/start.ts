type Environment = Record<string, string | undefined>;

/** The OpenTelemetry SDK, once started. */
export interface StartedTracing {
  /** Where spans are sent, for the start-up log. */
  readonly endpoint: string;
  /** Exports the spans still buffered, then stops. */
  shutdown(): Promise<void>;
}

const set = (value: string | undefined) => value !== undefined && value.trim() !== '';

/**
 * True when the environment asks for traces: an OTLP endpoint is set (for all signals or for
 * traces), the SDK is not disabled, and the traces exporter is not `none`.
 */
export function tracingRequested(env: Environment): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  if (env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === 'none') return false;
  return set(env.OTEL_EXPORTER_OTLP_ENDPOINT) || set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/**
 * Starts the OpenTelemetry SDK when the environment asks for traces, and undefined otherwise:
 * then not one module of the SDK is loaded, and the spans made through @opentelemetry/api are
 * no-ops.
 */
export async function startTracing(env: Environment): Promise<StartedTracing | undefined> {
  if (!tracingRequested(env)) return undefined;
  const { startSdk } = await import('./sdk.js');
  return startSdk();
}
