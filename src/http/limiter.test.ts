import { describe, expect, it } from 'vitest';
import { ConcurrencyLimiter } from './limiter.js';

const take = (l: ConcurrencyLimiter, party: number) => {
  const slot = l.tryAcquire(party);
  if (typeof slot === 'string') throw new Error(`party ${party}: ${slot}`);
  return slot;
};

describe('ConcurrencyLimiter', () => {
  it('gives one tenant the whole lane, and refuses it as full past the limit', () => {
    const l = new ConcurrencyLimiter(4);
    const slots = [1, 2, 3, 4].map(() => take(l, 1));
    expect(l.tryAcquire(1)).toBe('full');
    slots[0]();
    slots[0]();
    expect(l.inflight).toBe(3);
    take(l, 1);
    expect(l.tryAcquire(1)).toBe('full');
  });

  it('admits a tenant under its share of a lane another fills, and holds the other to its share', () => {
    const l = new ConcurrencyLimiter(4);
    const a = [1, 2, 3, 4].map(() => take(l, 1));
    // B under its share (4 / 2 tenants) is admitted beyond the limit; A, over its share, is refused.
    const b1 = take(l, 2);
    take(l, 2);
    expect(l.inflight).toBe(6);
    expect(l.tryAcquire(2)).toBe('over-share');
    expect(l.tryAcquire(1)).toBe('over-share');
    // A's slots drain back to its share before it gets another.
    a[0]();
    a[1]();
    expect(l.tryAcquire(1)).toBe('over-share');
    a[2]();
    b1();
    // 2 in use: under the limit, anyone is admitted.
    take(l, 1);
    take(l, 1);
    expect(l.inflight).toBe(4);
    expect(l.tryAcquire(1)).toBe('over-share');
  });

  it('stops at twice its limit however many tenants arrive', () => {
    const l = new ConcurrencyLimiter(8);
    for (let i = 0; i < 8; i++) take(l, 0);
    let admitted = 0;
    for (let party = 1; party <= 100; party++) {
      while (typeof l.tryAcquire(party) !== 'string') admitted++;
    }
    expect(l.inflight).toBe(16);
    expect(admitted).toBe(8);
    expect(l.tryAcquire(101)).toBe('full');
  });
});
