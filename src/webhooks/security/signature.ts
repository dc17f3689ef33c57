import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';

const SECRET_PREFIX = 'whsec_';

/**
 * The signing key of a `whsec_` secret: the bytes its base64 part encodes. A KeyObject, made
 * once: an HMAC under raw bytes makes one each time, which costs more than the HMAC.
 */
export function signingKey(secret: string): KeyObject {
  return createSecretKey(Buffer.from(secret.slice(SECRET_PREFIX.length), 'base64'));
}

/**
 * `webhook-signature` as the Standard Webhooks specification defines it: `v1,` and the base64
 * HMAC-SHA256, under the key, of `id.timestamp.body`, over the exact bytes sent.
 */
export function signature(key: KeyObject, id: string, timestamp: number, body: string): string {
  const hmac = createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body);
  return `v1,${hmac.digest('base64')}`;
}

/** One signature per key, space-separated, in the keys' order (after a rotation: new, old). */
export function signatures(
  keys: readonly KeyObject[],
  id: string,
  timestamp: number,
  body: string,
): string {
  if (keys.length === 1) return signature(keys[0] as KeyObject, id, timestamp, body);
  return keys.map((key) => signature(key, id, timestamp, body)).join(' ');
}
