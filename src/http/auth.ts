import { hash } from 'node:crypto';
import bearerAuth from '@fastify/bearer-auth';
import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  type AuthFailureStore,
  createFailureThrottle,
  type FailureThrottle,
  type FailureThrottleOptions,
} from './auth-throttle.js';
import { HttpError } from './errors.js';
import { digestOf } from './tokens.js';

const CHALLENGE = 'Bearer realm="plant-store"';

export const TOKEN_REQUIRED_MESSAGE = 'a bearer token is required';
export const NOT_BEARER_MESSAGE = 'the Authorization header must use the Bearer scheme';
export const EMPTY_TOKEN_MESSAGE = 'the bearer token is empty';
export const TOKEN_NOT_VALID_MESSAGE = 'the bearer token is not valid';
export const TOO_MANY_FAILURES_MESSAGE =
  'too many failed authentication attempts from this address; retry later';
export const TOO_MANY_FOR_TOKEN_MESSAGE = 'too many requests for this token; retry later';
/** The 403 of an admin token on the plant API. */
export const ADMIN_TOKEN_ON_PLANTS_MESSAGE =
  'this token is for the webhook management API; the plant API needs a plant token';
/** The 403 of a plant token on the management API; `managementOff` says how to turn it on. */
export const plantTokenOnAdminMessage = (managementOff?: string) =>
  `this token is for the plant API; ${managementOff ?? 'the webhook management API needs an admin token'}`;

/** What a token may reach: the plant API, or the webhook management API. */
export type TokenScope = 'plants' | 'admin';

/** The checks of one scope's tokens. */
export interface ScopedTokens {
  /** True when the token is valid in this scope. */
  verify: (token: string) => boolean;
  /** True when the token is valid in another scope only: it is answered 403, not 401. */
  validElsewhere: (token: string) => boolean;
}

/**
 * Builds the token checks of every scope from configured entries (tokens or `sha256:<hex>`
 * digests), each scope a set of digests. A presented token is looked up by its SHA-256 digest,
 * never by itself: how long a lookup takes can depend on the digest's characters, and learning
 * about the digest of a guess tells nothing about any configured token, so neither the length of
 * a configured token nor which entry matched shows in the response time. A valid token costs one
 * digest, made by one crypto.hash call, and one lookup in its scope's set: less than half the CPU
 * of comparing a digest with every entry through timingSafeEqual, and no more than a service
 * without scopes. The other scopes are looked at only for a token that failed.
 */
export function createScopedTokens(
  entries: Readonly<Record<TokenScope, readonly string[]>>,
): Record<TokenScope, ScopedTokens> {
  const scopes = Object.keys(entries) as TokenScope[];
  const digests = new Map(scopes.map((scope) => [scope, new Set(entries[scope].map(digestOf))]));
  const checks = (scope: TokenScope): ScopedTokens => {
    const own = digests.get(scope) ?? new Set<string>();
    const others = scopes.filter((other) => other !== scope).map((other) => digests.get(other));
    return {
      verify: (token) => own.has(hash('sha256', token, 'base64')),
      validElsewhere: (token) => {
        const digest = hash('sha256', token, 'base64');
        return !own.has(digest) && others.some((set) => set?.has(digest));
      },
    };
  };
  return { plants: checks('plants'), admin: checks('admin') };
}

