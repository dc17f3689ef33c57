import { hash } from 'node:crypto';

/** Prefix of a configured entry that holds the SHA-256 of a token instead of the token. */
export const SHA256_ENTRY_PREFIX = 'sha256:';

/** The base64 SHA-256 of the token a configured entry (a token or `sha256:<hex>`) stands for. */
export function digestOf(entry: string): string {
  return entry.startsWith(SHA256_ENTRY_PREFIX)
    ? Buffer.from(entry.slice(SHA256_ENTRY_PREFIX.length), 'hex').toString('base64')
    : hash('sha256', entry, 'base64');
}
