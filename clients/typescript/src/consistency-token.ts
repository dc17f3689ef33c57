/** The header in which the service answers its token, and in which a read sends it back. */
export const CONSISTENCY_TOKEN = 'Consistency-Token';

// Today's form, `t<timeline>-<hi>/<lo>`: the timeline, then the WAL position as PostgreSQL writes it.
const today = /^t(\d{1,10})-([0-9A-F]{1,8})\/([0-9A-F]{1,8})$/i;

/** The (timeline, WAL position) of a token of today's form; undefined for any other. */
function position(token: string): [bigint, bigint] | undefined {
  const match = today.exec(token);
  if (!match) return undefined;
  const [, timeline = '', hi = '', lo = ''] = match;
  return [BigInt(timeline), (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`)];
}

/**
 * The token to hold once `received` arrives while `held` is held: the last one received, unless
 * both are of today's form and `held` is further on. Tokens are opaque and the service copes with
 * an old one, so the comparison is only a courtesy: it keeps an answer that arrives late, under
 * concurrency, from stepping the client back.
 */
export function newerToken(held: string | undefined, received: string): string {
  const from = held === undefined ? undefined : position(held);
  const to = position(received);
  if (held === undefined || from === undefined || to === undefined) return received;
  const [fromTimeline, fromWal] = from;
  const [toTimeline, toWal] = to;
  if (toTimeline !== fromTimeline) return toTimeline > fromTimeline ? received : held;
  return toWal >= fromWal ? received : held;
}
