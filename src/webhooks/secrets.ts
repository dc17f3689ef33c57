import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/** Every signing secret is written `whsec_` and the base64 of its key. */
export const SECRET_PREFIX = 'whsec_';
/** The key of a secret made or accepted for an endpoint is this many bytes long. */
export const SECRET_MIN_BYTES = 24;
export const SECRET_MAX_BYTES = 64;
const GENERATED_BYTES = 32;

const base64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** A new endpoint secret: 32 random bytes. */
export function generateSecret(): string {
  return SECRET_PREFIX + randomBytes(GENERATED_BYTES).toString('base64');
}

/** True for `whsec_` and canonical base64 of 24 to 64 bytes. */
export function isEndpointSecret(value: string): boolean {
  if (!value.startsWith(SECRET_PREFIX)) return false;
  const encoded = value.slice(SECRET_PREFIX.length);
  if (!base64.test(encoded)) return false;
  const length = Buffer.from(encoded, 'base64').length;
  return length >= SECRET_MIN_BYTES && length <= SECRET_MAX_BYTES;
}

/** The secret cannot be read: sealed under a key this process was not given. */
export class SecretUnavailableError extends Error {
  override name = 'SecretUnavailableError';
}

const PLAIN = 'plain:';
const SEALED = 'aes256gcm:';
const IV_BYTES = 12;
const TAG_BYTES = 16;
/** Binds a sealed value to its use: a ciphertext of anything else does not open as a secret. */
const CONTEXT = Buffer.from('plant-store webhook endpoint secret');

/**
 * How a secret is stored: AES-256-GCM under `key` (a fresh 96-bit nonce each time, so a dump
 * of the database alone does not give the secrets), or as it is when no key is configured.
 */
export function sealSecret(secret: string, key: Buffer | undefined): string {
  if (key === undefined) return PLAIN + secret;
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv).setAAD(CONTEXT);
  const encrypted = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
  return SEALED + Buffer.concat([iv, cipher.getAuthTag(), encrypted]).toString('base64');
}

/**
 * The secret a stored value holds. A value stored before a key was configured still opens;
 * one sealed under a key that is not `key` (or with none given) throws SecretUnavailableError.
 */
export function openSecret(stored: string, key: Buffer | undefined): string {
  if (stored.startsWith(PLAIN)) return stored.slice(PLAIN.length);
  if (!stored.startsWith(SEALED) || key === undefined) {
    throw new SecretUnavailableError(
      key === undefined
        ? 'the secret is encrypted and WEBHOOK_ENCRYPTION_KEY is not set'
        : 'the secret is stored in an unknown form',
    );
  }
  const bytes = Buffer.from(stored.slice(SEALED.length), 'base64');
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, bytes.subarray(0, IV_BYTES));
    decipher.setAAD(CONTEXT).setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
    const plain = Buffer.concat([
      decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)),
      decipher.final(),
    ]);
    return plain.toString('utf8');
  } catch {
    throw new SecretUnavailableError(
      'the secret was encrypted under another WEBHOOK_ENCRYPTION_KEY',
    );
  }
}
