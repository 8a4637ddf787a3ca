import { describe, expect, it } from 'vitest';
import { mix64, shardOfFace } from './layout.js';

describe('the routing rule in TypeScript', () => {
  it('gives the values pinned in crates/index/src/route.rs', () => {
    expect(mix64(0n)).toBe(0xe220a8397b1dcdafn);
    expect(mix64(1n)).toBe(0x910a2dec89025cc1n);
    expect([0, 1, 2, 3, 4, 5, 6, 7].map((id) => shardOfFace(id, 4))).toEqual([3, 1, 2, 1, 2, 2, 0, 3]);
  });

  it('takes ids as numbers or as the strings bigint columns read as, up to 2^53', () => {
    expect(shardOfFace('7', 4)).toBe(3);
    expect(shardOfFace(Number.MAX_SAFE_INTEGER, 4)).toBe(shardOfFace(String(Number.MAX_SAFE_INTEGER), 4));
    expect(shardOfFace(12345, 1)).toBe(0);
  });
});
