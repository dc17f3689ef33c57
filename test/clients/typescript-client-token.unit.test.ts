import { describe, expect, it } from 'vitest';
import { newerToken } from '../../clients/typescript/src/consistency-token.js';

describe('the TypeScript client’s choice of the newer Consistency-Token', () => {
  it('takes the first one it receives', () => {
    expect(newerToken(undefined, 't1-0/3000060')).toBe('t1-0/3000060');
  });

  it('keeps the one further on when both are of the service’s form', () => {
    expect(newerToken('t1-0/3000060', 't1-0/3000128')).toBe('t1-0/3000128');
    expect(newerToken('t1-0/3000128', 't1-0/3000060')).toBe('t1-0/3000128');
    // The high half weighs more than any low half; hex digits are compared as numbers.
    expect(newerToken('t1-1/0', 't1-0/FFFFFFFF')).toBe('t1-1/0');
    expect(newerToken('t1-0/A', 't1-0/9')).toBe('t1-0/A');
    expect(newerToken('t1-0/a', 't1-0/B')).toBe('t1-0/B');
  });

  it('keeps the one of the later timeline, wherever its WAL position', () => {
    expect(newerToken('t2-0/1000', 't1-5/0')).toBe('t2-0/1000');
    expect(newerToken('t1-5/0', 't10-0/1000')).toBe('t10-0/1000');
  });

  it('takes the last one received when either is of another form', () => {
    expect(newerToken('t1-0/3000128', 'v2:abc')).toBe('v2:abc');
    expect(newerToken('v2:abc', 't1-0/3000060')).toBe('t1-0/3000060');
    expect(newerToken('t1-0/3000128', 't1-0/3000060 ')).toBe('t1-0/3000060 ');
  });
});
