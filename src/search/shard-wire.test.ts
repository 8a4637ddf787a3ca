import { describe, expect, it } from 'vitest';
import { decodeQueries, encodeQueries } from './shard-wire.js';

describe('a search query body', () => {
  it('carries float32 little-endian rows and is read back only as whole rows of `dims`', () => {
    const rows = Float32Array.of(0.5, -1.25, 3, 7);
    const body = encodeQueries(rows);
    expect(body.toString('hex')).toBe('0000003f0000a0bf000040400000e040');
    expect(Array.from(decodeQueries(body, 2) ?? [])).toEqual([0.5, -1.25, 3, 7]);
    expect(decodeQueries(body, 3)).toBeUndefined();
    expect(decodeQueries(Buffer.alloc(0), 2)).toBeUndefined();
  });
});
