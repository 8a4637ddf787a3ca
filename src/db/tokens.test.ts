import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { DbTokenVerifier, TokenStore, tokenHash } from './tokens.js';
import { AuditLog, CLI_ACTOR } from './audit.js';
import { listMigrations, migrate } from './migrate.js';
import { TenantStore } from './tenants.js';
import { tenantOf } from '../auth.js';

let tdb: TestDatabase;
let store: TokenStore;
let tenants: TenantStore;

beforeAll(async () => {
  tdb = await freshDatabase();
  store = new TokenStore(tdb.db.sql);
  tenants = new TenantStore(tdb.db.sql);
});

afterAll(async () => {
  await tdb?.drop();
});

describe('token store', () => {
  it('keeps only the SHA-256 of a token', async () => {
    const { id, token } = await store.create(CLI_ACTOR, 'deployment', 'ops');
    expect(token).toMatch(/^fs_[A-Za-z0-9_-]{43}$/);
    const [row] = await tdb.db.owner`SELECT hash FROM tokens WHERE id = ${id}`;
    expect(row.hash).toBe(tokenHash(token));
    const dump = JSON.stringify(await tdb.db.owner`SELECT * FROM tokens`);
    expect(dump).not.toContain(token);
  });

  it('lists tokens with their state and revokes by id', async () => {
    const { id } = await store.create(CLI_ACTOR, 'deployment', 'temp');
    expect((await store.list('deployment')).find((t) => t.id === id)).toMatchObject({ name: 'temp', revoked_at: null });
    expect(await store.revoke(CLI_ACTOR, 'deployment', id)).toBe(true);
    expect(await store.revoke(CLI_ACTOR, 'deployment', id)).toBe(false);
    expect(await store.revoke(CLI_ACTOR, 'deployment', 99_999)).toBe(false);
    expect((await store.list('deployment')).find((t) => t.id === id)?.revoked_at).toMatch(/Z$/);
  });
});

/** True once the verifier refuses (or, with `accepted`, accepts) `token`, within a second: a notice arrives in milliseconds. */
async function refusedSoon(verifier: DbTokenVerifier, token: string, accepted = false): Promise<boolean> {
  for (let i = 0; i < 100; i++) {
    if (((await verifier.verify(token)) !== undefined) === accepted) return true;
    await new Promise((r) => setTimeout(r, 10));
  }
  return false;
}

