import { type SQL, sql } from 'drizzle-orm';
import type { Database } from '../../db/database.js';
import { prepareStatement } from '../../db/prepared.js';
import { rfc3339 } from '../../db/rfc3339.js';
import { INT64_MAX } from '../../kinds.js';
import { endpointDisabledEvents } from '../catalog/event-bodies.js';
import { givenUp } from '../delivery/given-up.js';
import { createRecovery } from '../delivery/recovery.js';
import { type CustomHeaders, openHeaders, sealHeaders } from '../security/custom-headers.js';
import { generateSecret, type KeyRing, openSecret, sealSecret } from '../security/secrets.js';
import {
  NEXT_ENDPOINT,
  NEXT_EVENT,
  SUBSCRIPTION_LOCKED,
  subscriptionLockedIf,
} from '../tables/locks.js';
import type { AttemptTrigger } from '../tables/triggers.js';

/** An endpoint as stored, its secret left out: every read of a row goes through this shape. */
export interface EndpointRow {
  /** The row key, in decimal. */
  id: string;
  url: string;
  description: string;
  disabled: boolean;
  disabledReason: string | null;
  /** The event types it receives. */
  events: string[];
  /** Deliveries per second at most; null for no limit. */
  rateLimit: number | null;
  /** Declared by WEBHOOK_URLS: the API cannot change it. */
  configured: boolean;
  /** RFC 3339, UTC, with milliseconds. */
  createdAt: string;
  updatedAt: string;
}

/** One attempt of the attempt log. */
export interface AttemptRow {
  id: string;
  eventId: string;
  /** In decimal: the plant's id is an int64, which a number would round. */
  plantId: string | null;
  /** Why it was made (see tables/triggers.ts). */
  trigger: AttemptTrigger;
  succeeded: boolean;
  responseStatus: number | null;
  error: string | null;
  durationMs: number;
  attemptedAt: string;
}

interface NewEndpoint {
  url: string;
  description: string;
  disabled: boolean;
  events: readonly string[];
  rateLimit: number | null;
  secret?: string | undefined;
}

export type EndpointStore = ReturnType<typeof createEndpointStore>;

const placeholder = (name: string) => sql.placeholder(name);

const endpointColumns = (table: SQL) => sql`${table}.id::text as id, ${table}.url,
  ${table}.description, ${table}.disabled, ${table}.disabled_reason as "disabledReason",
  ${table}.events, ${table}.rate_limit as "rateLimit", ${table}.configured,
  ${rfc3339(sql`${table}.created_at`)} as "createdAt",
  ${rfc3339(sql`${table}.updated_at`)} as "updatedAt"`;

const endpoints = sql.raw('webhook_endpoints');

/** The reason an endpointDisabled event gives when a client disabled the endpoint. */
export const API_DISABLED_REASON = 'disabled through the API';

const endpointKey = sql`${placeholder('id')}::bigint`;

/**
 * The statements of the management API over `db`, each prepared once; each returns undefined
 * for an endpoint that is not, and those that change one, for a configured one too (the route
 * tells which). Secrets are sealed under the first of `encryptionKeys`, bound to their row (see
 * security/secrets.ts); the key before a rotation still signs for `rotationGraceS`.
 */
