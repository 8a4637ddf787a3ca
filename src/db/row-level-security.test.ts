/**
 * Row-level security (018-row-level-security.sql), the second wall behind the stores' own tenant
 * predicates: statements with no tenant predicate at all, planted in a transaction bound to one
 * tenant, read and change that tenant's rows alone; outside any binding the pools read none;
 * the named bypass reads all. Every table with a tenant column is found from the catalog, so a
 * new one without its policies fails here.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import type { TenantId } from '../auth.js';
import { CLI_ACTOR } from './audit.js';
import { transaction, TENANT_ROLE, type Sql, type TransactionSql } from './client.js';
import { FaceStore } from './faces.js';
import { GalleryStore } from './galleries.js';
import { HistoryStore } from './history-store.js';
import { PhotoBlobs, PhotoStore } from './photos.js';
import { TenantStore } from './tenants.js';
import { TokenStore } from './tokens.js';

let tdb: TestDatabase;
let dir: string;
let a: TenantId;
let b: TenantId;
/** The tables holding a tenant's rows, with the column naming the tenant, from the catalog. */
let tenantTables: { table: string; column: string }[];

beforeAll(async () => {
  tdb = await freshDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'rls-'));
  const sql = tdb.db.sql;
  const photos = new PhotoStore(sql, new PhotoBlobs(path.join(dir, 'photos')));
  const faces = new FaceStore(sql, photos, { model: 'test' });
  const galleries = new GalleryStore(sql, photos);
  const history = new HistoryStore(sql, { sightings: 3, windowS: 3600 });
  const tenants = new TenantStore(sql, photos);
  const tokens = new TokenStore(sql);
  a = await tenants.create(CLI_ACTOR, 'rls-a');
  b = await tenants.create(CLI_ACTOR, 'rls-b');
  // Rows of both tenants in every tenant table: a face in a gallery, with a person and a sighting
  // (its thumbnail), a token and its audit entry.
  for (const tenant of [a, b]) {
    await galleries.create(tenant, 'shared-name');
    const photo = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), randomBytes(32)]);
    const [face] = (
      await faces.addFaces({ tenant, photo, meta: 'm', galleries: ['shared-name'], faces: [{ box: { x1: 0, y1: 0, x2: 10, y2: 10 }, embedding: Float32Array.of(1, 0, 0, 0) }] })
    ).value;
    await history.events.record({ tenant, camId: 'cam', photoHash: face.photo_hash, photoKept: true, faces: [{ box: { x1: 0, y1: 0, x2: 10, y2: 10 }, thumbnail: photo, matchFaceId: face.id }] });
    await tokens.create(CLI_ACTOR, 'deployment', 'app', {}, tenant === a ? 'rls-a' : 'rls-b');
  }
  tenantTables = (
    await tdb.db.owner<{ table: string; column: string }[]>`
      SELECT c.relname AS table, a.attname AS column
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname IN ('tenant_id', 'id') AND NOT a.attisdropped
      WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
        AND (a.attname = 'tenant_id' OR c.relname = 'tenants')
      ORDER BY 1`
  ).map((r) => ({ table: r.table, column: r.column }));
});

afterAll(async () => {
  await tdb?.drop();
  await rm(dir, { recursive: true, force: true });
});

/** The tenants of the rows of `table` that `sql` reads, each once, lowest first. */
async function tenantsIn(sql: Sql | TransactionSql, { table, column }: { table: string; column: string }): Promise<number[]> {
  // Names from the catalog, quoted: the statement names no tenant, which is the point.
  const rows = await sql.unsafe(`SELECT "${column}"::text AS t FROM "${table}"`);
  return [...new Set(rows.map((r) => Number(r.t)))].sort((x, y) => x - y);
}

describe('row-level security', () => {
  it('binds every table with a tenant column: enabled, forced, with the tenant and bypass policies', async () => {
    expect(tenantTables.map((t) => t.table)).toEqual(
      expect.arrayContaining(['audit_log', 'face_galleries', 'faces', 'galleries', 'persons', 'sighting_thumbnails', 'sightings', 'tenants', 'tokens']),
    );
    const rows = await tdb.db.owner`
      SELECT c.relname AS table, c.relrowsecurity AS enabled, c.relforcerowsecurity AS forced,
        ARRAY(SELECT p.polname::text FROM pg_policy p WHERE p.polrelid = c.oid ORDER BY 1) AS policies
      FROM pg_class c WHERE c.relname IN ${tdb.db.owner(tenantTables.map((t) => t.table))} AND c.relnamespace = current_schema()::regnamespace
      ORDER BY 1`;
    for (const r of rows) expect({ table: r.table, enabled: r.enabled, forced: r.forced, policies: r.policies }).toEqual({ table: r.table, enabled: true, forced: true, policies: ['deployment_rows', 'tenant_rows'] });
    expect(rows).toHaveLength(tenantTables.length);
  });

  it('a planted statement without its tenant predicate reads the bound tenant’s rows only, in every tenant table', async () => {
    for (const table of tenantTables) {
      const everyone = await tenantsIn(tdb.db.owner, table);
      expect(everyone, `${table.table} as the owner`).toEqual(expect.arrayContaining([a, b]));
      for (const tenant of [a, b]) {
        const seen = await transaction(tdb.db.sql, tenant, (tx) => tenantsIn(tx, table));
        expect(seen, `${table.table} bound to tenant ${tenant}`).toEqual([tenant]);
      }
    }
  });

  it('the pools read no tenant’s rows outside a binding, and the named bypass reads every one', async () => {
    const [{ role }] = await tdb.db.sql`SELECT current_user AS role`;
    expect(role).toBe(TENANT_ROLE);
    for (const table of tenantTables) {
      expect(await tenantsIn(tdb.db.sql, table), `${table.table} unbound`).toEqual([]);
      const all = await transaction(tdb.db.sql, 'search index', (tx) => tenantsIn(tx, table));
      expect(all, `${table.table} under the bypass`).toEqual(expect.arrayContaining([a, b]));
    }
  });

  it('planted writes without the predicate change the bound tenant’s rows only, and cannot write another’s', async () => {
    const metaOf = async () => new Map((await tdb.db.owner`SELECT tenant_id, meta FROM faces`).map((r) => [Number(r.tenant_id), r.meta as string]));
    await transaction(tdb.db.sql, a, (tx) => tx`UPDATE faces SET meta = 'changed by a'`);
    expect(await metaOf()).toEqual(new Map([[a, 'changed by a'], [b, 'm']]));
    // Rolled back by the throw: a DELETE of every row, planted, reaches a's rows only.
    const deleted = await transaction(tdb.db.sql, a, async (tx) => {
      const gone = await tx`DELETE FROM face_galleries RETURNING tenant_id`;
      throw Object.assign(new Error('roll back'), { gone: gone.map((r) => Number(r.tenant_id)) });
    }).catch((err: { gone?: number[] }) => err.gone);
    expect(deleted).toEqual([a]);
    await expect(transaction(tdb.db.sql, a, (tx) => tx`INSERT INTO galleries (tenant_id, name) VALUES (${b}, 'planted')`)).rejects.toThrow(/row-level security/);
    await expect(transaction(tdb.db.sql, a, (tx) => tx`UPDATE persons SET tenant_id = ${b}`)).rejects.toThrow(/row-level security/);
  });
});
