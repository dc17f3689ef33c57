import { isIP } from 'node:net';
import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../config-error.js';
import { integer } from '../environment.js';

/** The largest request body, in bytes, unless BODY_LIMIT says otherwise. */
export const DEFAULT_BODY_LIMIT = 65536;

/** The variables of the HTTP server, with their defaults. */
export const HttpEnvironment = Type.Object({
  PORT: integer(0, 65535, 3000),
  HOST: Type.String({ minLength: 1, default: '0.0.0.0' }),
  BODY_LIMIT: integer(64, 100 * 1024 * 1024, DEFAULT_BODY_LIMIT),
  JSON_MAX_DEPTH: integer(1, 1000, 32),
  TRUST_PROXY: Type.String({ minLength: 1, default: 'false' }),
  HTTP_HEADERS_TIMEOUT_MS: integer(1000, 600_000, 10_000),
  HTTP_REQUEST_TIMEOUT_MS: integer(1000, 3_600_000, 30_000),
  HTTP_KEEP_ALIVE_TIMEOUT_MS: integer(1000, 3_600_000, 72_000),
  METRICS_PORT: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
});

const trustProxyExpectation =
  'true, false, or a comma-separated list of proxy addresses (CIDR allowed)';

function parseTrustProxy(value: string): boolean | string[] {
  if (value === 'true') return true;
  if (value === 'false') return false;
  const entries = value.split(',').map((entry) => entry.trim());
  for (const entry of entries) {
    const [address = '', bits, ...rest] = entry.split('/');
    const version = isIP(address);
    const maxBits = version === 6 ? 128 : 32;
    const badBits = bits !== undefined && !(/^\d{1,3}$/.test(bits) && Number(bits) <= maxBits);
    if (version === 0 || badBits || rest.length > 0) {
      throw new ConfigError(`TRUST_PROXY must be ${trustProxyExpectation}`);
    }
  }
  return entries;
}

/** Where the service listens, and how its HTTP server treats what arrives. */
export function readHttpSettings(environment: Static<typeof HttpEnvironment>) {
  if (environment.METRICS_PORT !== undefined && environment.METRICS_PORT === environment.PORT) {
    throw new ConfigError('METRICS_PORT must differ from PORT');
  }
  return {
    port: environment.PORT,
    host: environment.HOST,
    /** Serve /metrics on this port instead of the main one. */
    metricsPort: environment.METRICS_PORT,
    http: {
      bodyLimit: environment.BODY_LIMIT,
      jsonMaxDepth: environment.JSON_MAX_DEPTH,
      /** Whose X-Forwarded-For to believe: no one, every peer, or these proxy addresses. */
      trustProxy: parseTrustProxy(environment.TRUST_PROXY),
      headersTimeoutMs: environment.HTTP_HEADERS_TIMEOUT_MS,
      requestTimeoutMs: environment.HTTP_REQUEST_TIMEOUT_MS,
      keepAliveTimeoutMs: environment.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    },
  };
}

export type HttpSettings = ReturnType<typeof readHttpSettings>['http'];
