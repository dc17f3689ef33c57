import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { endpointIdOf, endpointKeyOf } from '../../src/webhooks/ids.js';
import {
  generateSecret,
  isEndpointSecret,
  openSecret,
  SecretUnavailableError,
  sealSecret,
} from '../../src/webhooks/secrets.js';

const key = randomBytes(32);

describe('endpoint secrets', () => {
  it('makes whsec_ secrets of 32 random bytes, each new', () => {
    const [a, b] = [generateSecret(), generateSecret()];
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(isEndpointSecret(a)).toBe(true);
    expect(a).not.toBe(b);
  });

  it.each([
    ['24 bytes', `whsec_${randomBytes(24).toString('base64')}`, true],
    ['64 bytes', `whsec_${randomBytes(64).toString('base64')}`, true],
    ['23 bytes', `whsec_${randomBytes(23).toString('base64')}`, false],
    ['65 bytes', `whsec_${randomBytes(65).toString('base64')}`, false],
    ['no prefix', randomBytes(32).toString('base64'), false],
    ['bad base64', `whsec_${'!'.repeat(44)}`, false],
    ['missing padding', `whsec_${randomBytes(32).toString('base64').replace('=', '')}`, false],
  ])('accepts as an endpoint secret %s: %s', (_, value, accepted) => {
    expect(isEndpointSecret(value)).toBe(accepted);
  });

  it('seals under a key so that the stored form holds neither the secret nor its key bytes', () => {
    const secret = generateSecret();
    const sealed = sealSecret(secret, key);
    expect(sealed).toMatch(/^aes256gcm:/);
    expect(sealed).not.toContain(secret.slice(6, 20));
    expect(sealSecret(secret, key)).not.toBe(sealed);
    expect(openSecret(sealed, key)).toBe(secret);
  });

  it('refuses to open with another key, without one, or after tampering', () => {
    const sealed = sealSecret(generateSecret(), key);
    expect(() => openSecret(sealed, randomBytes(32))).toThrow(SecretUnavailableError);
    expect(() => openSecret(sealed, undefined)).toThrow(SecretUnavailableError);
    const bytes = Buffer.from(sealed.slice('aes256gcm:'.length), 'base64');
    bytes[bytes.length - 1] = (bytes[bytes.length - 1] ?? 0) ^ 1;
    expect(() => openSecret(`aes256gcm:${bytes.toString('base64')}`, key)).toThrow(
      SecretUnavailableError,
    );
  });

  it('stores as it is without a key, and still opens it once a key is set', () => {
    const secret = generateSecret();
    const stored = sealSecret(secret, undefined);
    expect(openSecret(stored, undefined)).toBe(secret);
    expect(openSecret(stored, key)).toBe(secret);
  });
});

describe('endpoint ids', () => {
  it('sort as text in the order of their keys, and read back', () => {
    const keys = [1n, 15n, 16n, 255n, 4096n, 2n ** 40n];
    const ids = keys.map(endpointIdOf);
    expect([...ids].sort()).toStrictEqual(ids);
    expect(ids.map(endpointKeyOf)).toStrictEqual(keys);
    expect(ids[0]).toBe('ep_0000000000000001');
  });

  it.each(['ep_1', 'ep_000000000000000G', 'att_0000000000000001', 'ep_00000000000000001'])(
    'reads %s as no endpoint id',
    (id) => {
      expect(endpointKeyOf(id)).toBeUndefined();
    },
  );
});
