import { sql } from 'drizzle-orm';
import type { Database } from '../../db/database.js';
import { prepareStatement } from '../../db/prepared.js';
import { DEFAULT_EVENT_TYPES } from '../catalog/event-types.js';
import {
  NEXT_ENDPOINT,
  NEXT_EVENT,
  SUBSCRIPTION_LOCKED,
  subscriptionLockedIf,
} from '../tables/locks.js';

/** A configured endpoint no running replica declares. */
const lapsed = sql.raw('not coalesce(e.declared_until > now(), false)');
/** A lapsed endpoint declared again receives the events after it, as a new endpoint does. */
const sinceIfLapsed = sql`case when ${lapsed} then ${NEXT_EVENT} else e.since_event end`;

export type Declarations = ReturnType<typeof createDeclarations>;

/**
 * The statements that declare the operator's WEBHOOK_URLS as configured endpoints, each
 * prepared once: at start, and again while the process runs, so they keep receiving.
 */
export function createDeclarations(db: Database) {
  // The secret is sealed for its row: a URL's key is its row's, or drawn for the insert (only
  // when there is none, so a restart uses up no id).
  const declaredKeys = prepareStatement<{ url: string; id: string }>(
    db,
    'webhook_declare_keys',
    sql`select urls.url,
               coalesce((select e.id from webhook_endpoints as e
                          where e.configured and e.url = urls.url), ${NEXT_ENDPOINT})::text as id
          from unnest(${sql.placeholder('urls')}::text[]) as urls(url)`,
  );
  // A URL declared for the first time, or again after it lapsed, or for event types it did not
  // receive, takes the subscription lock, as any new endpoint does. Its `events` are
  // WEBHOOK_EVENTS.
  // A row whose key is not the one sealed for (another replica inserted it meanwhile) is left
  // as it is and its URL not returned, to be sealed again for that row.
  const declare = prepareStatement<{ url: string }>(
    db,
    'webhook_declare',
    sql`with given as (
          select * from unnest(${sql.placeholder('urls')}::text[], ${sql.placeholder('ids')}::int8[],
                               ${sql.placeholder('secrets')}::text[]) as given(url, id, secret)
        ),
        updated as (
          update webhook_endpoints as e
             set secret = given.secret, updated_at = clock_timestamp(), since_event = ${sinceIfLapsed},
                 declared_until = now() + ${sql.placeholder('untilMs')}::int4 * interval '1 millisecond',
                 events = ${sql.placeholder('events')}::text[]
            from given, ${subscriptionLockedIf(sql`select 1 from webhook_endpoints as e join given
                                                     on e.configured and e.url = given.url
                                                  where ${lapsed}
                                                     or not e.events @> ${sql.placeholder('events')}::text[]`)}
           where e.configured and e.url = given.url and e.id = given.id
          returning e.id, e.url
        ),
        inserted as (
          insert into webhook_endpoints (id, url, secret, configured, declared_until, since_event,
                                         events)
          overriding system value
          select given.id, given.url, given.secret, true,
                 now() + ${sql.placeholder('untilMs')}::int4 * interval '1 millisecond', ${NEXT_EVENT},
                 ${sql.placeholder('events')}::text[]
            from ${SUBSCRIPTION_LOCKED}, given
           where given.url not in (select url from updated)
          on conflict (url) where configured do nothing
          returning id, url
        ),
        declared as (select * from updated union all select * from inserted),
        moved as (
          update webhook_deliveries as d set endpoint_id = declared.id, url = null
            from declared where d.url = declared.url
        )
        select url from declared`,
  );
  const renew = prepareStatement(
    db,
    'webhook_declare_again',
    sql`with renewed as (
          update webhook_endpoints as e
             set since_event = ${sinceIfLapsed}, declared_until = greatest(e.declared_until,
                   now() + ${sql.placeholder('untilMs')}::int4 * interval '1 millisecond')
            from ${subscriptionLockedIf(sql`select 1 from webhook_endpoints as e
                                                where e.configured and ${lapsed}
                                                  and e.url = any(${sql.placeholder('urls')}::text[])`)}
           where e.configured and e.url = any(${sql.placeholder('urls')}::text[])
          returning e.id, e.url
        )
        update webhook_deliveries as d set endpoint_id = renewed.id, url = null
          from renewed where d.url = renewed.url`,
  );

  return {
    /**
     * Declares the WEBHOOK_URLS endpoints, signed with the secret `sealFor` seals for each row
     * key and receiving the types `events` (WEBHOOK_EVENTS), until `untilMs` from now, and
     * moves to them the deliveries older releases wrote by URL. `sealFor` undefined only renews
     * the declaration.
     */
    async declare(
      urls: string[],
      sealFor: ((endpoint: string) => string) | undefined,
      untilMs: number,
      events: readonly string[] = DEFAULT_EVENT_TYPES,
    ) {
      if (urls.length === 0) return;
      if (sealFor === undefined) {
        await renew.execute({ urls, untilMs: Math.trunc(untilMs) });
        return;
      }
      let due = urls;
      // A second round finds the row another replica inserted; a third is only for a deletion.
      for (let round = 0; round < 3 && due.length > 0; round++) {
        const keys = await declaredKeys.execute({ urls: due });
        const declared = await declare.execute({
          urls: keys.map((row) => row.url),
          ids: keys.map((row) => row.id),
          secrets: keys.map((row) => sealFor(row.id)),
          untilMs: Math.trunc(untilMs),
          events: [...events],
        });
        const done = new Set(declared.map((row) => row.url));
        due = due.filter((url) => !done.has(url));
      }
      if (due.length > 0) throw new Error(`${due.length} WEBHOOK_URLS could not be declared`);
    },
  };
}
