import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  formatPosition,
  laterPosition,
  parseLsn,
  parsePosition,
} from '../../src/db/wal-position.js';

const positions = fc.record({
  timeline: fc.integer({ min: 1, max: 0xffff_ffff }),
  lsn: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
});

describe('Consistency-Token', () => {
  it('reads back every position it writes, as printable ASCII of at most 128 characters', () => {
    fc.assert(
      fc.property(positions, (position) => {
        const token = formatPosition(position);
        expect(token).toMatch(/^[\x21-\x7e]{1,128}$/);
        expect(parsePosition(token)).toStrictEqual({ ...position });
      }),
    );
  });

  it('writes a position as PostgreSQL writes an LSN', () => {
    expect(formatPosition({ timeline: 3, lsn: parseLsn('16/B374D848') })).toBe('t3-16/B374D848');
  });

  it.each([
    '',
    't0-0/1',
    't1-0/1 ',
    't01-0/1',
    't1-0-1',
    't4294967296-0/1',
    't1-123456789/0',
    '1-0/1',
    't1-0/1, t1-0/2',
  ])('is not read from %j', (text) => {
    expect(parsePosition(text)).toBeUndefined();
  });

  it('orders positions by timeline, then by LSN', () => {
    const early = { timeline: 1, lsn: 0x900n };
    const late = { timeline: 2, lsn: 0x100n };
    expect(laterPosition(early, late)).toBe(late);
    expect(laterPosition(late, early)).toBe(late);
    expect(laterPosition(early, { timeline: 1, lsn: 0x901n })).toStrictEqual({
      timeline: 1,
      lsn: 0x901n,
    });
    expect(laterPosition(early, undefined)).toBe(early);
  });
});
