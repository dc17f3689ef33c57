import { createHash } from 'node:crypto';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import {
  bearerTokenOf,
  createScopedTokens,
  createTokenVerifier,
  requireBearerToken,
} from '../../src/http/auth.js';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

describe('createTokenVerifier', () => {
  const verify = createTokenVerifier(['first-token', 'second-token', `sha256:${sha256('hidden')}`]);

  it('accepts every configured token', () => {
    expect(verify('first-token')).toBe(true);
    expect(verify('second-token')).toBe(true);
  });

  it('accepts a token whose SHA-256 is configured, in either hex case', () => {
    expect(verify('hidden')).toBe(true);
    expect(createTokenVerifier([`sha256:${sha256('hidden').toUpperCase()}`])('hidden')).toBe(true);
  });

  it('rejects anything else, including prefixes, the digest itself and case variants', () => {
    for (const token of [
      '',
      'first',
      'first-token ',
      'FIRST-TOKEN',
      sha256('hidden'),
      'sha256:hidden',
    ]) {
      expect(verify(token)).toBe(false);
    }
  });

  it('accepts nothing when no token is configured', () => {
    expect(createTokenVerifier([])('anything')).toBe(false);
  });
});

describe('bearerTokenOf', () => {
  it.each([
    ['Bearer abc', 'abc'],
    ['bEaReR abc', 'abc'],
    ['Bearer    abc', 'abc'],
    ['Bearer abc \t ', 'abc'],
    ['Bearer a b', 'a b'],
  ])('reads %j as %j', (header, token) => {
    expect(bearerTokenOf(header)).toBe(token);
  });

  it.each([
    undefined,
    '',
    'Bearer',
    'Bearer ',
    'Bearer\tabc',
    'Basic abc',
    ' Bearer abc',
    'Bearerabc',
  ])('finds no token in %j', (header) => {
    expect(bearerTokenOf(header)).toBeUndefined();
  });

  it('keeps, as part of the token, what HTTP does not strip: a leading tab, Unicode spaces', () => {
    expect(bearerTokenOf('Bearer \tabc')).toBe('\tabc');
    expect(bearerTokenOf('Bearer \u00a0abc')).toBe('\u00a0abc');
    expect(bearerTokenOf('Bearer abc\u00a0')).toBe('abc\u00a0');
    expect(bearerTokenOf('Bearer abc\u2003')).toBe('abc\u2003');
  });
});

describe('createScopedTokens', () => {
  const { plants, admin } = createScopedTokens({
    plants: ['plant-token', 'shared-token'],
    admin: [`sha256:${sha256('admin-token')}`, 'shared-token'],
  });

  it('accepts a token in its own scope only', () => {
    expect([plants.verify('plant-token'), admin.verify('plant-token')]).toStrictEqual([
      true,
      false,
    ]);
    expect([plants.verify('admin-token'), admin.verify('admin-token')]).toStrictEqual([
      false,
      true,
    ]);
    expect([plants.verify('shared-token'), admin.verify('shared-token')]).toStrictEqual([
      true,
      true,
    ]);
  });

  it('tells a token of another scope from one of none', () => {
    expect(plants.validElsewhere('admin-token')).toBe(true);
    expect(admin.validElsewhere('plant-token')).toBe(true);
    expect(plants.validElsewhere('shared-token')).toBe(false);
    expect(plants.validElsewhere('unknown')).toBe(false);
    expect(admin.validElsewhere('unknown')).toBe(false);
  });

  it('refuses every token in a scope with no entry, and still knows the tokens of the others', () => {
    const none = createScopedTokens({ plants: ['plant-token'], admin: [] });
    expect(none.admin.verify('plant-token')).toBe(false);
    expect(none.admin.validElsewhere('plant-token')).toBe(true);
    expect(none.admin.validElsewhere('other')).toBe(false);
  });
});

describe('requireBearerToken', () => {
  const noLimits = { failuresPerAddress: 0, ipv6Prefix: 64, requestsPerToken: 0, windowMs: 60_000 };

  it('checks the token as sent, not as @fastify/bearer-auth trims it', async () => {
    const app = Fastify();
    await app.register(async (scope) => {
      await requireBearerToken(
        scope,
        createTokenVerifier([`sha256:${sha256('abc\u00a0')}`]),
        noLimits,
      );
      scope.get('/', async () => 'ok');
    });
    try {
      const status = async (authorization: string) =>
        (await app.inject({ url: '/', headers: { authorization } })).statusCode;
      expect(await status('Bearer abc\u00a0')).toBe(200);
      expect(await status('Bearer abc')).toBe(401);
    } finally {
      await app.close();
    }
  });
});