/** The check of one list of entries (see createScopedTokens). */
export function createTokenVerifier(entries: readonly string[]): (token: string) => boolean {
  return createScopedTokens({ plants: entries, admin: [] }).plants.verify;
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

/** A 401 for `request`; `off`, when set, is said instead of what is wrong with its token. */
function unauthorized(request: FastifyRequest, off?: string): HttpError {
  const header = request.headers.authorization;
  if (!header) {
    return new HttpError(401, off ?? TOKEN_REQUIRED_MESSAGE, {
      'www-authenticate': CHALLENGE,
    });
  }
  const scheme = /^bearer(?:[ \t]+(.*))?$/is.exec(header);
  if (!scheme) {
    return new HttpError(401, off ?? NOT_BEARER_MESSAGE, {
      'www-authenticate': CHALLENGE,
    });
  }
  if (!scheme[1]?.trim()) {
    return new HttpError(401, off ?? EMPTY_TOKEN_MESSAGE, {
      'www-authenticate': CHALLENGE,
    });
  }
  return new HttpError(401, off ?? TOKEN_NOT_VALID_MESSAGE, {
    'www-authenticate': `${CHALLENGE}, error="invalid_token"`,
  });
}

/** A valid token used outside its scope (RFC 6750 §3.1): not an authentication failure. */
function insufficientScope(message: string): HttpError {
  return new HttpError(403, message, {
    'www-authenticate': `${CHALLENGE}, error="insufficient_scope"`,
  });
}

function tooManyRequests(message: string, retryAfterSeconds: number): HttpError {
  return new HttpError(429, message, { 'retry-after': String(Math.max(1, retryAfterSeconds)) });
}

const tooManyFailures = (retryAfterSeconds: number) =>
  tooManyRequests(TOO_MANY_FAILURES_MESSAGE, retryAfterSeconds);

export interface AuthLimits {
  /** Failed authentications one client address may make per window; 0 means no limit. */
  failuresPerAddress: number;
  /** IPv6 clients are counted per network of this many bits (see clientKeyOf). */
  ipv6Prefix: number;
  /** Requests one token may make per window; 0 means no limit. */
  requestsPerToken: number;
  windowMs: number;
  /**
   * Where failures are counted for every replica, once the service has opened its database;
   * without it, each replica counts in its own memory.
   */
  failureStore?: (() => AuthFailureStore | undefined) | undefined;
  /**
   * The throttle of failed authentications, when several scopes share it (see
   * createAuthThrottle): an address is counted once for the whole service, whatever path it
   * guesses on. Each scope makes its own when absent.
   */
  throttle?: FailureThrottle | undefined;
  /**
   * Tokens valid in another scope, and what to tell their bearers: they are answered 403
   * insufficient_scope, never 401, and are not counted as failures.
   */
  otherScope?: { validElsewhere: (token: string) => boolean; message: string } | undefined;
  /**
   * Set when no token is configured for this scope, so none can pass: every 401 says this (what
   * turns the scope on) rather than blaming the token the client sent.
   */
  offMessage?: string | undefined;
}

/** The failure throttle of `limits`, to share between scopes; undefined when it is off. */
export function createAuthThrottle(
  limits: AuthLimits,
  log: FailureThrottleOptions['log'],
): FailureThrottle | undefined {
  return limits.failuresPerAddress > 0
    ? createFailureThrottle({
        limit: limits.failuresPerAddress,
        windowMs: limits.windowMs,
        ipv6Prefix: limits.ipv6Prefix,
        store: limits.failureStore ?? (() => undefined),
        log,
      })
    : undefined;
}

/**
 * Requires a valid bearer token on every route of `scope`. The check runs in onRequest, before
 * the body is read, so an unauthenticated client cannot make the service parse anything.
 *
 * A client address that fails `failuresPerAddress` times within a window gets 429 for every
 * request until the window passes, even with a valid token (else a 200 among the 429s would
 * still tell a guesser that a token is right); the count is the service's, across replicas
 * (see createFailureThrottle). An optional per-token limit caps clients that authenticate.
 */
export async function requireBearerToken(
  scope: FastifyInstance,
  verifyToken: (token: string) => boolean,
  limits: AuthLimits,
): Promise<void> {
  await scope.register(rateLimit, { global: false });
  const throttle = limits.throttle ?? createAuthThrottle(limits, scope.log);
  const { otherScope } = limits;
  if (throttle) {
    scope.addHook('onReady', async () => throttle.start());
    scope.addHook('onClose', async () => throttle.stop());
  }
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

  /** The checks that may wait for a store; they answer by throwing. */
  async function checkWithStore(request: FastifyRequest, reply: FastifyReply, passed: boolean) {
    if (!passed) {
      // The body was never read; closing spares the server from draining it.
      reply.header('connection', 'close');
      const retryAfter = await throttle?.recordFailure(request.ip);
      if (retryAfter !== undefined) throw tooManyFailures(retryAfter);
      throw unauthorized(request, limits.offMessage);
    }
    if (perToken) {
      const state = await perToken(request);
      if (!state.isAllowed && state.isExceeded) {
        throw tooManyRequests(TOO_MANY_FOR_TOKEN_MESSAGE, state.ttlInSeconds);
      }
    }
  }

  // The hook below answers: the plugin's own hook and errorResponse reply a bare 401 at once, with
  // no WWW-Authenticate, no failure counted and no 403 for a token of another scope.
  await scope.register(bearerAuth, {
    keys: [], // required by its type, ignored when there is an auth function
    // The plugin's key is the rest of the header trimmed of every Unicode space, U+00A0 included,
    // which is not always the token the client sent: read the token from the header again.
    auth: (_trimmedKey, request) => {
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
      // A throttled address is known in memory: checking one costs no I/O.
      const retryAfter = throttle?.retryAfter(request);
      if (retryAfter !== undefined) {
        done(tooManyFailures(retryAfter));
        return;
      }
      const passed = error === undefined;
      if (!passed && otherScope) {
        const token = bearerTokenOf(request.headers.authorization);
        if (token !== undefined && otherScope.validElsewhere(token)) {
          done(insufficientScope(otherScope.message));
          return;
        }
      }
      // A valid token from an address that is not throttled is through without any store.
      if (passed && !perToken) {
        done();
        return;
      }
      checkWithStore(request, reply, passed).then(() => done(), done);
    });
  });
}