describe('database token verifier', () => {
  it('accepts active tokens, refuses unknown and revoked ones, and notices revocation at once', async () => {
    const verifier = new DbTokenVerifier(tdb.db.sql, store, { ttlMs: 60_000 });
    try {
      const { id, token } = await store.create(CLI_ACTOR, 'deployment', 'cached');
      expect(await verifier.verify(token)).toMatchObject({ tokenId: id, name: 'cached', tenant: 1, operator: false, deployment: false, access: 'write' });
      expect(await verifier.verify('fs_unknown')).toBeUndefined();
      // A long TTL: only the revocation notice can make the next answer false.
      await store.revoke(CLI_ACTOR, 'deployment', id);
      expect(await refusedSoon(verifier, token)).toBe(true);
    } finally {
      await verifier.close();
    }
  });

  it("answers with the token's tenant, scopes and limits, its tenant's limits under its own", async () => {
    const verifier = new DbTokenVerifier(tdb.db.sql, store, { ttlMs: 60_000 });
    try {
      await tenants.create(CLI_ACTOR, 'shop', { rate_per_s: 5, photos_in_flight: 2 });
      const { id, token } = await store.create(CLI_ACTOR, 'deployment', 'shop-reader', { access: 'read', galleries: ['b', 'a', 'a'], photosInFlight: 1 }, 'shop');
      expect(await verifier.verify(token)).toMatchObject({
        tokenId: id,
        tenant: await tenants.idOf('shop'),
        access: 'read',
        galleries: ['a', 'b'],
        limits: { ratePerS: 5, photosInFlight: 1 },
      });
      await expect(store.create(CLI_ACTOR, 'deployment', 'nowhere', {}, 'no-such-tenant')).rejects.toMatchObject({ code: 'NOT_FOUND' });
      await expect(store.create(CLI_ACTOR, 'deployment', 'bad', { galleries: ['not a name'] })).rejects.toMatchObject({ code: 'BAD_PARAM' });
      // A tenant disabled refuses its tokens at once (the same notice as a revocation), and enabled serves them again.
      await tenants.setDisabled(CLI_ACTOR, 'deployment', 'shop', true);
      expect(await refusedSoon(verifier, token)).toBe(true);
      await tenants.setDisabled(CLI_ACTOR, 'deployment', 'shop', false);
      expect(await refusedSoon(verifier, token, true)).toBe(true);
      // Deleted: its tokens go with it.
      await tenants.delete(CLI_ACTOR, 'shop');
      expect(await refusedSoon(verifier, token)).toBe(true);
      expect((await store.list('deployment')).some((t) => t.id === id)).toBe(false);
      const actions = (await new AuditLog(tdb.db.sql).entries('deployment', 10)).map((e) => `${e.action} ${e.target}`);
      expect(actions.slice(0, 4)).toEqual(['tenant.delete shop', 'tenant.enable shop', 'tenant.disable shop', `token.create ${id}`]);
    } finally {
      await verifier.close();
    }
  });

  it('keeps valid tokens cached through a flood of random ones', async () => {
    // Counts the lookups that reach the database; the store itself is the real one.
    class CountingStore extends TokenStore {
      lookups = 0;
      override async principalOf(token: string) {
        this.lookups++;
        return super.principalOf(token);
      }
    }
    const counting = new CountingStore(tdb.db.sql);
    const verifier = new DbTokenVerifier(tdb.db.sql, counting, { ttlMs: 60_000, maxEntries: 50, maxNegativeEntries: 100 });
    try {
      const { token } = await store.create(CLI_ACTOR, 'deployment', 'flooded');
      expect(await verifier.verify(token)).toBeDefined();
      expect(counting.lookups).toBe(1);
      // Ten times the refusal cache's size in random tokens, each a database lookup of its own.
      for (let i = 0; i < 1000; i++) expect(await verifier.verify(`fs_random_${i}_${Math.random()}`)).toBeUndefined();
      expect(counting.lookups).toBe(1001);
      expect(verifier.cached()).toEqual({ accepted: 1, refused: 100 });
      // The valid token is still answered from the cache: no further lookup.
      expect(await verifier.verify(token)).toBeDefined();
      expect(counting.lookups).toBe(1001);
      // A refused token repeated within the TTL is answered from its own cache too.
      expect(await verifier.verify('fs_random_999_x')).toBeUndefined();
      expect(await verifier.verify('fs_random_999_x')).toBeUndefined();
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

describe('operators before and after tenant operators (016-operator-reach.sql)', () => {
  it('makes every operator token of before a deployment operator, and files the audit under its tenants', async () => {
    const old = await freshDatabase({ migrate: false });
    const dir = await mkdtemp(path.join(os.tmpdir(), 'operator-reach-'));
    try {
      for (const m of listMigrations().filter((m) => m.version < 16)) await copyFile(m.file, path.join(dir, path.basename(m.file)));
      await migrate(old.db.owner, { dir });
      const sql = old.db.owner;
      await sql`INSERT INTO tenants (name) VALUES ('shop')`;
      await sql`
        INSERT INTO tokens (name, hash, operator, tenant_id) VALUES
          ('ops', ${tokenHash('a')}, true, 1), ('app', ${tokenHash('b')}, false, 1), ('shop-ops', ${tokenHash('c')}, true, 2)`;
      await sql`INSERT INTO audit_log (actor, action, target, detail) VALUES ('cli', 'tenant.create', 'shop', '{}'), ('cli', 'shard.offline', '0', '{}')`;
      expect(await migrate(sql)).toEqual([16, 17, 18]);
      const rows = await sql`SELECT name, operator, deployment FROM tokens ORDER BY id`;
      expect(rows.map((r) => [r.name, r.operator, r.deployment])).toEqual([
        ['ops', true, true],
        ['app', false, false],
        ['shop-ops', true, true],
      ]);
      const audit = await new AuditLog(sql).entries('deployment', 10);
      expect(audit.map((e) => [e.action, e.tenant_id])).toEqual([
        ['shard.offline', null],
        ['tenant.create', 2],
      ]);
      // A tenant's operator reads its tenant's entries alone.
      expect((await new AuditLog(sql).entries({ tenant: tenantOf(2) }, 10)).map((e) => e.action)).toEqual(['tenant.create']);
      await expect(sql`INSERT INTO tokens (name, hash, operator, deployment, tenant_id) VALUES ('odd', ${tokenHash('d')}, false, true, 1)`).rejects.toMatchObject({
        code: '23514',
      });
    } finally {
      await old.drop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
