import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config.js';
import {
  type ComposeService,
  composeCommand,
  projectFile,
  readCompose,
} from '../helpers/deploy-files.js';

const variableName = '[A-Za-z_][A-Za-z0-9_]*';
// `${NAME}`, `${NAME:-default}`, `${NAME?error}`... and bare `$NAME`; `$$` is a literal dollar.
const reference = new RegExp(`\\$(?:\\{(${variableName})|(${variableName}))`, 'g');

/** The variables Compose substitutes into the values of a parsed compose file. */
function interpolatedVariables(value: unknown): string[] {
  if (typeof value === 'string') {
    return [...value.replaceAll('$$', '').matchAll(reference)].map(
      (match) => (match[1] ?? match[2]) as string,
    );
  }
  if (Array.isArray(value)) return value.flatMap(interpolatedVariables);
  if (value !== null && typeof value === 'object') {
    return Object.values(value).flatMap(interpolatedVariables);
  }
  return [];
}

/** The variables an env file sets (`NAME=value` lines; comments and blank lines skipped). */
function envFileKeys(text: string): string[] {
  const assignment = new RegExp(`^\\s*(?:export\\s+)?(${variableName})\\s*=`);
  return text
    .split(/\r?\n/)
    .map((line) => assignment.exec(line)?.[1])
    .filter((name) => name !== undefined);
}

const interpolated = new Set(interpolatedVariables(parse(projectFile('docker-compose.yml'))));
const documented = new Set(envFileKeys(projectFile('.env.example')));

describe('.env.example', () => {
  it('sets every variable docker-compose.yml interpolates', () => {
    expect(interpolated.size).toBeGreaterThan(0);
    expect([...interpolated].filter((name) => !documented.has(name))).toStrictEqual([]);
  });

  it('sets no variable that docker-compose.yml ignores', () => {
    expect(documented.size).toBeGreaterThan(0);
    expect([...documented].filter((name) => !interpolated.has(name))).toStrictEqual([]);
  });
});

/** Compose's duration syntax (`20s`, `1m30s`) in milliseconds. */
function durationMs(text: string): number {
  const units: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 };
  let total = 0;
  for (const [, amount, unit] of text.matchAll(/(\d+)(ms|h|m|s)/g)) {
    total += Number(amount) * (units[unit as string] ?? Number.NaN);
  }
  return total;
}

/** The shutdown settings of a compose service's environment, with the service's defaults. */
function shutdownOf(service: ComposeService | undefined) {
  // Only these: the other values hold `${...}` references for Compose to fill in.
  const settings = Object.entries(service?.environment ?? {}).filter(([name]) =>
    name.startsWith('SHUTDOWN_'),
  );
  return loadConfig({ ...Object.fromEntries(settings), API_TOKENS: 'placeholder' });
}

describe('the compose app service', () => {
  it('gives the service its shutdown delay and grace period before Compose kills it', () => {
    const app = readCompose().services.app;
    const { delayMs: shutdownDelayMs, timeoutMs: shutdownTimeoutMs } = shutdownOf(app).shutdown;
    expect(durationMs(app?.stop_grace_period ?? '10s')).toBeGreaterThan(
      shutdownDelayMs + shutdownTimeoutMs,
    );
  });
});

describe('deploy/compose.scale.yml', () => {
  const file = 'deploy/compose.scale.yml';
  const { services } = readCompose(file);
  const environment = (name: string) =>
    (services[name]?.environment ?? {}) as Record<string, string>;

  it('interpolates only variables that .env.example sets', () => {
    const used = interpolatedVariables(parse(projectFile(file)));
    expect(used.length).toBeGreaterThan(0);
    expect(used.filter((name) => !documented.has(name))).toStrictEqual([]);
  });

  it('runs PgBouncer in transaction mode', () => {
    expect(environment('pgbouncer').POOL_MODE).toBe('transaction');
  });

  it.each(['migrate', 'app'])(
    'runs %s as the main compose file does, through PgBouncer with DB_POOLER=true',
    (name) => {
      expect(readCompose(file).services[name]?.command).toStrictEqual(composeCommand(name));
      expect(new URL(environment(name).DATABASE_URL ?? '').hostname).toBe('pgbouncer');
      expect(environment(name).DB_POOLER).toBe('true');
    },
  );

  it('publishes the load balancer only, so that every request is health-checked', () => {
    expect(services.app?.ports).toBeUndefined();
    expect(services.lb?.ports).toHaveLength(1);
  });

  it('gives each replica its shutdown delay and grace period before Compose kills it', () => {
    const { delayMs: shutdownDelayMs, timeoutMs: shutdownTimeoutMs } = shutdownOf(
      services.app,
    ).shutdown;
    expect(durationMs(services.app?.stop_grace_period ?? '10s')).toBeGreaterThan(
      shutdownDelayMs + shutdownTimeoutMs,
    );
  });

  it("lets HAProxy take a stopping replica out within the replica's shutdown delay", () => {
    const config = projectFile('deploy/compose/haproxy.cfg');
    const checks = /^\s*default-server\b.*\binter (\d+)(ms|s)\b.*\bfall (\d+)/m.exec(config);
    expect(checks).not.toBeNull();
    const [, every = '', unit, fall = ''] = checks as RegExpExecArray;
    const noticeMs = Number(every) * (unit === 's' ? 1000 : 1) * Number(fall);
    expect(noticeMs).toBeLessThan(shutdownOf(services.app).shutdown.delayMs);
  });
});
