import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { changesAfter, CHANGE_LOG_CHUNK, lastPosition, logChanges, scanFaces, type FacePage } from './change-log.js';
import { FIRST_TENANT } from '../auth.js';
import { transaction } from './client.js';
import { floatsToBytes } from './embedding.js';
import { shardOfFace } from './layout.js';

let tdb: TestDatabase;

beforeAll(async () => {
  tdb = await freshDatabase();
});

afterAll(async () => {
  await tdb?.drop();
});

beforeEach(async () => {
  await tdb.db.owner`TRUNCATE face_galleries, faces, photos, face_changes RESTART IDENTITY CASCADE`;
  await tdb.db.owner`DELETE FROM search_layout`;
});

const recordLayout = (shards: number) => tdb.db.owner`INSERT INTO search_layout (shards, rule) VALUES (${shards}, 'mix64-mod')`;

/** Stores a face embedded by `model` (ids count from 1 in each test); resolves to its id. */
async function storeFace(model: string, embedding = Float32Array.of(0.5, -1)): Promise<number> {
  const sql = tdb.db.owner;
  await sql`INSERT INTO photos (hash, size, content_type) VALUES (${'a'.repeat(64)}, 1, 'image/jpeg') ON CONFLICT DO NOTHING`;
  const [r] = await sql`
    INSERT INTO faces (tenant_id, photo_hash, x1, y1, x2, y2, dim, embedding, model)
    VALUES (1, ${'a'.repeat(64)}, 0, 0, 1, 1, ${embedding.length}, ${floatsToBytes(embedding)}, ${model}) RETURNING id`;
  return Number(r.id);
}

