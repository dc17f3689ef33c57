import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  generateSecret,
  isEndpointSecret,
  openSecret,
  type SealedField,
  SecretUnavailableError,
  sealSecret,
} from '../../../src/webhooks/security/secrets.js';
import { endpointIdOf, endpointKeyOf } from '../../../src/webhooks/tables/ids.js';
import { ringKey, unnamedSeal } from '../../helpers/sealed.js';

const [k1, k2] = [ringKey('k1'), ringKey('k2')];

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

  const place = { endpoint: '7', field: 'secret' } as const;

  it('seals under the first key, naming its id, so that the stored form holds neither the secret nor a key', () => {
    const secret = generateSecret();
    const sealed = sealSecret(secret, [k1, k2], place);
    expect(sealed).toMatch(/^aes256gcm-v2:k1:[A-Za-z0-9+/]+={0,2}$/);
    expect(sealed).not.toContain(secret.slice(6, 20));
    expect(sealed).not.toContain(k1.key.export().toString('base64').slice(0, 12));
    expect(sealSecret(secret, [k1, k2], place)).not.toBe(sealed);
    expect(openSecret(sealed, [k1, k2], place)).toBe(secret);
  });

  it('opens a value under any key of the ring by the id it names', () => {
    const secret = generateSecret();
    const sealed = sealSecret(secret, [k2], place);
    expect(openSecret(sealed, [k1, k2], place)).toBe(secret);
    expect(() => openSecret(sealed, [k1], place)).toThrow(
      new SecretUnavailableError(
        'the secret is sealed under the key id "k2", which the encryption keys do not hold',
        'k2',
      ),
    );
  });

  it.each([
    ['another endpoint', { endpoint: '8', field: 'secret' } as const],
    [
      'an endpoint whose id has the same digits first',
      { endpoint: '70', field: 'secret' } as const,
    ],
    ['another field', { endpoint: '7', field: 'headers' as SealedField }],
  ])('does not open a value copied to %s', (_, elsewhere) => {
    const sealed = sealSecret(generateSecret(), [k1], place);
    expect(() => openSecret(sealed, [k1], elsewhere)).toThrow(SecretUnavailableError);
  });

  it('refuses to open under another key of the same id, without keys, or after tampering', () => {
    const secret = generateSecret();
    const sealed = sealSecret(secret, [k1], place);
    expect(() => openSecret(sealed, [ringKey('k1')], place)).toThrow(SecretUnavailableError);
    expect(() => openSecret(sealed, [], place)).toThrow(
      new SecretUnavailableError('the secret is encrypted and no encryption key is set', 'k1'),
    );
    const prefix = 'aes256gcm-v2:k1:';
    const bytes = Buffer.from(sealed.slice(prefix.length), 'base64');
    bytes[bytes.length - 1] = (bytes[bytes.length - 1] ?? 0) ^ 1;
    let message = '';
    try {
      openSecret(`${prefix}${bytes.toString('base64')}`, [k1], place);
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toMatch(/^the secret does not open under the key "k1"/);
    expect(message).not.toContain(secret.slice(6));
  });

  it('opens a value sealed before key ids under whichever key of the ring sealed it', () => {
    const secret = generateSecret();
    const legacy = unnamedSeal(secret, k2.key);
    expect(openSecret(legacy, [k1, k2], place)).toBe(secret);
    expect(openSecret(legacy, [k2], { endpoint: '99', field: 'secret' })).toBe(secret);
    expect(() => openSecret(legacy, [k1], place)).toThrow(SecretUnavailableError);
    expect(() => openSecret(legacy, [], place)).toThrow(SecretUnavailableError);
  });

  it('stores as it is without a key, and still opens it once a key is set', () => {
    const secret = generateSecret();
    const stored = sealSecret(secret, [], place);
    expect(stored).toBe(`plain:${secret}`);
    expect(openSecret(stored, [], place)).toBe(secret);
    expect(openSecret(stored, [k1], place)).toBe(secret);
  });

  it('refuses a value in an unknown form', () => {
    expect(() => openSecret('rot13:whsec_abc', [k1], place)).toThrow(
      new SecretUnavailableError('the secret is stored in an unknown form'),
    );
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
