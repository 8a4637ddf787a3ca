import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { SHARD_RULE } from '../db/layout.js';
import { searchScope } from '../db/tenants.js';
import { createLogger } from '../log.js';
import { checkOwnership, ClusterIndex, mergeMatches } from './cluster-index.js';
import { FIRST_TENANT, tenantOf } from '../auth.js';

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

describe('faces searched across servers', () => {
  /** A shard server holding shard 0 of 1 with `size` faces; `faces` is what its search answers say (absent: a server older than the count). */
  async function server(size: number, faces: number | undefined, searches = { refused: false, asked: 0 }): Promise<http.Server> {
    const shards = [{ shard: 0, state: 'live', size, position: 0, pending: 0, memoryBytes: 0 }];
    const served = { position: 0, behind_ms: 0, shards };
    const srv = http.createServer((req, res) => {
      const state = req.url?.startsWith('/v0/shard/state');
      if (!state) searches.asked++;
      const body = state
        ? { ...served, shard_count: 1, rule: SHARD_RULE, recognizer: 'sface', dims: 2, held: [0] }
        : searches.refused
          ? { code: 400, reason: 'tenant: expected a number', error: 'BAD_PARAM', param: 'tenant' }
          : { ...served, results: [{ matches: [{ id: 1, similarity: 0.5 }], missing: [], ...(faces === undefined ? {} : { faces }) }] };
      req.resume();
      req.on('end', () => res.writeHead(!state && searches.refused ? 400 : 200, { 'Content-Type': 'application/json' }).end(JSON.stringify(body)));
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    return srv;
  }

  function start(srv: http.Server): Promise<ClusterIndex> {
    const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
    return ClusterIndex.start({
      servers: [{ url, shards: [0] }],
      shardCount: 1,
      rule: SHARD_RULE,
      recognizer: 'sface',
      dims: 2,
      token: 't',
      deadlineMs: 2000,
      maxBehindMs: 1000,
      log: createLogger('silent'),
      pollMs: 60_000,
    });
  }

  async function searched(srv: http.Server): Promise<number> {
    const cluster = await start(srv);
    try {
      const [r] = await cluster.searchBatch(new Float32Array([1, 0]), 1, searchScope(FIRST_TENANT, 'staff'));
      return r.faces;
    } finally {
      cluster.close();
      await new Promise((done) => srv.close(done));
    }
  }

  it("takes each server's count, and its shard sizes from a server that does not send one", async () => {
    expect(await searched(await server(500, 40))).toBe(40);
    // The gallery's 40 are not known: the whole shard stands in, which errs towards naming nobody.
    expect(await searched(await server(500, undefined))).toBe(500);
  });

  it('keeps a server that refused a search (4xx) in service: only that search goes without it', async () => {
    const searches = { refused: true, asked: 0 };
    const srv = await server(10, 10, searches);
    const cluster = await start(srv);
    try {
      const query = new Float32Array([1, 0]);
      const [refused] = await cluster.searchBatch(query, 1, searchScope(FIRST_TENANT));
      expect({ live: refused.live, missing: refused.missing, matches: refused.matches }).toEqual({ live: 0, missing: [0], matches: [] });
      expect(cluster.servers().live).toBe(1);
      // Asked again at once, with no state poll in between (the poll is a minute away).
      searches.refused = false;
      const [next] = await cluster.searchBatch(query, 1, searchScope(tenantOf(2)));
      expect({ live: next.live, asked: searches.asked }).toEqual({ live: 1, asked: 2 });
    } finally {
      cluster.close();
      await new Promise((done) => srv.close(done));
    }
  });
});