describe('logChanges', () => {
  it('logs more ids than one statement can carry, in order, with gap-free positions', async () => {
    // Three parameters per row: 40,000 ids would need 120,000 in one statement, past postgres.js's 65,534.
    const n = 4 * CHANGE_LOG_CHUNK;
    const ids = Array.from({ length: n }, (_, i) => n - i);
    // With a layout, so each row also carries its shard: three parameters.
    await recordLayout(4);
    const top = await transaction(tdb.db.sql, FIRST_TENANT, (tx) => logChanges(tx, ids, 'delete'));
    expect(top).toBe(n);
    expect(await lastPosition(tdb.db.sql)).toBe(n);
    const [summary] = await tdb.db.owner`
      SELECT count(*)::int AS rows, min(position)::int AS lo, max(position)::int AS hi,
             bool_and(op = 'delete') AS deletes,
             bool_and(face_id = ${n + 1} - position) AS in_order,
             count(DISTINCT shard)::int AS shards
      FROM face_changes`;
    expect(summary).toEqual({ rows: n, lo: 1, hi: n, deletes: true, in_order: true, shards: 4 });
  });

  it('logs nothing for no ids, and nothing survives a rollback', async () => {
    expect(await transaction(tdb.db.sql, FIRST_TENANT, (tx) => logChanges(tx, [], 'upsert'))).toBeUndefined();
    await expect(
      transaction(tdb.db.sql, FIRST_TENANT, async (tx) => {
        await logChanges(tx, [1, 2, 3], 'upsert');
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect(await lastPosition(tdb.db.sql)).toBe(0);
  });

  it("tags each row with its face's shard by the recorded layout, and with none before there is one", async () => {
    const sql = tdb.db.owner;
    await transaction(sql, FIRST_TENANT, (tx) => logChanges(tx, [5, 6], 'upsert'));
    await recordLayout(4);
    await transaction(sql, FIRST_TENANT, (tx) => logChanges(tx, [0, 1, 2, 3, 4, 5, 6, 7], 'upsert'));
    const rows = await sql`SELECT face_id::int, shard FROM face_changes ORDER BY position`;
    // The routing rule's pinned values (crates/index/src/route.rs): ids 0..7 over 4 shards.
    expect(rows.map((r) => r.shard)).toEqual([null, null, 3, 1, 2, 1, 2, 2, 0, 3]);
  });
});

describe('changesAfter', () => {
  it('reads each change against the face as it is now', async () => {
    const sql = tdb.db.owner;
    await sql`INSERT INTO photos (hash, size, content_type) VALUES (${'a'.repeat(64)}, 1, 'image/jpeg')`;
    await sql`INSERT INTO galleries (tenant_id, name) VALUES (1, 'g') ON CONFLICT DO NOTHING`;
    const face = async (model: string) => {
      const [r] = await sql`
        INSERT INTO faces (tenant_id, photo_hash, x1, y1, x2, y2, dim, embedding, model)
        VALUES (1, ${'a'.repeat(64)}, 0, 0, 1, 1, 2, ${floatsToBytes(Float32Array.of(0.5, -1))}, ${model}) RETURNING id`;
      return Number(r.id);
    };
    const current = await face('now');
    const older = await face('before');
    await sql`INSERT INTO face_galleries (face_id, tenant_id, gallery) VALUES (${current}, 1, 'g')`;
    await transaction(sql, FIRST_TENANT, async (tx) => {
      await logChanges(tx, [current, older, 999], 'upsert');
      await logChanges(tx, [current], 'galleries');
      await logChanges(tx, [current], 'delete');
    });
    expect(await changesAfter(sql, 0, 10, 'now')).toEqual([
      // Scopes: the tenant's, and the tenant's gallery g.
      { position: 1, faceId: current, kind: 'upsert', embedding: Float32Array.of(0.5, -1), galleries: ['t1', 't1/g'] },
      { position: 2, faceId: older, kind: 'other-model' },
      { position: 3, faceId: 999, kind: 'gone' },
      { position: 4, faceId: current, kind: 'galleries', galleries: ['t1', 't1/g'] },
      { position: 5, faceId: current, kind: 'gone' },
    ]);
    expect((await changesAfter(sql, 3, 1, 'now')).map((c) => c.position)).toEqual([4]);
  });
});

describe('changesAfter for some shards', () => {
  /**
   * Positions 1-2: faces 1 and 2 logged before the layout (no shard). Positions 3-10: faces 0..7 over
   * 4 shards, in shards 3, 1, 2, 1, 2, 2, 0, 3. Face 1 is stored (shard 1), the others are gone.
   */
  async function logTwoEras() {
    const sql = tdb.db.owner;
    const stored = await storeFace('now');
    await transaction(sql, FIRST_TENANT, (tx) => logChanges(tx, [1, 2], 'upsert'));
    await recordLayout(4);
    await transaction(sql, FIRST_TENANT, (tx) => logChanges(tx, [0, 1, 2, 3, 4, 5, 6, 7], 'upsert'));
    return stored;
  }

  it('reads the rows of those shards and the rows without one, in position order, then the end of the log', async () => {
    const sql = tdb.db.owner;
    const stored = await logTwoEras();
    expect(stored).toBe(1);
    const upsert = { kind: 'upsert', embedding: Float32Array.of(0.5, -1), galleries: ['t1'] };
    expect(await changesAfter(sql, 0, 100, 'now', [1, 2])).toEqual([
      { position: 1, faceId: 1, ...upsert },
      { position: 2, faceId: 2, kind: 'gone' },
      { position: 4, faceId: 1, ...upsert },
      { position: 5, faceId: 2, kind: 'gone' },
      { position: 6, faceId: 3, kind: 'gone' },
      { position: 7, faceId: 4, kind: 'gone' },
      { position: 8, faceId: 5, kind: 'gone' },
      // Face 7 is in shard 3: read for its position only, the end of the log.
      { position: 10, faceId: 7, kind: 'elsewhere' },
    ]);
    // Shards 0 and 3 own faces 6, then 0 and 7; the newest row is theirs, so nothing follows it.
    expect((await changesAfter(sql, 0, 100, 'now', [0, 3])).map((c) => [c.position, c.faceId, c.kind])).toEqual([
      [1, 1, 'upsert'],
      [2, 2, 'gone'],
      [3, 0, 'gone'],
      [9, 6, 'gone'],
      [10, 7, 'gone'],
    ]);
    // Without shards: every row, as before the log had shards.
    expect((await changesAfter(sql, 0, 100, 'now')).map((c) => c.position)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });

  it('stops at its own last row when the page is full, and says nothing once at the end', async () => {
    const sql = tdb.db.owner;
    await logTwoEras();
    expect((await changesAfter(sql, 0, 3, 'now', [1, 2])).map((c) => [c.position, c.kind])).toEqual([
      [1, 'upsert'],
      [2, 'gone'],
      [4, 'upsert'],
    ]);
    // Nothing of shards 1 and 2 after position 8: only where the log ends.
    expect(await changesAfter(sql, 8, 100, 'now', [1, 2])).toEqual([{ position: 10, faceId: 7, kind: 'elsewhere' }]);
    expect(await changesAfter(sql, 10, 100, 'now', [1, 2])).toEqual([]);
    await sql`TRUNCATE face_changes`;
    expect(await changesAfter(sql, 10, 100, 'now', [1, 2])).toEqual([]);
  });
});

describe('scanFaces', () => {
  it('reads every face of the recogniser, or only those of the shards asked for', async () => {
    const sql = tdb.db.owner;
    const ids: number[] = [];
    for (let i = 1; i <= 20; i++) ids.push(await storeFace('now', Float32Array.of(i, -i)));
    await storeFace('before');
    await storeFace('now', Float32Array.of(1, 2, 3));
    await recordLayout(4);
    await transaction(sql, FIRST_TENANT, (tx) => logChanges(tx, ids, 'upsert'));
    const scan = async (shards?: { count: number; only: number[] }) => {
      const pages: FacePage[] = [];
      const position = await scanFaces(sql, 'now', 2, 3, async (page) => void pages.push(page), shards);
      expect(position).toBe(20);
      const scanned = pages.flatMap((p) => [...p.ids]);
      pages.forEach((p) => p.ids.forEach((id, k) => expect([p.vectors[2 * k], p.vectors[2 * k + 1]]).toEqual([id, -id])));
      return scanned;
    };
    expect(await scan()).toEqual(ids);
    const mine = ids.filter((id) => [0, 3].includes(shardOfFace(id, 4)));
    expect(mine.length).toBeGreaterThan(0);
    expect(mine.length).toBeLessThan(ids.length);
    expect(await scan({ count: 4, only: [0, 3] })).toEqual(mine);
  });
});
