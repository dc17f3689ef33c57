import { sql } from 'drizzle-orm';
import type { Database } from '../../db/database.js';
import { prepareStatement } from '../../db/prepared.js';
import { endpointIdOf } from '../tables/ids.js';
import {
  type KeyRing,
  openSecret,
  type SealedField,
  SecretUnavailableError,
  sealedPrefix,
  sealSecret,
} from './secrets.js';

export interface RekeyResult {
  /** The id the values are now sealed under. */
  keyId: string;
  /** Keys sealed anew (an endpoint's key, and its previous key during a rotation's grace). */
  resealed: number;
  /** Sets of custom headers sealed anew (one per endpoint that has any). */
  resealedHeaders: number;
  /** Endpoints (`ep_` ids) with a value that opens under no key of the ring: left as it was. */
  unreadable: string[];
}

interface StoredRow {
  id: string;
  secret: string;
  previous_secret: string | null;
  headers: string | null;
}

interface Change extends StoredRow {
  new_secret: string;
  new_previous_secret: string | null;
  new_headers: string | null;
}

const placeholder = (name: string) => sql.placeholder(name);

/**
 * Seals every stored value (keys, custom headers) that is not sealed under the ring's first key
 * anew under it, while the service runs: `batchSize` endpoints at a time, each batch one read
 * and one write, and the write changes a row only if nothing (a rotation, an erased old key, new
 * headers) changed it since the read;
 * such a row is read again. Values that open under no key of the ring are counted, not changed.
 */
export async function rekeySecrets(
  db: Database,
  keys: KeyRing,
  batchSize: number,
): Promise<RekeyResult> {
  const [first] = keys;
  if (first === undefined) throw new Error('there is no encryption key to seal under');
  const prefix = sealedPrefix(first.id);
  const due = prepareStatement<StoredRow>(
    db,
    '',
    sql`select id::text as id, secret, previous_secret, headers from webhook_endpoints
         where id > ${placeholder('after')}::bigint
           and (not starts_with(secret, ${placeholder('prefix')}::text)
                or not starts_with(previous_secret, ${placeholder('prefix')}::text)
                or not starts_with(headers, ${placeholder('prefix')}::text))
         order by webhook_endpoints.id limit ${placeholder('limit')}::int`,
  );
  const write = prepareStatement<{ id: string }>(
    db,
    '',
    sql`update webhook_endpoints e
           set secret = c.new_secret, previous_secret = c.new_previous_secret,
               headers = c.new_headers
          from jsonb_to_recordset(${placeholder('changes')}::jsonb) as c(id bigint, secret text,
                 previous_secret text, headers text, new_secret text, new_previous_secret text,
                 new_headers text)
         where e.id = c.id and e.secret = c.secret
           and e.previous_secret is not distinct from c.previous_secret
           and e.headers is not distinct from c.headers
        returning e.id::text as id`,
  );

  const reseal = (value: string, endpoint: string, field: SealedField) => {
    if (value.startsWith(prefix)) return value;
    const place = { endpoint, field };
    return sealSecret(openSecret(value, keys, place), keys, place);
  };

  let resealed = 0;
  let resealedHeaders = 0;
  const unreadable = new Set<string>();
  let after = 0n;
  for (;;) {
    const rows = await due.execute({ after: after.toString(), prefix, limit: batchSize });
    const last = rows.at(-1);
    if (last === undefined) break;
    const changes: Change[] = [];
    for (const row of rows) {
      try {
        changes.push({
          ...row,
          new_secret: reseal(row.secret, row.id, 'secret'),
          new_previous_secret:
            row.previous_secret === null ? null : reseal(row.previous_secret, row.id, 'secret'),
          new_headers: row.headers === null ? null : reseal(row.headers, row.id, 'headers'),
        });
      } catch (error) {
        if (!(error instanceof SecretUnavailableError)) throw error;
        unreadable.add(endpointIdOf(row.id));
      }
    }
    const written = new Set(
      changes.length === 0
        ? []
        : (await write.execute({ changes: JSON.stringify(changes) })).map((row) => row.id),
    );
    for (const change of changes) {
      if (!written.has(change.id)) continue;
      resealed += Number(change.new_secret !== change.secret);
      resealed += Number(change.new_previous_secret !== change.previous_secret);
      resealedHeaders += Number(change.new_headers !== change.headers);
    }
    // A row changed (or deleted) since it was read is read again.
    const missed = changes.find((change) => !written.has(change.id));
    after = missed === undefined ? BigInt(last.id) : BigInt(missed.id) - 1n;
  }
  return { keyId: first.id, resealed, resealedHeaders, unreadable: [...unreadable] };
}
