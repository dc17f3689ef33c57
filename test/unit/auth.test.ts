import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { bearerTokenOf, createTokenVerifier, FailedAddresses } from '../../src/http/auth.js';

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

describe('FailedAddresses', () => {
  const WINDOW = 60_000;

  it('names an address that failed as possibly limited until its window has passed', () => {
    const failed = new FailedAddresses(WINDOW);
    expect(failed.mayBeLimited('10.0.0.1', 0)).toBe(false);
    failed.add('10.0.0.1', 1000);
    expect(failed.mayBeLimited('10.0.0.1', 1000)).toBe(true);
    expect(failed.mayBeLimited('10.0.0.1', 1000 + WINDOW - 1)).toBe(true);
    expect(failed.mayBeLimited('10.0.0.2', 1000)).toBe(false);
    expect(failed.mayBeLimited('10.0.0.1', 1000 + WINDOW)).toBe(false);
  });

  it('sends every address to the store for a window after a failure it had no room for', () => {
    const failed = new FailedAddresses(WINDOW, 2);
    failed.add('10.0.0.1', 0);
    failed.add('10.0.0.2', 0);
    failed.add('10.0.0.3', 10);
    expect(failed.mayBeLimited('10.0.0.3', 10)).toBe(true);
    expect(failed.mayBeLimited('10.0.0.9', 10 + WINDOW - 1)).toBe(true);
    expect(failed.mayBeLimited('10.0.0.9', 10 + WINDOW)).toBe(false);
    // Expired entries make room again.
    failed.add('10.0.0.4', 10 + WINDOW);
    expect(failed.mayBeLimited('10.0.0.4', 10 + WINDOW)).toBe(true);
    expect(failed.mayBeLimited('10.0.0.5', 10 + WINDOW)).toBe(false);
  });
});
