import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { ConfigError } from './config-error.js';
import { MIGRATION_DEFAULTS } from './db/migrate.js';
import { SHA256_ENTRY_PREFIX } from './http/tokens.js';
import { readWebhooks } from './webhook-config.js';

export { ConfigError };

const logLevels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

const integer = (minimum: number, maximum: number, fallback: number) =>
  Type.Integer({ minimum, maximum, default: fallback });

/**
 * The environment variables the service reads, with their defaults: the one place a setting is
 * written. `Config` is derived from it by loadConfig, grouped by the code that uses each group.
 */
export const EnvironmentSchema = Type.Object({
  PORT: integer(0, 65535, 3000),
  HOST: Type.String({ minLength: 1, default: '0.0.0.0' }),
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  DATA_DIR: Type.String({ minLength: 1, default: '.data' }),
  API_TOKENS: Type.Optional(Type.String()),
  API_TOKENS_FILE: Type.Optional(Type.String()),
  ADMIN_TOKENS: Type.Optional(Type.String()),
  ADMIN_TOKENS_FILE: Type.Optional(Type.String()),
  LOG_LEVEL: Type.Union(
    logLevels.map((level) => Type.Literal(level)),
    { default: 'info' },
  ),
  MIGRATE_ON_START: Type.Boolean({ default: true }),
  MIGRATION_LOCK_TIMEOUT_MS: integer(10, 600_000, MIGRATION_DEFAULTS.lockTimeoutMs),
  MIGRATION_RETRY_FOR_S: integer(0, 86_400, MIGRATION_DEFAULTS.retryForS),
  DB_POOLER: Type.Boolean({ default: false }),
  DB_POOL_MAX: integer(1, 1000, 10),
  DB_CONNECT_TIMEOUT_MS: integer(100, 600_000, 5000),
  DB_STATEMENT_TIMEOUT_MS: integer(100, 600_000, 5000),
  BODY_LIMIT: integer(64, 100 * 1024 * 1024, 65536),
  SHUTDOWN_TIMEOUT_MS: integer(0, 3_600_000, 10_000),
  SHUTDOWN_DELAY_MS: integer(0, 3_600_000, 5000),
  JSON_MAX_DEPTH: integer(1, 1000, 32),
  WRITE_BATCH_MAX: integer(1, 10_000, 500),
  WRITE_CONCURRENCY: integer(1, 1000, 1),
  WRITE_QUEUE_MAX: integer(1, 1_000_000, 10_000),
  READ_BATCH_MAX: integer(1, 10_000, 500),
  READ_CONCURRENCY: integer(1, 1000, 4),
  READ_QUEUE_MAX: integer(1, 1_000_000, 10_000),
  AUTH_FAILURE_LIMIT: integer(0, 1_000_000, 30),
  AUTH_FAILURE_IPV6_PREFIX: integer(1, 128, 64),
  TOKEN_RATE_LIMIT: integer(0, 100_000_000, 0),
  RATE_LIMIT_WINDOW_MS: integer(1000, 86_400_000, 60_000),
  TRUST_PROXY: Type.String({ minLength: 1, default: 'false' }),
  HTTP_HEADERS_TIMEOUT_MS: integer(1000, 600_000, 10_000),
  HTTP_REQUEST_TIMEOUT_MS: integer(1000, 3_600_000, 30_000),
  HTTP_KEEP_ALIVE_TIMEOUT_MS: integer(1000, 3_600_000, 72_000),
  METRICS_PORT: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
  WEBHOOK_URLS: Type.Optional(Type.String()),
  WEBHOOK_SECRET: Type.Optional(Type.String()),
  WEBHOOK_TIMEOUT_MS: integer(100, 300_000, 15_000),
  WEBHOOK_RETRY_SCHEDULE: Type.String({ default: '5,300,1800,7200,18000,36000,36000' }),
  WEBHOOK_CONCURRENCY: integer(1, 10_000, 64),
  WEBHOOK_ENCRYPTION_KEY: Type.Optional(Type.String()),
  WEBHOOK_ENCRYPTION_KEYS: Type.Optional(Type.String()),
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: Type.Boolean({ default: false }),
  WEBHOOK_ROTATION_GRACE_S: integer(0, 31_536_000, 86_400),
  WEBHOOK_DISABLE_AFTER_S: integer(60, 31_536_000, 432_000),
  WEBHOOK_LOG_RETENTION_S: integer(60, 31_536_000, 604_800),
  WEBHOOK_EVENTS: Type.String({ default: 'newPlant' }),
});
export type Environment = Static<typeof EnvironmentSchema>;

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

