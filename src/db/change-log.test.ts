import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/helpers/database.js';
import { changesAfter, CHANGE_LOG_CHUNK, lastPosition, logChanges } from './change-log.js';
import { transaction } from './client.js';
import { floatsToBytes } from './embedding.js';

let tdb: TestDatabase;

beforeAll(async () => {
  tdb = await freshDatabase();
});

afterAll(async () => {
  await tdb?.drop();
});

beforeEach(async () => {
  await tdb.db.sql`TRUNCATE face_galleries, faces, photos, face_changes RESTART IDENTITY CASCADE`;
});

describe('logChanges', () => {
  it('logs more ids than one statement can carry, in order, with gap-free positions', async () => {
    // Two parameters per row: 40,000 ids would need 80,000 in one statement, past postgres.js's 65,534.
    const n = 4 * CHANGE_LOG_CHUNK;
    const ids = Array.from({ length: n }, (_, i) => n - i);
    const top = await transaction(tdb.db.sql, (tx) => logChanges(tx, ids, 'delete'));
    expect(top).toBe(n);
    expect(await lastPosition(tdb.db.sql)).toBe(n);
    const [summary] = await tdb.db.sql`
      SELECT count(*)::int AS rows, min(position)::int AS lo, max(position)::int AS hi,
             bool_and(op = 'delete') AS deletes,
             bool_and(face_id = ${n + 1} - position) AS in_order
      FROM face_changes`;
    expect(summary).toEqual({ rows: n, lo: 1, hi: n, deletes: true, in_order: true });
  });

  it('logs nothing for no ids, and nothing survives a rollback', async () => {
    expect(await transaction(tdb.db.sql, (tx) => logChanges(tx, [], 'upsert'))).toBeUndefined();
    await expect(
      transaction(tdb.db.sql, async (tx) => {
        await logChanges(tx, [1, 2, 3], 'upsert');
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect(await lastPosition(tdb.db.sql)).toBe(0);
  });
});

describe('changesAfter', () => {
  it('reads each change against the face as it is now', async () => {
    const sql = tdb.db.sql;
    await sql`INSERT INTO photos (hash, size, content_type) VALUES (${'a'.repeat(64)}, 1, 'image/jpeg')`;
    await sql`INSERT INTO galleries (name) VALUES ('g') ON CONFLICT DO NOTHING`;
    const face = async (model: string) => {
      const [r] = await sql`
        INSERT INTO faces (photo_hash, x1, y1, x2, y2, dim, embedding, model)
        VALUES (${'a'.repeat(64)}, 0, 0, 1, 1, 2, ${floatsToBytes(Float32Array.of(0.5, -1))}, ${model}) RETURNING id`;
      return Number(r.id);
    };
    const current = await face('now');
    const older = await face('before');
    await sql`INSERT INTO face_galleries (face_id, gallery) VALUES (${current}, 'g')`;
    await transaction(sql, async (tx) => {
      await logChanges(tx, [current, older, 999], 'upsert');
      await logChanges(tx, [current], 'galleries');
      await logChanges(tx, [current], 'delete');
    });
    expect(await changesAfter(sql, 0, 10, 'now')).toEqual([
      { position: 1, faceId: current, kind: 'upsert', embedding: Float32Array.of(0.5, -1), galleries: ['g'] },
      { position: 2, faceId: older, kind: 'other-model' },
      { position: 3, faceId: 999, kind: 'gone' },
      { position: 4, faceId: current, kind: 'galleries', galleries: ['g'] },
      { position: 5, faceId: current, kind: 'gone' },
    ]);
    expect((await changesAfter(sql, 3, 1, 'now')).map((c) => c.position)).toEqual([4]);
  });
});
