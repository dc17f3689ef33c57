import { describe, expect, it } from 'vitest';
import { afterInterval } from '../../src/idle-collection.js';

describe('the collection after a busy spell', () => {
  it('runs at the first quiet interval after a busy one', () => {
    const busy = afterInterval(false, 0.6);
    expect(busy).toStrictEqual({ busy: true, collect: false });
    expect(afterInterval(busy.busy, 0.002)).toStrictEqual({ busy: false, collect: true });
  });

  it('waits while the process is still winding down, neither busy nor quiet', () => {
    expect(afterInterval(true, 0.03)).toStrictEqual({ busy: true, collect: false });
  });

  it('does not run again while the process stays quiet', () => {
    expect(afterInterval(false, 0.002)).toStrictEqual({ busy: false, collect: false });
  });

  it('does not run while the process is busy', () => {
    expect(afterInterval(true, 0.9)).toStrictEqual({ busy: true, collect: false });
  });
});
