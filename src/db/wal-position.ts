/**
 * A point in the primary's history: the timeline it was on and a WAL position on it. A write's
 * position is read after its commit; a server that has replayed that far on that timeline holds
 * the write. Positions on two timelines do not compare: a failover forks the history.
 */
export interface WalPosition {
  timeline: number;
  lsn: bigint;
}

const TIMELINE_MAX = 0xffff_ffff;
// `t<timeline>-<hi>/<lo>`: the timeline in decimal, the position as PostgreSQL writes an LSN.
const tokenPattern = /^t([1-9][0-9]{0,9})-([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;
const lsnPattern = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;

/** An LSN as PostgreSQL writes it (`16/B374D848`), as a number. */
export function parseLsn(text: string): bigint {
  const match = lsnPattern.exec(text);
  if (!match) throw new Error(`not an LSN: ${text}`);
  return (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`);
}

const hex = (value: bigint) => value.toString(16).toUpperCase();

/** The text of a Consistency-Token: printable ASCII, at most 30 characters. */
export function formatPosition({ timeline, lsn }: WalPosition): string {
  return `t${timeline}-${hex(lsn >> 32n)}/${hex(lsn & 0xffff_ffffn)}`;
}

/** The position a Consistency-Token names, or undefined when the text is not one. */
export function parsePosition(text: string): WalPosition | undefined {
  const match = tokenPattern.exec(text);
  if (!match) return undefined;
  const timeline = Number(match[1]);
  if (timeline > TIMELINE_MAX) return undefined;
  return { timeline, lsn: (BigInt(`0x${match[2]}`) << 32n) | BigInt(`0x${match[3]}`) };
}

/** The later of two positions: a later timeline is later, whatever its LSN. */
export function laterPosition(a: WalPosition, b: WalPosition | undefined): WalPosition {
  if (b === undefined) return a;
  if (a.timeline !== b.timeline) return a.timeline > b.timeline ? a : b;
  return a.lsn >= b.lsn ? a : b;
}

/** A timeline as pg_walfile_name writes it: its first 8 hexadecimal digits. */
export function timelineOfWalFile(walFile: string): number {
  return Number.parseInt(walFile.slice(0, 8), 16);
}