function expectation(schema: TSchema): string {
  if (schema.type === 'integer') return `an integer from ${schema.minimum} to ${schema.maximum}`;
  if (schema.type === 'boolean') return 'true or false';
  if (Array.isArray(schema.anyOf)) {
    return `one of ${schema.anyOf.map((option: TSchema) => option.const).join(', ')}`;
  }
  if (schema.pattern === '^postgres(ql)?://') return 'a postgres:// or postgresql:// URL';
  return 'a non-empty string';
}

/** Environment strings become the schema's types only when they are exactly that type. */
function convert(schema: TSchema, raw: string): unknown {
  if (schema.type === 'integer') return /^-?\d{1,15}$/.test(raw) ? Number(raw) : raw;
  if (schema.type === 'boolean') {
    if (/^(true|1|yes|on)$/i.test(raw)) return true;
    if (/^(false|0|no|off)$/i.test(raw)) return false;
  }
  return raw;
}

function readEnvironment(env: NodeJS.ProcessEnv): Environment {
  const candidate: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(EnvironmentSchema.properties)) {
    const raw = env[name];
    // An empty variable (`PORT=` in a compose file) means "not set".
    if (raw !== undefined && raw !== '') candidate[name] = convert(schema, raw);
  }
  const withDefaults = Value.Default(EnvironmentSchema, candidate);
  const error = Value.Errors(EnvironmentSchema, withDefaults).First();
  if (error) {
    const name = error.path.slice(1);
    const schema = EnvironmentSchema.properties[name as keyof Environment];
    throw new ConfigError(`${name} must be ${expectation(schema)}`);
  }
  const url = candidate.DATABASE_URL;
  if (typeof url === 'string' && !URL.canParse(url)) {
    throw new ConfigError('DATABASE_URL must be a postgres:// or postgresql:// URL');
  }
  return withDefaults as Environment;
}

const tokenEntry = /^[A-Za-z0-9\-._~+/]+=*$/;
const digestEntry = new RegExp(`^${SHA256_ENTRY_PREFIX}[0-9a-fA-F]{64}$`);

function parseTokenEntries(variable: string, entries: string[]): string[] {
  for (const entry of entries) {
    if (
      entry.startsWith(SHA256_ENTRY_PREFIX) ? !digestEntry.test(entry) : !tokenEntry.test(entry)
    ) {
      throw new ConfigError(
        entry.startsWith(SHA256_ENTRY_PREFIX)
          ? `${variable} has a sha256: entry that is not followed by exactly 64 hex digits`
          : `${variable} has an entry with characters a bearer token cannot carry (allowed: A-Z a-z 0-9 - . _ ~ + / and trailing =)`,
      );
    }
  }
  return entries;
}

/** The entries of a token list variable and of its file variable (one entry per line). */
function readTokens(
  variable: 'API_TOKENS' | 'ADMIN_TOKENS',
  listed: string | undefined,
  file: string | undefined,
): string[] {
  const tokens = parseTokenEntries(
    variable,
    (listed ?? '')
      .split(',')
      .map((entry) => entry.trim())
      .filter((entry) => entry !== ''),
  );
  if (file) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      throw new ConfigError(
        `${variable}_FILE cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`,
      );
    }
    const lines = text
      .split(/\r?\n/)
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'));
    tokens.push(...parseTokenEntries(`${variable}_FILE`, lines));
  }
  return tokens;
}

export interface LoadConfigOptions {
  /** The server refuses to start without a token; the migration command needs none. */
  requireTokens?: boolean;
}

