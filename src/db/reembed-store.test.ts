import { randomBytes } from 'node:crypto';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { bytesToFloats } from './embedding.js';
import { FaceStore } from './faces.js';
import { PhotoBlobs, PhotoStore } from './photos.js';
import { listMigrations, migrate } from './migrate.js';
import { ReembedStore } from './reembed-store.js';
import { FIRST_TENANT } from '../auth.js';

let tdb: TestDatabase;
let dir: string;
let blobs: PhotoBlobs;
let old: FaceStore;
let reembed: ReembedStore;

beforeAll(async () => {
  tdb = await freshDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'reembed-store-'));
  blobs = new PhotoBlobs(path.join(dir, 'photos'));
  old = new FaceStore(tdb.db.sql, new PhotoStore(tdb.db.sql, blobs), { model: 'old' });
  reembed = new ReembedStore(tdb.db.sql);
});

afterAll(async () => {
  await tdb?.drop();
  await rm(dir, { recursive: true, force: true });
});

beforeEach(async () => {
  await tdb.db.owner`TRUNCATE reembed_failures, face_galleries, faces, photos, photo_gc, face_changes RESTART IDENTITY CASCADE`;
});

const photo = () => Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), randomBytes(32)]);
const box = (i: number) => ({ x1: i, y1: i, x2: i + 10, y2: i + 10 });

/** `n` faces on one photo, embedded by the `old` recogniser (4-d); their ids. */
async function addOld(n: number): Promise<number[]> {
  const faces = Array.from({ length: n }, (_, i) => ({ box: box(i), embedding: Float32Array.of(1, 0, 0, 0) }));
  return (await old.addFaces({ tenant: FIRST_TENANT, photo: photo(), faces, meta: '', galleries: [] })).value.map((f) => f.id);
}

describe('the 004 migration', () => {
  it('marks faces stored before it as faceres and makes new rows name their model', async () => {
    const other = await freshDatabase({ migrate: false });
    const before = await mkdtemp(path.join(os.tmpdir(), 'migrations-'));
    try {
      for (const m of listMigrations().filter((m) => m.version < 4)) await copyFile(m.file, path.join(before, path.basename(m.file)));
      await migrate(other.db.owner, { dir: before });
      const sql = other.db.owner;
      const hash = 'a'.repeat(64);
      await sql`INSERT INTO photos (hash, size, content_type) VALUES (${hash}, 1, 'image/jpeg')`;
      const insert = () => sql`
        INSERT INTO faces (photo_hash, x1, y1, x2, y2, dim, embedding)
        VALUES (${hash}, 0, 0, 1, 1, 1, ${Buffer.alloc(4)})`;
      await insert();
      await migrate(other.db.owner);
      expect((await sql`SELECT model FROM faces`).map((r) => r.model)).toEqual(['faceres']);
      await expect(insert()).rejects.toMatchObject({ code: '23502' });
    } finally {
      await other.drop();
      await rm(before, { recursive: true, force: true });
    }
  });
});

describe('ReembedStore', () => {
  it('finds faces of other recognisers in id order, and counts them', async () => {
    expect(await reembed.anyOther('new')).toBe(false);
    const ids = [...(await addOld(3)), ...(await addOld(2))];
    const fresh = new FaceStore(tdb.db.sql, new PhotoStore(tdb.db.sql, blobs), { model: 'new' });
    await fresh.addFaces({ tenant: FIRST_TENANT, photo: photo(), faces: [{ box: box(0), embedding: Float32Array.of(0, 1) }], meta: '', galleries: [] });
    expect(await reembed.anyOther('new')).toBe(true);
    expect(await reembed.anyOther('old')).toBe(true);
    expect(await reembed.census('new')).toEqual({ from: ['old'], done: 1, pending: 5, failed: 0, total: 6 });
    const first = await reembed.pending('new', 0, 4);
    expect(first.map((f) => f.id)).toEqual(ids.slice(0, 4));
    expect(first[1]).toMatchObject({ box: [1, 1, 11, 11] });
    expect((await reembed.pending('new', ids[3], 4)).map((f) => f.id)).toEqual(ids.slice(4));
  });

  it('replaces embeddings with an upsert in the change log, records failures, and skips both next time', async () => {
    const ids = await addOld(4);
    const [{ position: before }] = await tdb.db.owner`SELECT max(position) AS position FROM face_changes`;
    const written = await reembed.save('new', [
      { id: ids[2], embedding: Float32Array.of(0, 1) },
      { id: ids[0], embedding: Float32Array.of(0.6, 0.8) },
      { id: ids[1], reason: 'IMAGE_CORRUPT: Image could not be decoded' },
    ]);
    expect(written).toMatchObject({ saved: 2, failed: 1 });
    const rows = await tdb.db.owner`SELECT id, model, dim, embedding FROM faces ORDER BY id`;
    expect(rows.map((r) => [Number(r.id), r.model, r.dim])).toEqual([
      [ids[0], 'new', 2],
      [ids[1], 'old', 4],
      [ids[2], 'new', 2],
      [ids[3], 'old', 4],
    ]);
    expect([...bytesToFloats(rows[0].embedding)]).toEqual([Math.fround(0.6), Math.fround(0.8)]);
    const log = await tdb.db.owner`SELECT position, face_id, op FROM face_changes WHERE position > ${before} ORDER BY position`;
    expect(log.map((r) => [Number(r.face_id), r.op])).toEqual([
      [ids[0], 'upsert'],
      [ids[2], 'upsert'],
    ]);
    expect(written.position).toBe(Number(log[1].position));
    const [failure] = await tdb.db.owner`SELECT face_id, model, reason FROM reembed_failures`;
    expect(failure).toMatchObject({ model: 'new', reason: 'IMAGE_CORRUPT: Image could not be decoded' });
    expect(Number(failure.face_id)).toBe(ids[1]);

    expect((await reembed.pending('new', 0, 10)).map((f) => f.id)).toEqual([ids[3]]);
    expect(await reembed.census('new')).toEqual({ from: ['old'], done: 2, pending: 1, failed: 1, total: 4 });
    // Another recogniser tries the failed face afresh.
    expect((await reembed.pending('other', 0, 10)).map((f) => f.id)).toEqual(ids);
  });

  it('leaves faces that were re-embedded or deleted meanwhile alone', async () => {
    const ids = await addOld(3);
    await reembed.save('new', [{ id: ids[0], embedding: Float32Array.of(1, 0) }]);
    await old.deleteFace({ tenant: FIRST_TENANT }, ids[1]);
    const written = await reembed.save('new', [
      { id: ids[0], embedding: Float32Array.of(0, 1) },
      { id: ids[1], reason: 'PHOTO_MISSING: the stored photo file is gone' },
      { id: ids[2], embedding: Float32Array.of(0, 1) },
    ]);
    expect(written).toMatchObject({ saved: 1, failed: 0 });
    const [first] = await tdb.db.owner`SELECT embedding FROM faces WHERE id = ${ids[0]}`;
    expect([...bytesToFloats(first.embedding)]).toEqual([1, 0]);
    expect(await tdb.db.owner`SELECT 1 FROM reembed_failures`).toHaveLength(0);
    expect(await reembed.anyOther('new')).toBe(false);
  });
});
