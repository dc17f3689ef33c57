import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { ConfigError } from './config-error.js';
import { DatabaseEnvironment, readDatabaseSettings } from './db/settings.js';
import { integer } from './environment.js';
import { AuthEnvironment, readAuthSettings } from './http/auth-settings.js';
import { HttpEnvironment, readHttpSettings } from './http/settings.js';
import { PlantsEnvironment, readPlantsSettings } from './plants/settings.js';
import { readWebhookSettings, WebhookEnvironment } from './webhooks/settings.js';

export { ConfigError };

const logLevels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/**
 * The environment variables the service reads, with their defaults: each room owns and reads its
 * own (db/, http/, plants/, webhooks/), the service's own are here. `Config` is their composition.
 */
export const EnvironmentSchema = Type.Composite([
  Type.Object({
    LOG_LEVEL: Type.Union(
      logLevels.map((level) => Type.Literal(level)),
      { default: 'info' },
    ),
    SHUTDOWN_TIMEOUT_MS: integer(0, 3_600_000, 10_000),
    SHUTDOWN_DELAY_MS: integer(0, 3_600_000, 5000),
  }),
  HttpEnvironment,
  AuthEnvironment,
  DatabaseEnvironment,
  PlantsEnvironment,
  WebhookEnvironment,
]);
export type Environment = Static<typeof EnvironmentSchema>;

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
  return withDefaults as Environment;
}

export interface LoadConfigOptions {
  /** The server refuses to start without a token; the migration command needs none. */
  requireTokens?: boolean;
}

export function loadConfig(env: NodeJS.ProcessEnv, options: LoadConfigOptions = {}) {
  const environment = readEnvironment(env);
  const auth = readAuthSettings(environment);
  const webhooks = readWebhookSettings(environment);
  const { port, host, metricsPort, http } = readHttpSettings(environment);
  const database = readDatabaseSettings(environment);
  if ((options.requireTokens ?? true) && auth.tokens.length === 0) {
    throw new ConfigError(
      'API_TOKENS or API_TOKENS_FILE must provide at least one bearer token; the service does not start without one',
    );
  }
  return {
    port,
    host,
    logLevel: environment.LOG_LEVEL,
    metricsPort,
    shutdown: {
      /** Grace for in-flight requests once draining starts. */
      timeoutMs: environment.SHUTDOWN_TIMEOUT_MS,
      /** On SIGTERM, how long /readyz answers 503 while requests are still served. */
      delayMs: environment.SHUTDOWN_DELAY_MS,
    },
    database,
    ...readPlantsSettings(environment, { poolMax: database.poolMax }),
    http,
    auth,
    /** The webhooks: static subscribers, and the endpoints made through the API. */
    webhooks,
  };
}

export type Config = ReturnType<typeof loadConfig>;
