import { createHash, timingSafeEqual } from 'node:crypto';
import bearerAuth from '@fastify/bearer-auth';
import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from './errors.js';

/** Prefix of a configured entry that holds the SHA-256 of a token instead of the token. */
export const SHA256_ENTRY_PREFIX = 'sha256:';

const CHALLENGE = 'Bearer realm="plant-store"';

function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/**
 * Builds the token check from configured entries (tokens or `sha256:<hex>` digests). Tokens are
 * compared by digest with timingSafeEqual against every entry, so neither the length of a
 * configured token nor which entry matched shows in the response time.
 */
export function createTokenVerifier(entries: readonly string[]): (token: string) => boolean {
  const digests = entries.map((entry) =>
    entry.startsWith(SHA256_ENTRY_PREFIX)
      ? Buffer.from(entry.slice(SHA256_ENTRY_PREFIX.length), 'hex')
      : sha256(entry),
  );
  return (token) => {
    const presented = sha256(token);
    let matched = false;
    for (const digest of digests) matched = timingSafeEqual(digest, presented) || matched;
    return matched;
  };
}

/**
 * The token of an Authorization header value: the scheme word `Bearer` in any case, one or more
 * spaces, then the token exactly (RFC 7235, RFC 6750); undefined when there is none. Only the
 * spaces and tabs that HTTP strips around a field value are dropped. (@fastify/bearer-auth trims
 * every Unicode space, U+00A0 included, so it would accept a token the client did not send.)
 */
export function bearerTokenOf(header: string | undefined): string | undefined {
  const match = /^bearer +(.*?)[ \t]*$/is.exec(header ?? '');
  return match?.[1] || undefined;
}

function unauthorized(request: FastifyRequest): HttpError {
  const header = request.headers.authorization;
  if (!header) {
    return new HttpError(401, 'a bearer token is required', { 'www-authenticate': CHALLENGE });
  }
  const scheme = /^bearer(?:[ \t]+(.*))?$/is.exec(header);
  if (!scheme) {
    return new HttpError(401, 'the Authorization header must use the Bearer scheme', {
      'www-authenticate': CHALLENGE,
    });
  }
  if (!scheme[1]?.trim()) {
    return new HttpError(401, 'the bearer token is empty', { 'www-authenticate': CHALLENGE });
  }
  return new HttpError(401, 'the bearer token is not valid', {
    'www-authenticate': `${CHALLENGE}, error="invalid_token"`,
  });
}

function tooManyRequests(message: string, retryAfterSeconds: number): HttpError {
  return new HttpError(429, message, { 'retry-after': String(Math.max(1, retryAfterSeconds)) });
}

export interface AuthLimits {
  /** Failed authentications one client address may make per window; 0 means no limit. */
  failuresPerAddress: number;
  /** Requests one token may make per window; 0 means no limit. */
  requestsPerToken: number;
  windowMs: number;
}

/**
 * Requires a valid bearer token on every route of `scope`. The check runs in onRequest, before
 * the body is read, so an unauthenticated client cannot make the service parse anything.
 *
 * A client address that fails `failuresPerAddress` times within a window gets 429 for every
 * request until the window passes, even with a valid token (else a 200 among the 429s would
 * still tell a guesser that a token is right). An optional per-token limit caps clients that
 * authenticate.
 */
export async function requireBearerToken(
  scope: FastifyInstance,
  verifyToken: (token: string) => boolean,
  limits: AuthLimits,
): Promise<void> {
  await scope.register(rateLimit, { global: false });
  const failures =
    limits.failuresPerAddress > 0
      ? scope.createRateLimit({
          max: limits.failuresPerAddress,
          timeWindow: limits.windowMs,
          keyGenerator: (request) => request.ip,
        })
      : undefined;
  const perToken =
    limits.requestsPerToken > 0
      ? scope.createRateLimit({
          max: limits.requestsPerToken,
          timeWindow: limits.windowMs,
          // The token itself, not the header: 'bearer  <token>' is the same client.
          keyGenerator: (request) =>
            sha256(bearerTokenOf(request.headers.authorization) ?? '').toString('hex'),
        })
      : undefined;

  await scope.register(bearerAuth, {
    keys: [],
    // The plugin's own reading of the token is too lenient; read it from the header again.
    auth: (_lenientToken, request) => {
      const token = bearerTokenOf(request.headers.authorization);
      return token !== undefined && verifyToken(token);
    },
    addHook: false,
    // Despite its name, this mode matches the scheme word case-insensitively (RFC 7235).
    specCompliance: 'rfc6749',
    verifyErrorLogLevel: 'debug',
  });
  const verifyBearerAuth = scope.verifyBearerAuth;
  if (!verifyBearerAuth) throw new Error('@fastify/bearer-auth did not provide verifyBearerAuth');
  const verify = (request: FastifyRequest, reply: FastifyReply) =>
    new Promise<Error | undefined>((resolve) => verifyBearerAuth(request, reply, resolve));

  scope.addHook('onRequest', async (request, reply) => {
    if (failures) {
      const state = await failures(request, { increment: false });
      if (!state.isAllowed && state.remaining === 0) {
        throw tooManyRequests(
          'too many failed authentication attempts from this address; retry later',
          state.ttlInSeconds,
        );
      }
    }
    const error = await verify(request, reply);
    if ((error as { statusCode?: number } | undefined)?.statusCode === 401) {
      // The body was never read; closing spares the server from draining it.
      reply.header('connection', 'close');
      await failures?.(request);
      throw unauthorized(request);
    }
    if (error) throw error;
    if (perToken) {
      const state = await perToken(request);
      if (!state.isAllowed && state.isExceeded) {
        throw tooManyRequests('too many requests for this token; retry later', state.ttlInSeconds);
      }
    }
  });
}
