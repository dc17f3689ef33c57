import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createTokenVerifier } from '../../src/http/auth.js';

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