export function loadConfig(env: NodeJS.ProcessEnv, options: LoadConfigOptions = {}) {
  const environment = readEnvironment(env);
  const apiTokens = readTokens('API_TOKENS', environment.API_TOKENS, environment.API_TOKENS_FILE);
  const adminTokens = readTokens(
    'ADMIN_TOKENS',
    environment.ADMIN_TOKENS,
    environment.ADMIN_TOKENS_FILE,
  );
  const webhooks = readWebhooks(environment);
  if (environment.METRICS_PORT !== undefined && environment.METRICS_PORT === environment.PORT) {
    throw new ConfigError('METRICS_PORT must differ from PORT');
  }
  if (environment.DB_POOLER && environment.DATABASE_URL === undefined) {
    throw new ConfigError('DB_POOLER needs DATABASE_URL: the embedded engine has no pooler');
  }
  if ((options.requireTokens ?? true) && apiTokens.length === 0) {
    throw new ConfigError(
      'API_TOKENS or API_TOKENS_FILE must provide at least one bearer token; the service does not start without one',
    );
  }
  return {
    port: environment.PORT,
    host: environment.HOST,
    logLevel: environment.LOG_LEVEL,
    /** Serve /metrics on this port instead of the main one. */
    metricsPort: environment.METRICS_PORT,
    shutdown: {
      /** Grace for in-flight requests once draining starts. */
      timeoutMs: environment.SHUTDOWN_TIMEOUT_MS,
      /** On SIGTERM, how long /readyz answers 503 while requests are still served. */
      delayMs: environment.SHUTDOWN_DELAY_MS,
    },
    /** A PostgreSQL server at `url`; without one, the embedded engine in `dataDir`. */
    database: {
      url: environment.DATABASE_URL,
      /** `url` leads to a connection pooler in transaction mode. */
      pooler: environment.DB_POOLER,
      dataDir: environment.DATA_DIR,
      poolMax: environment.DB_POOL_MAX,
      connectTimeoutMs: environment.DB_CONNECT_TIMEOUT_MS,
      statementTimeoutMs: environment.DB_STATEMENT_TIMEOUT_MS,
      migrateOnStart: environment.MIGRATE_ON_START,
      migration: {
        /** How long one migration step waits for a lock before it gives way and tries again. */
        lockTimeoutMs: environment.MIGRATION_LOCK_TIMEOUT_MS,
        /** How long a migration step keeps trying before it gives up. */
        retryForMs: environment.MIGRATION_RETRY_FOR_S * 1000,
      },
    },
    /** Creates: each batch is one INSERT. */
    writes: {
      maxBatchSize: environment.WRITE_BATCH_MAX,
      maxConcurrentBatches: Math.min(environment.WRITE_CONCURRENCY, environment.DB_POOL_MAX),
      maxQueued: environment.WRITE_QUEUE_MAX,
    },
    /** Reads by id: each batch is one SELECT. */
    reads: {
      maxBatchSize: environment.READ_BATCH_MAX,
      maxConcurrentBatches: Math.min(environment.READ_CONCURRENCY, environment.DB_POOL_MAX),
      maxQueued: environment.READ_QUEUE_MAX,
    },
    http: {
      bodyLimit: environment.BODY_LIMIT,
      jsonMaxDepth: environment.JSON_MAX_DEPTH,
      /** Whose X-Forwarded-For to believe: no one, every peer, or these proxy addresses. */
      trustProxy: parseTrustProxy(environment.TRUST_PROXY),
      headersTimeoutMs: environment.HTTP_HEADERS_TIMEOUT_MS,
      requestTimeoutMs: environment.HTTP_REQUEST_TIMEOUT_MS,
      keepAliveTimeoutMs: environment.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    },
    auth: {
      /** Tokens, or `sha256:` digests of tokens. Never logged. */
      tokens: apiTokens,
      /** Tokens of the webhook management API, same forms. Never logged. */
      adminTokens,
      /** Failed authentications per client address and window before 429; 0 switches it off. */
      failuresPerAddress: environment.AUTH_FAILURE_LIMIT,
      /** IPv6 clients are counted per network of this prefix length: one subscriber holds a /64. */
      ipv6Prefix: environment.AUTH_FAILURE_IPV6_PREFIX,
      /** Requests per token and window before 429; 0 switches it off. */
      requestsPerToken: environment.TOKEN_RATE_LIMIT,
      windowMs: environment.RATE_LIMIT_WINDOW_MS,
    },
    /** The newPlant webhook: static subscribers, and the endpoints made through the API. */
    webhooks,
  };
}

export type Config = ReturnType<typeof loadConfig>;
export type DatabaseConfig = Config['database'];
export type HttpConfig = Config['http'];
export type AuthConfig = Config['auth'];
export type WebhookConfig = Config['webhooks'];
