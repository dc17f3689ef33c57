import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Config, ConfigError, loadConfig } from '../../src/config.js';

const digest = `sha256:${'ab'.repeat(32)}`;
const key32 = Buffer.alloc(32, 9).toString('base64');
/** The key ring with each key's bytes, which a KeyObject does not compare by. */
const ringOf = (config: Config) =>
  config.webhooks.encryptionKeys.map(({ id, key }) => ({ id, key: key.export() }));
const base = { API_TOKENS: 'secret-token', DATABASE_URL: 'postgres://u@db:5432/plants' };

describe('loadConfig', () => {
  it('applies the documented defaults', () => {
    expect(loadConfig(base)).toEqual({
      port: 3000,
      host: '0.0.0.0',
      logLevel: 'info',
      metricsPort: undefined,
      shutdown: { timeoutMs: 10000, delayMs: 5000 },
      database: {
        url: 'postgres://u@db:5432/plants',
        pooler: false,
        replicaUrls: [],
        replicaMaxLagMs: 1000,
        dataDir: '.data',
        poolMax: 10,
        connectTimeoutMs: 5000,
        statementTimeoutMs: 5000,
        migrateOnStart: true,
        migration: { lockTimeoutMs: 500, retryForMs: 600_000 },
      },
      writes: { maxBatchSize: 500, maxConcurrentBatches: 1, maxQueued: 10000 },
      reads: { maxBatchSize: 500, maxConcurrentBatches: 4, maxQueued: 10000 },
      http: {
        bodyLimit: 65536,
        jsonMaxDepth: 32,
        trustProxy: false,
        headersTimeoutMs: 10000,
        requestTimeoutMs: 30000,
        keepAliveTimeoutMs: 72000,
      },
      auth: {
        tokens: ['secret-token'],
        adminTokens: [],
        failuresPerAddress: 30,
        ipv6Prefix: 64,
        requestsPerToken: 0,
        windowMs: 60000,
      },
      webhooks: {
        urls: [],
        secret: undefined,
        events: ['newPlant'],
        timeoutMs: 15000,
        retrySchedule: [5, 300, 1800, 7200, 18000, 36000, 36000],
        concurrency: 64,
        encryptionKeys: [],
        allowPrivateNetworks: false,
        rotationGraceS: 86400,
        disableAfterS: 432000,
        logRetentionS: 604800,
      },
    });
  });

  it('reads the webhook management settings', () => {
    const key = Buffer.alloc(32, 7);
    const config = loadConfig({
      ...base,
      ADMIN_TOKENS: `admin-one,${digest}`,
      WEBHOOK_ENCRYPTION_KEY: key.toString('base64'),
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      WEBHOOK_ROTATION_GRACE_S: '60',
      WEBHOOK_DISABLE_AFTER_S: '3600',
      WEBHOOK_LOG_RETENTION_S: '7200',
    });
    expect(config.auth.adminTokens).toStrictEqual(['admin-one', digest]);
    expect(ringOf(config)).toStrictEqual([{ id: 'default', key }]);
    expect(config.webhooks).toMatchObject({
      allowPrivateNetworks: true,
      rotationGraceS: 60,
      disableAfterS: 3600,
      logRetentionS: 7200,
    });
  });

  it('reads WEBHOOK_ENCRYPTION_KEYS in order, the first sealing', () => {
    const [one, two] = [Buffer.alloc(32, 1), Buffer.alloc(32, 2)];
    const config = loadConfig({
      ...base,
      WEBHOOK_ENCRYPTION_KEYS: ` k-2026.b:${two.toString('base64')} ,k_1:${one.toString('base64')}`,
    });
    expect(ringOf(config)).toStrictEqual([
      { id: 'k-2026.b', key: two },
      { id: 'k_1', key: one },
    ]);
  });

  it.each([
    [
      'an entry without a kid',
      `:${key32}`,
      'WEBHOOK_ENCRYPTION_KEYS entry 1 must be kid:base64-of-32-bytes, the kid 1 to 64 of A-Z a-z 0-9 . _ -',
    ],
    [
      'an entry without a colon',
      `a:${key32},${key32}`,
      'WEBHOOK_ENCRYPTION_KEYS entry 2 must be kid:base64-of-32-bytes, the kid 1 to 64 of A-Z a-z 0-9 . _ -',
    ],
    [
      'a kid with a space',
      `my key:${key32}`,
      'WEBHOOK_ENCRYPTION_KEYS entry 1 must be kid:base64-of-32-bytes, the kid 1 to 64 of A-Z a-z 0-9 . _ -',
    ],
    [
      'a key of 31 bytes',
      `a:${Buffer.alloc(31).toString('base64')}`,
      'WEBHOOK_ENCRYPTION_KEYS has a key "a" that is not the base64 encoding of 32 bytes',
    ],
    [
      'a key that is not base64',
      'a:not a key at all, not even close!!',
      'WEBHOOK_ENCRYPTION_KEYS has a key "a" that is not the base64 encoding of 32 bytes',
    ],
    ['a kid twice', `a:${key32},a:${key32}`, 'WEBHOOK_ENCRYPTION_KEYS names the key id "a" twice'],
    ['no entry', ' , ', 'WEBHOOK_ENCRYPTION_KEYS must list at least one kid:base64-of-32-bytes'],
  ])(
    'refuses WEBHOOK_ENCRYPTION_KEYS with %s, in one line that holds no key',
    (_, value, message) => {
      let error: unknown;
      try {
        loadConfig({ ...base, WEBHOOK_ENCRYPTION_KEYS: value });
      } catch (thrown) {
        error = thrown;
      }
      expect(error).toStrictEqual(new ConfigError(message));
      expect((error as Error).message).not.toContain(key32.slice(0, 8));
    },
  );

  it('reads WEBHOOK_EVENTS in order, spaces and empty entries aside', () => {
    const config = loadConfig({
      ...base,
      WEBHOOK_EVENTS: ' plantDeleted, ,newPlant,deliveryExhausted ',
    });
    expect(config.webhooks.events).toStrictEqual(['plantDeleted', 'newPlant', 'deliveryExhausted']);
    expect(loadConfig({ ...base, WEBHOOK_EVENTS: '' }).webhooks.events).toStrictEqual(['newPlant']);
  });

  it.each([
    [
      'an unknown name',
      'newPlant,plantRenamed',
      'WEBHOOK_EVENTS names an unknown event type "plantRenamed": the types are newPlant, plantDeleted, endpointDisabled, deliveryExhausted',
    ],
    [
      'a name in another case',
      'newplant',
      'WEBHOOK_EVENTS names an unknown event type "newplant": the types are newPlant, plantDeleted, endpointDisabled, deliveryExhausted',
    ],
    ['a name twice', 'newPlant,newPlant', 'WEBHOOK_EVENTS names newPlant twice'],
    [
      'no name',
      ' , ',
      'WEBHOOK_EVENTS must be a comma-separated list of event types (newPlant, plantDeleted, endpointDisabled, deliveryExhausted)',
    ],
  ])('refuses WEBHOOK_EVENTS with %s, in one line that names it', (_, value, message) => {
    let thrown: unknown;
    try {
      loadConfig({ ...base, WEBHOOK_EVENTS: value });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as Error).message).toBe(message);
    expect((thrown as Error).message).not.toContain('\n');
  });

  it('refuses WEBHOOK_ENCRYPTION_KEYS beside WEBHOOK_ENCRYPTION_KEY', () => {
    expect(() =>
      loadConfig({ ...base, WEBHOOK_ENCRYPTION_KEYS: `a:${key32}`, WEBHOOK_ENCRYPTION_KEY: key32 }),
    ).toThrow(
      new ConfigError(
        'WEBHOOK_ENCRYPTION_KEYS and WEBHOOK_ENCRYPTION_KEY are both set: list every key in WEBHOOK_ENCRYPTION_KEYS (the one WEBHOOK_ENCRYPTION_KEY held as default:...)',
      ),
    );
  });

  it.each([
    ['a key of 31 bytes', Buffer.alloc(31).toString('base64')],
    ['a key of 33 bytes', Buffer.alloc(33).toString('base64')],
    ['text that is not base64', 'not a key at all, not even close!!'],
  ])('refuses WEBHOOK_ENCRYPTION_KEY as %s', (_, value) => {
    expect(() => loadConfig({ ...base, WEBHOOK_ENCRYPTION_KEY: value })).toThrow(
      new ConfigError('WEBHOOK_ENCRYPTION_KEY must be the base64 encoding of 32 bytes'),
    );
  });

  it('reads every variable', () => {
    const config = loadConfig({
      ...base,
      PORT: '8080',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      MIGRATE_ON_START: 'false',
      MIGRATION_LOCK_TIMEOUT_MS: '250',
      MIGRATION_RETRY_FOR_S: '30',
      DB_POOLER: 'true',
      DB_POOL_MAX: '20',
      BODY_LIMIT: '1024',
      SHUTDOWN_TIMEOUT_MS: '500',
      SHUTDOWN_DELAY_MS: '0',
      AUTH_FAILURE_IPV6_PREFIX: '48',
    });
    expect(config).toMatchObject({
      port: 8080,
      host: '127.0.0.1',
      logLevel: 'warn',
      database: {
        migrateOnStart: false,
        migration: { lockTimeoutMs: 250, retryForMs: 30_000 },
        pooler: true,
        poolMax: 20,
      },
      http: { bodyLimit: 1024 },
      shutdown: { timeoutMs: 500, delayMs: 0 },
      auth: { ipv6Prefix: 48 },
    });
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ ...base, PORT: '', LOG_LEVEL: '' })).toMatchObject({
      port: 3000,
      logLevel: 'info',
    });
  });

  it.each([
    ['PORT', 'abc', 'PORT must be an integer from 0 to 65535'],
    ['PORT', '70000', 'PORT must be an integer from 0 to 65535'],
    ['PORT', '30.5', 'PORT must be an integer from 0 to 65535'],
    [
      'LOG_LEVEL',
      'loud',
      'LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent',
    ],
    ['MIGRATE_ON_START', 'maybe', 'MIGRATE_ON_START must be true or false'],
    ['DATABASE_URL', 'mysql://x', 'DATABASE_URL must be a postgres:// or postgresql:// URL'],
    ['DATABASE_URL', 'postgres://[bad', 'DATABASE_URL must be a postgres:// or postgresql:// URL'],
    ['DB_POOL_MAX', '0', 'DB_POOL_MAX must be an integer from 1 to 1000'],
    ['BODY_LIMIT', '-1', 'BODY_LIMIT must be an integer'],
    ['SHUTDOWN_TIMEOUT_MS', 'soon', 'SHUTDOWN_TIMEOUT_MS must be an integer'],
    ['SHUTDOWN_DELAY_MS', '-1', 'SHUTDOWN_DELAY_MS must be an integer from 0 to 3600000'],
    ['DB_POOLER', 'pgbouncer', 'DB_POOLER must be true or false'],
    [
      'DATABASE_REPLICA_URLS',
      'postgres://replica:5432/plants,mysql://other/plants',
      'DATABASE_REPLICA_URLS must be comma-separated postgres:// or postgresql:// URLs; entry 2 is not one',
    ],
    ['DB_REPLICA_MAX_LAG_MS', '-1', 'DB_REPLICA_MAX_LAG_MS must be an integer from 0 to 3600000'],
    ['AUTH_FAILURE_IPV6_PREFIX', '0', 'AUTH_FAILURE_IPV6_PREFIX must be an integer from 1 to 128'],
    [
      'AUTH_FAILURE_IPV6_PREFIX',
      '129',
      'AUTH_FAILURE_IPV6_PREFIX must be an integer from 1 to 128',
    ],
  ])('rejects %s=%j with a message that names it', (name, value, message) => {
    expect(() => loadConfig({ ...base, [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, [name]: value })).toThrow(message);
  });

  it('caps WRITE_CONCURRENCY at DB_POOL_MAX', () => {
    expect(
      loadConfig({ ...base, DB_POOL_MAX: '2', WRITE_CONCURRENCY: '8' }).writes.maxConcurrentBatches,
    ).toBe(2);
  });

  it('caps READ_CONCURRENCY at DB_POOL_MAX', () => {
    expect(
      loadConfig({ ...base, DB_POOL_MAX: '3', READ_CONCURRENCY: '8' }).reads.maxConcurrentBatches,
    ).toBe(3);
  });

  it('reads the batching of reads by id', () => {
    expect(
      loadConfig({ ...base, READ_BATCH_MAX: '1', READ_CONCURRENCY: '2', READ_QUEUE_MAX: '50' }),
    ).toMatchObject({ reads: { maxBatchSize: 1, maxConcurrentBatches: 2, maxQueued: 50 } });
  });

  it.each([
    ['true', true],
    ['false', false],
    ['10.0.0.1', ['10.0.0.1']],
    ['10.0.0.0/8, 192.168.1.1,::1,fd00::/8', ['10.0.0.0/8', '192.168.1.1', '::1', 'fd00::/8']],
  ])('reads TRUST_PROXY=%j', (value, expected) => {
    expect(loadConfig({ ...base, TRUST_PROXY: value }).http.trustProxy).toStrictEqual(expected);
  });

  it.each(['2', 'yes', '10.0.0.0/33', 'proxy.example', '10.0.0.1/8/1'])(
    'rejects TRUST_PROXY=%j with a message that names it',
    (value) => {
      expect(() => loadConfig({ ...base, TRUST_PROXY: value })).toThrow(
        'TRUST_PROXY must be true, false, or a comma-separated list of proxy addresses (CIDR allowed)',
      );
    },
  );

  it('refuses DB_POOLER without DATABASE_URL, since the embedded engine has no pooler', () => {
    expect(() => loadConfig({ API_TOKENS: base.API_TOKENS, DB_POOLER: 'true' })).toThrow(
      'DB_POOLER needs DATABASE_URL',
    );
  });

  it('refuses DATABASE_REPLICA_URLS without DATABASE_URL, since the embedded engine has no replicas', () => {
    expect(() =>
      loadConfig({ API_TOKENS: base.API_TOKENS, DATABASE_REPLICA_URLS: 'postgres://r1/plants' }),
    ).toThrow('DATABASE_REPLICA_URLS needs DATABASE_URL');
  });

  it('reads DATABASE_REPLICA_URLS as a list, and none when it is unset or empty', () => {
    const listed = loadConfig({
      ...base,
      DATABASE_REPLICA_URLS: ' postgres://r1:5432/plants , postgresql://r2/plants,',
      DB_REPLICA_MAX_LAG_MS: '250',
    });
    expect(listed.database).toMatchObject({
      replicaUrls: ['postgres://r1:5432/plants', 'postgresql://r2/plants'],
      replicaMaxLagMs: 250,
    });
    expect(loadConfig(base).database).toMatchObject({ replicaUrls: [], replicaMaxLagMs: 1000 });
    expect(loadConfig({ ...base, DATABASE_REPLICA_URLS: '' }).database.replicaUrls).toStrictEqual(
      [],
    );
  });

  it('refuses METRICS_PORT equal to PORT', () => {
    expect(() => loadConfig({ ...base, PORT: '9000', METRICS_PORT: '9000' })).toThrow(
      'METRICS_PORT must differ from PORT',
    );
  });

  it('refuses to start without a token', () => {
    expect(() => loadConfig({ DATABASE_URL: base.DATABASE_URL })).toThrow(
      /API_TOKENS or API_TOKENS_FILE must provide at least one bearer token/,
    );
    expect(() => loadConfig({ API_TOKENS: ' , ' })).toThrow(/API_TOKENS/);
  });

  it('lets the migration command run without a token', () => {
    expect(
      loadConfig({ DATABASE_URL: base.DATABASE_URL }, { requireTokens: false }).auth.tokens,
    ).toEqual([]);
  });

  it('splits API_TOKENS on commas and accepts sha256 digests', () => {
    expect(loadConfig({ API_TOKENS: ` one , two,${digest}` }).auth.tokens).toEqual([
      'one',
      'two',
      digest,
    ]);
  });

  it('rejects a malformed sha256 entry and a token a header cannot carry', () => {
    expect(() => loadConfig({ API_TOKENS: 'sha256:abc' })).toThrow(
      /API_TOKENS has a sha256: entry/,
    );
    expect(() => loadConfig({ API_TOKENS: 'has space' })).toThrow(/API_TOKENS has an entry/);
  });

  it('reads API_TOKENS_FILE one token per line, skipping blanks and comments', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'plant-store-')), 'tokens');
    writeFileSync(file, `# rotated 2026-11\nfile-token\r\n\n${digest}\n`);
    expect(loadConfig({ API_TOKENS: 'env-token', API_TOKENS_FILE: file }).auth.tokens).toEqual([
      'env-token',
      'file-token',
      digest,
    ]);
  });

  it('names API_TOKENS_FILE when it cannot be read', () => {
    expect(() => loadConfig({ API_TOKENS_FILE: '/nonexistent/tokens' })).toThrow(
      'API_TOKENS_FILE cannot be read (ENOENT)',
    );
  });
});
