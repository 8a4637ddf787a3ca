import { describe, expect, it } from 'vitest';
import { checkOwnership, mergeMatches } from './cluster-index.js';

describe('checkOwnership', () => {
  it('accepts every shard held exactly once', () => {
    expect(() => checkOwnership([{ url: 'http://a', shards: [0, 2] }, { url: 'http://b', shards: [1, 3] }], 4)).not.toThrow();
  });

  it('names a shard held twice, one held by nobody, and one past the count', () => {
    expect(() => checkOwnership([{ url: 'http://a', shards: [0, 1] }, { url: 'http://b', shards: [1] }], 2)).toThrow('shard 1 is held by both http://a and http://b');
    expect(() => checkOwnership([{ url: 'http://a', shards: [0] }], 3)).toThrow('no shard server holds shards 1, 2');
    expect(() => checkOwnership([{ url: 'http://a', shards: [0, 4] }], 4)).toThrow('shard 4 is not below FACE_SHARDS=4');
    expect(() => checkOwnership([{ url: 'http://a', shards: [] }, { url: 'http://b', shards: [0] }], 1)).toThrow('http://a holds no shard');
  });
});

describe('mergeMatches', () => {
  it('keeps the top n over all servers, best first, ties by id as one index orders them', () => {
    const a = [
      { id: 7, similarity: 0.9 },
      { id: 3, similarity: 0.5 },
    ];
    const b = [
      { id: 2, similarity: 0.9 },
      { id: 9, similarity: 0.7 },
    ];
    expect(mergeMatches([a, b], 3)).toEqual([
      { id: 2, similarity: 0.9 },
      { id: 7, similarity: 0.9 },
      { id: 9, similarity: 0.7 },
    ]);
    expect(mergeMatches([[], []], 5)).toEqual([]);
  });
});
