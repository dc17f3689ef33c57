import { createSecretKey, type KeyObject } from 'node:crypto';
import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../../config-error.js';
import { integer } from '../../environment.js';
import type { EncryptionKey, KeyRing } from './secrets.js';

/** The variables of the keys and the destinations, with their defaults. */
export const SecurityEnvironment = Type.Object({
  WEBHOOK_ENCRYPTION_KEY: Type.Optional(Type.String()),
  WEBHOOK_ENCRYPTION_KEYS: Type.Optional(Type.String()),
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: Type.Boolean({ default: false }),
  WEBHOOK_ROTATION_GRACE_S: integer(0, 31_536_000, 86_400),
});

/** A 32-byte key from its base64, or undefined when it is not one. */
function keyOf(encoded: string): KeyObject | undefined {
  const bytes = Buffer.from(encoded, 'base64');
  const valid = /^[A-Za-z0-9+/]+={0,2}$/.test(encoded) && bytes.length === 32;
  return valid ? createSecretKey(bytes) : undefined;
}

/** The key ring: `kid:base64` entries, or WEBHOOK_ENCRYPTION_KEY alone as the key `default`. */
function parseEncryptionKeys(list: string | undefined, single: string | undefined): KeyRing {
  if (list !== undefined && single !== undefined) {
    throw new ConfigError(
      'WEBHOOK_ENCRYPTION_KEYS and WEBHOOK_ENCRYPTION_KEY are both set: list every key in WEBHOOK_ENCRYPTION_KEYS (the one WEBHOOK_ENCRYPTION_KEY held as default:...)',
    );
  }
  if (single !== undefined) {
    const key = keyOf(single);
    if (key) return [{ id: 'default', key }];
    throw new ConfigError('WEBHOOK_ENCRYPTION_KEY must be the base64 encoding of 32 bytes');
  }
  const ring: EncryptionKey[] = [];
  const fail = (problem: string) => new ConfigError(`WEBHOOK_ENCRYPTION_KEYS ${problem}`);
  for (const [index, entry] of (list ?? '').split(',').entries()) {
    if (entry.trim() === '') continue;
    const [, id = '', encoded = ''] = /^\s*([A-Za-z0-9._-]{1,64}):(.*?)\s*$/.exec(entry) ?? [];
    const key = keyOf(encoded);
    if (id === '') {
      throw fail(
        `entry ${index + 1} must be kid:base64-of-32-bytes, the kid 1 to 64 of A-Z a-z 0-9 . _ -`,
      );
    }
    if (!key) throw fail(`has a key "${id}" that is not the base64 encoding of 32 bytes`);
    if (ring.some((known) => known.id === id)) throw fail(`names the key id "${id}" twice`);
    ring.push({ id, key });
  }
  if (list !== undefined && ring.length === 0) {
    throw new ConfigError('WEBHOOK_ENCRYPTION_KEYS must list at least one kid:base64-of-32-bytes');
  }
  return ring;
}

/** The key ring that seals secrets, where endpoints may send, and how long an old key signs. */
export function readSecuritySettings(environment: Static<typeof SecurityEnvironment>) {
  return {
    /** Endpoint secrets are sealed under the first of these AES-256-GCM keys; every one opens. */
    encryptionKeys: parseEncryptionKeys(
      environment.WEBHOOK_ENCRYPTION_KEYS,
      environment.WEBHOOK_ENCRYPTION_KEY,
    ),
    /** Let endpoints reach loopback, private and link-local addresses (development, tests). */
    allowPrivateNetworks: environment.WEBHOOK_ALLOW_PRIVATE_NETWORKS,
    /** How long the key before a rotation still signs, in seconds. */
    rotationGraceS: environment.WEBHOOK_ROTATION_GRACE_S,
  };
}

export type SecuritySettings = ReturnType<typeof readSecuritySettings>;
