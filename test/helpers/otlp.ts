import { once } from 'node:events';
import { createServer, type Server } from 'node:http';

/** An attribute value as OTLP/JSON carries it, decoded. */
export type AttributeValue = string | number | boolean | AttributeValue[] | undefined;

/** A span as the collector received it, with its attributes decoded. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** Absent for a root span. */
  parentSpanId: string | undefined;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client. */
  kind: number;
  attributes: Record<string, AttributeValue>;
  links: Array<{ traceId: string; spanId: string }>;
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  statusCode: number;
  resource: Record<string, AttributeValue>;
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;

export interface OtlpReceiver {
  /** The base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it. */
  url: string;
  /** Every request that arrived, on any path. */
  requests: Array<{ method: string; path: string; contentType: string | undefined }>;
  spans: ReceivedSpan[];
  /** Resolves with the spans received once `done(spans)` holds; rejects after `withinMs`. */
  waitFor(done: (spans: ReceivedSpan[]) => boolean, withinMs?: number): Promise<ReceivedSpan[]>;
  close(): Promise<void>;
}

interface JsonValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: JsonValue[] };
}
type JsonAttributes = Array<{ key: string; value: JsonValue }> | undefined;

function decodeValue(value: JsonValue): AttributeValue {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(decodeValue);
  return undefined;
}

function decodeAttributes(attributes: JsonAttributes): Record<string, AttributeValue> {
  return Object.fromEntries((attributes ?? []).map(({ key, value }) => [key, decodeValue(value)]));
}

interface ExportRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: JsonAttributes };
    scopeSpans?: Array<{
      spans?: Array<{
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        attributes?: JsonAttributes;
        links?: Array<{ traceId: string; spanId: string }>;
        status?: { code?: number };
      }>;
    }>;
  }>;
}

/** The spans of an OTLP/JSON ExportTraceServiceRequest (ids in hex, as OTLP/JSON writes them). */
export function decodeTraces(body: ExportRequest): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const { resource, scopeSpans } of body.resourceSpans ?? []) {
    const resourceAttributes = decodeAttributes(resource?.attributes);
    for (const scope of scopeSpans ?? []) {
      for (const span of scope.spans ?? []) {
        spans.push({
          traceId: span.traceId,
          spanId: span.spanId,
          parentSpanId: span.parentSpanId ? span.parentSpanId : undefined,
          name: span.name,
          kind: span.kind,
          attributes: decodeAttributes(span.attributes),
          links: (span.links ?? []).map(({ traceId, spanId }) => ({ traceId, spanId })),
          statusCode: span.status?.code ?? 0,
          resource: resourceAttributes,
        });
      }
    }
  }
  return spans;
}

/**
 * An OTLP/HTTP collector on loopback that takes the JSON encoding (the SDK's exporter with
 * OTEL_EXPORTER_OTLP_PROTOCOL=http/json) at /v1/traces and keeps every span it receives.
 */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const requests: OtlpReceiver['requests'] = [];
  const spans: ReceivedSpan[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const contentType = req.headers['content-type'];
      requests.push({ method: req.method ?? '', path: req.url ?? '', contentType });
      if (req.method !== 'POST' || req.url !== '/v1/traces' || contentType !== 'application/json') {
        res.writeHead(415).end();
        return;
      }
      spans.push(...decodeTraces(JSON.parse(Buffer.concat(chunks).toString('utf8'))));
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  return {
    url: `http://127.0.0.1:${address.port}`,
    requests,
    spans,
    async waitFor(done, withinMs = 10_000) {
      const deadline = Date.now() + withinMs;
      while (!done(spans)) {
        if (Date.now() > deadline) {
          throw new Error(
            `the spans awaited did not arrive in ${withinMs} ms; received: ${JSON.stringify(spans, null, 1)}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      return spans;
    },
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}
