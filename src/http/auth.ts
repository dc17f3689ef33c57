import { hash } from 'node:crypto';
import bearerAuth from '@fastify/bearer-auth';
import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from './errors.js';

/** Prefix of a configured entry that holds the SHA-256 of a token instead of the token. */
export const SHA256_ENTRY_PREFIX = 'sha256:';

const CHALLENGE = 'Bearer realm="plant-store"';

/**
 * Builds the token check from configured entries (tokens or `sha256:<hex>` digests). A presented
 * token is looked up by its SHA-256 digest, never by itself: how long a lookup takes can depend
 * on the digest's characters, and learning about the digest of a guess tells nothing about any
 * configured token, so neither the length of a configured token nor which entry matched shows in
 * the response time. (One digest, made by one crypto.hash call, and one lookup per request: less
 * than half the CPU of comparing a digest with every entry through timingSafeEqual.)
 */
export function createTokenVerifier(entries: readonly string[]): (token: string) => boolean {
  const digests = new Set(
    entries.map((entry) =>
      entry.startsWith(SHA256_ENTRY_PREFIX)
        ? Buffer.from(entry.slice(SHA256_ENTRY_PREFIX.length), 'hex').toString('base64')
        : hash('sha256', entry, 'base64'),
    ),
  );
  return (token) => digests.has(hash('sha256', token, 'base64'));
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
            hash('sha256', bearerTokenOf(request.headers.authorization) ?? '', 'hex'),
        })
      : undefined;
  const recentFailures = new FailedAddresses(limits.windowMs);

  /** The checks that need the rate limiter's store; they answer by throwing. */
  async function checkWithStore(request: FastifyRequest, reply: FastifyReply, passed: boolean) {
    if (failures && recentFailures.mayBeLimited(request.ip)) {
      const state = await failures(request, { increment: false });
      if (!state.isAllowed && state.remaining === 0) {
        throw tooManyRequests(
          'too many failed authentication attempts from this address; retry later',
          state.ttlInSeconds,
        );
      }
    }
    if (!passed) {
      // The body was never read; closing spares the server from draining it.
      reply.header('connection', 'close');
      recentFailures.add(request.ip);
      await failures?.(request);
      throw unauthorized(request);
    }
    if (perToken) {
      const state = await perToken(request);
      if (!state.isAllowed && state.isExceeded) {
        throw tooManyRequests('too many requests for this token; retry later', state.ttlInSeconds);
      }
    }
  }

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

  scope.addHook('onRequest', (request, reply, done) => {
    verifyBearerAuth(request, reply, (error) => {
      if (error && (error as { statusCode?: number }).statusCode !== 401) {
        done(error);
        return;
      }
      const passed = error === undefined;
      // Only an address that failed within a window can be over the limit: a valid token from
      // any other address is through without asking the store.
      if (passed && !perToken && !(failures && recentFailures.mayBeLimited(request.ip))) {
        done();
        return;
      }
      checkWithStore(request, reply, passed).then(() => done(), done);
    });
  });
}

/**
 * The client addresses that failed to authenticate within the last window, so that the others
 * need not ask the rate limiter's store. It holds at most `capacity` addresses: a failure it
 * cannot record makes every address ask the store until a window has passed since, so its
 * memory stays bounded and no limited address is let through.
 */
export class FailedAddresses {
  private readonly until = new Map<string, number>();
  private unrecordedUntil = 0;
  private nextSweep = 0;

  constructor(
    private readonly windowMs: number,
    private readonly capacity = 10_000,
  ) {}

  add(address: string, now = Date.now()): void {
    if (this.until.size >= this.capacity && now >= this.nextSweep) {
      for (const [known, until] of this.until) if (until <= now) this.until.delete(known);
      this.nextSweep = now + 1000;
    }
    if (this.until.size < this.capacity || this.until.has(address)) {
      // The store's window for the address began at or before this failure: it ends earlier.
      this.until.set(address, now + this.windowMs);
    } else {
      this.unrecordedUntil = now + this.windowMs;
    }
  }

  mayBeLimited(address: string, now = Date.now()): boolean {
    if (now < this.unrecordedUntil) return true;
    const until = this.until.get(address);
    if (until === undefined) return false;
    if (until > now) return true;
    this.until.delete(address);
    return false;
  }
}
