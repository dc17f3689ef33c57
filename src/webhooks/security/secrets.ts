import { createCipheriv, createDecipheriv, type KeyObject, randomBytes } from 'node:crypto';

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

/** The secret cannot be read: sealed under a key this process was not given, or elsewhere. */
export class SecretUnavailableError extends Error {
  override name = 'SecretUnavailableError';
  constructor(
    message: string,
    /** The key id the value names and the ring lacks, when that is why (ids are not secret). */
    readonly missingKeyId?: string,
  ) {
    super(message);
  }
}

/** An AES-256-GCM key and the id the values it seals are stored with. */
export interface EncryptionKey {
  id: string;
  key: KeyObject;
}

/** The first key seals, every key opens; with none, values are stored as they are. */
export type KeyRing = readonly EncryptionKey[];

/** The fields of an endpoint's row that hold sealed values: its keys, its custom headers. */
export type SealedField = 'secret' | 'headers';

/**
 * Where a sealed value is stored: its AAD, so that a value copied to another endpoint or field
 * does not open. A rotation moves the secret to `previous_secret` as it is: both hold the
 * endpoint's signing keys, one field over time.
 */
export interface SealedPlace {
  /** The endpoint's row key, in decimal. */
  endpoint: string;
  field: SealedField;
}

const PLAIN = 'plain:';
/** Sealed before key ids: no key id, and an AAD that is the same for every value. */
const UNNAMED = 'aes256gcm:';
const UNNAMED_CONTEXT = Buffer.from('plant-store webhook endpoint secret');
/** `aes256gcm-v2:<key id>:<base64 of nonce, tag, ciphertext>`, the AAD naming its place. */
const NAMED = 'aes256gcm-v2:';
const IV_BYTES = 12;
const TAG_BYTES = 16;

const contextOf = (place: SealedPlace) =>
  Buffer.from(`endpoint:${place.endpoint}:${place.field}`, 'utf8');

/** The prefix of every value sealed under the key `id`. */
export function sealedPrefix(id: string): string {
  return `${NAMED}${id}:`;
}

/**
 * How a value is stored: AES-256-GCM under the ring's first key (a fresh 96-bit nonce each time,
 * so a dump of the database alone does not give the secrets), or as it is when the ring is empty.
 */
export function sealSecret(secret: string, keys: KeyRing, place: SealedPlace): string {
  const [first] = keys;
  if (first === undefined) return PLAIN + secret;
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', first.key, iv).setAAD(contextOf(place));
  const encrypted = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
  const sealed = Buffer.concat([iv, cipher.getAuthTag(), encrypted]).toString('base64');
  return sealedPrefix(first.id) + sealed;
}

function decrypt(bytes: Buffer, key: KeyObject, context: Buffer): string | undefined {
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, bytes.subarray(0, IV_BYTES));
    decipher.setAAD(context).setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
    const plain = Buffer.concat([
      decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)),
      decipher.final(),
    ]);
    return plain.toString('utf8');
  } catch {
    return undefined;
  }
}

/**
 * The value a stored one holds, if it was sealed for `place`. A value stored before a key was
 * configured opens, and so does one sealed before key ids under any key of the ring; anything
 * else throws SecretUnavailableError, whose message never holds a secret.
 */
export function openSecret(stored: string, keys: KeyRing, place: SealedPlace): string {
  if (stored.startsWith(PLAIN)) return stored.slice(PLAIN.length);
  const separator = stored.startsWith(NAMED) ? stored.indexOf(':', NAMED.length) : -1;
  const namedId = separator === -1 ? undefined : stored.slice(NAMED.length, separator);
  if (keys.length === 0 && (stored.startsWith(NAMED) || stored.startsWith(UNNAMED))) {
    throw new SecretUnavailableError(
      'the secret is encrypted and no encryption key is set',
      namedId,
    );
  }
  if (stored.startsWith(NAMED)) {
    const id = namedId ?? '';
    const entry = keys.find((key) => key.id === id);
    if (namedId === undefined || entry === undefined) {
      throw new SecretUnavailableError(
        `the secret is sealed under the key id "${id}", which the encryption keys do not hold`,
        namedId,
      );
    }
    const bytes = Buffer.from(stored.slice(separator + 1), 'base64');
    const opened = decrypt(bytes, entry.key, contextOf(place));
    if (opened === undefined) {
      throw new SecretUnavailableError(
        `the secret does not open under the key "${id}" for endpoint ${place.endpoint}'s ${place.field}: another key of that id, or a value sealed for another endpoint or field`,
      );
    }
    return opened;
  }
  if (stored.startsWith(UNNAMED)) {
    const bytes = Buffer.from(stored.slice(UNNAMED.length), 'base64');
    for (const { key } of keys) {
      const opened = decrypt(bytes, key, UNNAMED_CONTEXT);
      if (opened !== undefined) return opened;
    }
    throw new SecretUnavailableError('the secret was encrypted under a key the ring does not hold');
  }
  throw new SecretUnavailableError('the secret is stored in an unknown form');
}
