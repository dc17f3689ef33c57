import { readFileSync } from 'node:fs';
import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../config-error.js';
import { integer } from '../environment.js';
import { SHA256_ENTRY_PREFIX } from './tokens.js';

/** The variables of authentication and its limits, with their defaults. */
export const AuthEnvironment = Type.Object({
  API_TOKENS: Type.Optional(Type.String()),
  API_TOKENS_FILE: Type.Optional(Type.String()),
  ADMIN_TOKENS: Type.Optional(Type.String()),
  ADMIN_TOKENS_FILE: Type.Optional(Type.String()),
  AUTH_FAILURE_LIMIT: integer(0, 1_000_000, 30),
  AUTH_FAILURE_IPV6_PREFIX: integer(1, 128, 64),
  TOKEN_RATE_LIMIT: integer(0, 100_000_000, 0),
  RATE_LIMIT_WINDOW_MS: integer(1000, 86_400_000, 60_000),
});

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

/** Who may call the API and the management API, and how often a client may fail or call. */
export function readAuthSettings(environment: Static<typeof AuthEnvironment>) {
  return {
    /** Tokens, or `sha256:` digests of tokens. Never logged. */
    tokens: readTokens('API_TOKENS', environment.API_TOKENS, environment.API_TOKENS_FILE),
    /** Tokens of the webhook management API, same forms. Never logged. */
    adminTokens: readTokens(
      'ADMIN_TOKENS',
      environment.ADMIN_TOKENS,
      environment.ADMIN_TOKENS_FILE,
    ),
    /** Failed authentications per client address and window before 429; 0 switches it off. */
    failuresPerAddress: environment.AUTH_FAILURE_LIMIT,
    /** IPv6 clients are counted per network of this prefix length: one subscriber holds a /64. */
    ipv6Prefix: environment.AUTH_FAILURE_IPV6_PREFIX,
    /** Requests per token and window before 429; 0 switches it off. */
    requestsPerToken: environment.TOKEN_RATE_LIMIT,
    windowMs: environment.RATE_LIMIT_WINDOW_MS,
  };
}

export type AuthSettings = ReturnType<typeof readAuthSettings>;