export function createEndpointStore(
  db: Database,
  { encryptionKeys, rotationGraceS }: { encryptionKeys: KeyRing; rotationGraceS: number },
) {
  const grace = Math.trunc(rotationGraceS);

  // The secret is sealed for its row, so the row's key is drawn before the insert.
  const nextKey = prepareStatement<{ id: string }>(
    db,
    'webhook_endpoint_next_id',
    sql`select ${NEXT_ENDPOINT}::text as id`,
  );
  // Under the subscription lock: every create's events are recorded before, or after and for it.
  const insert = prepareStatement<EndpointRow>(
    db,
    'webhook_endpoint_create',
    sql`insert into webhook_endpoints (id, url, description, disabled, events, rate_limit, secret,
                                       since_event)
        overriding system value
        select ${endpointKey}, ${placeholder('url')}::text, ${placeholder('description')}::text,
               ${placeholder('disabled')}::boolean, ${placeholder('events')}::text[],
               ${placeholder('rateLimit')}::int4, ${placeholder('secret')}::text, ${NEXT_EVENT}
          from ${SUBSCRIPTION_LOCKED}
        returning ${endpointColumns(endpoints)}`,
  );
  const select = prepareStatement<EndpointRow>(
    db,
    'webhook_endpoint_get',
    sql`select ${endpointColumns(endpoints)} from webhook_endpoints where id = ${endpointKey}`,
  );
  const page = prepareStatement<EndpointRow>(
    db,
    'webhook_endpoint_list',
    sql`select ${endpointColumns(endpoints)} from webhook_endpoints
         where id > ${placeholder('after')}::bigint
         -- Qualified: a bare \`id\` would order by the text alias ('10' < '9').
         order by webhook_endpoints.id limit ${placeholder('limit')}::int`,
  );
  // Null leaves a field as it is; `rateLimit` is changed only when `setRateLimit`, since null
  // is a value of it (no limit). New event types take the subscription lock, as a new endpoint
  // does: a change that no endpoint received until now is recorded from the answer on.
  // Disabling keeps the reason of an endpoint already disabled (the service's own); an endpoint
  // the client disables has none. Disabling gives up the pending deliveries in the same
  // statement (attempts already claimed: see EngineTiming.startWindowMs), and an enabled
  // endpoint that the patch disables is an endpointDisabled event, in the same statement.
  // `before` reads its row under the lock the update takes anyway, so the newest version,
  // before the subscription lock (see the order of locks).
  const update = prepareStatement<EndpointRow>(
    db,
    'webhook_endpoint_patch',
    sql`with before as (
          select id as before_id, disabled as was_disabled from webhook_endpoints
           where id = ${endpointKey} and not configured
             for no key update
        ),
        changed as (
          update webhook_endpoints
             set url = coalesce(${placeholder('url')}::text, url),
                 description = coalesce(${placeholder('description')}::text, description),
                 disabled = coalesce(${placeholder('disabled')}::boolean, disabled),
                 events = coalesce(${placeholder('events')}::text[], events),
                 rate_limit = case when ${placeholder('setRateLimit')}::boolean
                                   then ${placeholder('rateLimit')}::int4 else rate_limit end,
                 disabled_reason = case when ${placeholder('disabled')}::boolean is false
                                        then null else disabled_reason end,
                 failing_since = case when ${placeholder('disabled')}::boolean is false
                                      then null else failing_since end,
                 updated_at = clock_timestamp()
            from before, ${subscriptionLockedIf(sql`select 1 from before
                                                      where ${placeholder('events')}::text[] is not null`)}
           where id = before.before_id
          returning webhook_endpoints.*, before.was_disabled
        ),
        ${givenUp('select id from changed where disabled')},
        ${endpointDisabledEvents(
          'disabled_events',
          sql`select id, url, ${API_DISABLED_REASON}::text, updated_at from changed
               where disabled and not was_disabled`,
        )}
        select ${endpointColumns(sql.raw('changed'))} from changed, disabled_events`,
  );
  const remove = prepareStatement<{ id: string }>(
    db,
    'webhook_endpoint_delete',
    sql`delete from webhook_endpoints where id = ${endpointKey} and not configured
        returning id::text`,
  );
  const selectSecret = prepareStatement<{ secret: string }>(
    db,
    'webhook_endpoint_secret',
    sql`select secret from webhook_endpoints where id = ${endpointKey} and not configured`,
  );
  const rotation = prepareStatement<{ id: string }>(
    db,
    'webhook_endpoint_rotate',
    sql`update webhook_endpoints
           set previous_secret = secret,
               previous_secret_until = clock_timestamp() + ${sql.raw(`interval '${grace} seconds'`)},
               secret = ${placeholder('secret')}::text,
               updated_at = clock_timestamp()
         where id = ${endpointKey} and not configured
        returning id::text`,
  );
  const selectHeaders = prepareStatement<{ configured: boolean; headers: string | null }>(
    db,
    'webhook_endpoint_headers',
    sql`select configured, headers from webhook_endpoints where id = ${endpointKey}`,
  );
  // A new version, as every change has: the lanes open the headers again (see delivery/lanes.ts).
  const replaceHeaders = prepareStatement<{ id: string }>(
    db,
    'webhook_endpoint_set_headers',
    sql`update webhook_endpoints
           set headers = ${placeholder('headers')}::text, updated_at = clock_timestamp()
         where id = ${endpointKey} and not configured
        returning id::text`,
  );
  // One row with null columns when the endpoint has no such attempt; none when it does not exist.
  const attemptPage = prepareStatement<AttemptRow>(
    db,
    'webhook_endpoint_attempts',
    sql`select a.id::text as id, a.event_id::text as "eventId", a.plant_id::text as "plantId",
               a.trigger, a.succeeded, a.response_status as "responseStatus", a.error,
               a.duration_ms as "durationMs", ${rfc3339(sql`a.attempted_at`)} as "attemptedAt"
          from webhook_endpoints e
          left join lateral (
            select * from webhook_attempts
             where endpoint_id = e.id and id < ${placeholder('before')}::bigint
               and (${placeholder('succeeded')}::boolean is null
                    or succeeded = ${placeholder('succeeded')}::boolean)
             order by id desc limit ${placeholder('limit')}::int
          ) a on true
         where e.id = ${endpointKey}
         order by a.id desc`,
  );
  const recovery = createRecovery(db, 'webhook_endpoint_recover');

  const keyOf = (key: bigint) => ({ id: key.toString() });
  const secretOf = (key: bigint | string) =>
    ({ endpoint: key.toString(), field: 'secret' }) as const;

  return {
    /** A new endpoint, signed with `secret`, or a new key when it is absent. */
    async create({ url, description, disabled, events, rateLimit, secret }: NewEndpoint) {
      const [next] = await nextKey.execute({});
      if (!next) throw new Error('the sequence of endpoint keys returned no value');
      const sealed = sealSecret(secret ?? generateSecret(), encryptionKeys, secretOf(next.id));
      const [row] = await insert.execute({
        id: next.id,
        url,
        description,
        disabled,
        events: [...events],
        rateLimit: rateLimit === null ? null : Number(rateLimit),
        secret: sealed,
      });
      if (!row) throw new Error('the insert of an endpoint returned no row');
      return row;
    },
    async get(key: bigint): Promise<EndpointRow | undefined> {
      return (await select.execute(keyOf(key)))[0];
    },
    /** Up to `limit` endpoints whose key is above `after`, in ascending key order. */
    list(after: bigint, limit: number) {
      return page.execute({ after: after.toString(), limit });
    },
    /**
     * Applies a JSON merge patch. Enabling clears `disabledReason` and the failing run; disabling
     * gives up the pending deliveries (failed, "endpoint disabled"), which `recover` can send later.
     */
    async patch(
      key: bigint,
      { url, description, disabled, events, rateLimit }: Partial<NewEndpoint>,
    ) {
      const values = {
        ...keyOf(key),
        url: url ?? null,
        description: description ?? null,
        disabled: disabled ?? null,
        events: events === undefined ? null : [...events],
        setRateLimit: rateLimit !== undefined,
        rateLimit: rateLimit == null ? null : Number(rateLimit),
      };
      return (await update.execute(values))[0];
    },
    /** Deletes the endpoint, its deliveries and its attempts; false when there was none. */
    async delete(key: bigint) {
      return (await remove.execute(keyOf(key))).length > 0;
    },
    /** The current signing key, opened (throws SecretUnavailableError when it cannot be). */
    async secret(key: bigint) {
      const [row] = await selectSecret.execute(keyOf(key));
      return row && openSecret(row.secret, encryptionKeys, secretOf(key));
    },
    /** The new key (`secret`, or a new one) signs from now on; the old one too, for the grace. */
    async rotate(key: bigint, secret?: string) {
      const sealed = sealSecret(secret ?? generateSecret(), encryptionKeys, secretOf(key));
      return (await rotation.execute({ ...keyOf(key), secret: sealed })).length > 0;
    },
    /**
     * The custom headers sent with its deliveries, opened ({} for a configured endpoint, which
     * has none); undefined when there is no such endpoint. Throws SecretUnavailableError when
     * they cannot be opened.
     */
    async headers(key: bigint): Promise<CustomHeaders | undefined> {
      const [row] = await selectHeaders.execute(keyOf(key));
      if (!row) return undefined;
      return row.configured ? {} : openHeaders(row.headers, encryptionKeys, key.toString());
    },
    /** Replaces its custom headers ({} removes them all); false when there is none to change. */
    async setHeaders(key: bigint, headers: CustomHeaders) {
      const sealed = sealHeaders(headers, encryptionKeys, key.toString());
      return (await replaceHeaders.execute({ ...keyOf(key), headers: sealed })).length > 0;
    },
    /**
     * Up to `limit` attempts older than `before` (a key), newest first; only those that succeeded
     * or failed when `succeeded` is given. Undefined when there is no such endpoint.
     */
    async attempts(
      key: bigint,
      query: { before: bigint; limit: number; succeeded?: boolean | undefined },
    ) {
      const rows = await attemptPage.execute({
        ...keyOf(key),
        before: (query.before > INT64_MAX ? INT64_MAX : query.before).toString(),
        limit: query.limit,
        succeeded: query.succeeded ?? null,
      });
      if (rows.length === 0) return undefined;
      return rows.filter((row) => row.id !== null);
    },
    /**
     * Makes every delivery of the endpoint that failed at or after `since` due again, as new:
     * how many; undefined when there is no such endpoint, 'disabled' when it is disabled.
     */
    async recover(key: bigint, since: string) {
      const { disabled, count } = await recovery({ endpoint: key, failedSince: since });
      if (disabled === undefined) return undefined;
      return disabled ? ('disabled' as const) : count;
    },
  };
}
