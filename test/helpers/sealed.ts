import { createCipheriv, createSecretKey, type KeyObject, randomBytes } from 'node:crypto';
import type { EncryptionKey } from '../../src/webhooks/security/secrets.js';

/** A new AES-256 key of the ring under `id`. */
export const ringKey = (id: string): EncryptionKey => ({
  id,
  key: createSecretKey(randomBytes(32)),
});

/** `id:base64` of a ring key, as WEBHOOK_ENCRYPTION_KEYS lists it. */
export const keyEntry = ({ id, key }: EncryptionKey) => `${id}:${key.export().toString('base64')}`;

/** A value as it was sealed before key ids: no key id, and the same AAD for every row. */
export function unnamedSeal(secret: string, key: KeyObject): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv).setAAD(
    Buffer.from('plant-store webhook endpoint secret'),
  );
  const encrypted = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
  return `aes256gcm:${Buffer.concat([iv, cipher.getAuthTag(), encrypted]).toString('base64')}`;
}
