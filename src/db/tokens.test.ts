import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { DbTokenVerifier, TokenStore, tokenHash } from './tokens.js';

let tdb: TestDatabase;
let store: TokenStore;

beforeAll(async () => {
  tdb = await freshDatabase();
  store = new TokenStore(tdb.db.sql);
});

afterAll(async () => {
  await tdb?.drop();
});

describe('token store', () => {
  it('keeps only the SHA-256 of a token', async () => {
    const { id, token } = await store.create('ops');
    expect(token).toMatch(/^fs_[A-Za-z0-9_-]{43}$/);
    const [row] = await tdb.db.sql`SELECT hash FROM tokens WHERE id = ${id}`;
    expect(row.hash).toBe(tokenHash(token));
    const dump = JSON.stringify(await tdb.db.sql`SELECT * FROM tokens`);
    expect(dump).not.toContain(token);
  });

  it('lists tokens with their state and revokes by id', async () => {
    const { id } = await store.create('temp');
    expect((await store.list()).find((t) => t.id === id)).toMatchObject({ name: 'temp', revoked_at: null });
    expect(await store.revoke(id)).toBe(true);
    expect(await store.revoke(id)).toBe(false);
    expect(await store.revoke(99_999)).toBe(false);
    expect((await store.list()).find((t) => t.id === id)?.revoked_at).toMatch(/Z$/);
  });
});

describe('database token verifier', () => {
  it('accepts active tokens, refuses unknown and revoked ones, and notices revocation at once', async () => {
    const verifier = new DbTokenVerifier(tdb.db.sql, store, { ttlMs: 60_000 });
    try {
      const { id, token } = await store.create('cached');
      expect(await verifier.verify(token)).toBe(true);
      expect(await verifier.verify('fs_unknown')).toBe(false);
      // A long TTL: only the revocation notice can make the next answer false.
      await store.revoke(id);
      let ok = true;
      for (let i = 0; i < 100 && ok; i++) {
        ok = await verifier.verify(token);
        if (ok) await new Promise((r) => setTimeout(r, 10));
      }
      expect(ok).toBe(false);
    } finally {
      await verifier.close();
    }
  });

  it('keeps valid tokens cached through a flood of random ones', async () => {
    // Counts the lookups that reach the database; the store itself is the real one.
    class CountingStore extends TokenStore {
      lookups = 0;
      override async isActive(token: string): Promise<boolean> {
        this.lookups++;
        return super.isActive(token);
      }
    }
    const counting = new CountingStore(tdb.db.sql);
    const verifier = new DbTokenVerifier(tdb.db.sql, counting, { ttlMs: 60_000, maxEntries: 50, maxNegativeEntries: 100 });
    try {
      const { token } = await store.create('flooded');
      expect(await verifier.verify(token)).toBe(true);
      expect(counting.lookups).toBe(1);
      // Ten times the refusal cache's size in random tokens, each a database lookup of its own.
      for (let i = 0; i < 1000; i++) expect(await verifier.verify(`fs_random_${i}_${Math.random()}`)).toBe(false);
      expect(counting.lookups).toBe(1001);
      expect(verifier.cached()).toEqual({ accepted: 1, refused: 100 });
      // The valid token is still answered from the cache: no further lookup.
      expect(await verifier.verify(token)).toBe(true);
      expect(counting.lookups).toBe(1001);
      // A refused token repeated within the TTL is answered from its own cache too.
      expect(await verifier.verify('fs_random_999_x')).toBe(false);
      expect(await verifier.verify('fs_random_999_x')).toBe(false);
      expect(counting.lookups).toBe(1002);
    } finally {
      await verifier.close();
    }
  });

  it('answers 503 rather than 401 when the database is unreachable', async () => {
    const broken = await freshDatabase();
    const verifier = new DbTokenVerifier(broken.db.sql);
    await broken.db.close(0);
    await expect(verifier.verify('fs_whatever')).rejects.toMatchObject({ code: 'SERVICE_UNAVAILABLE', retryAfterS: 1 });
    await broken.drop();
  });
});
