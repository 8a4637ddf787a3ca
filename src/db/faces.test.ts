import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile, mkdir, utimes } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { FIRST_TENANT } from '../auth.js';
import { DomainError } from '../errors.js';
import { CLI_ACTOR } from './audit.js';
import { onPool } from './client.js';
import { bytesToFloats } from './embedding.js';
import { FaceStore, type AddFacesInput, type FaceUpdate, type Listing, type NewFace } from './faces.js';
import { GalleryStore } from './galleries.js';
import { PhotoBlobs, PhotoStore, sha256Hex } from './photos.js';

let tdb: TestDatabase;
let dir: string;
let blobs: PhotoBlobs;
let photos: PhotoStore;
let store: FaceStore;
let galleries: GalleryStore;

beforeAll(async () => {
  tdb = await freshDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'face-store-'));
  blobs = new PhotoBlobs(path.join(dir, 'photos'));
  photos = new PhotoStore(tdb.db.sql, blobs);
  store = new FaceStore(tdb.db.sql, photos, { model: 'test', reads: onPool(tdb.db.stream) });
  galleries = new GalleryStore(tdb.db.sql, photos);
});

// The writes as their callers mostly read them: what was written, and whether anything was.
// Every call as the first tenant's; tenants.test.ts holds what crosses tenants.
const T = { tenant: FIRST_TENANT };
const add = async (input: Omit<AddFacesInput, 'tenant'>) => (await store.addFaces({ tenant: FIRST_TENANT, ...input })).value;
const update = async (id: number, u: FaceUpdate) => (await store.updateFace(T, id, u))?.value;
const del = async (id: number) => (await store.deleteFace(T, id)) !== undefined;
const dropGallery = async (name: string) => (await galleries.delete(FIRST_TENANT, name, CLI_ACTOR)) !== undefined;

afterAll(async () => {
  await tdb?.drop();
  await rm(dir, { recursive: true, force: true });
});

beforeEach(async () => {
  const sql = tdb.db.owner;
  await sql`TRUNCATE face_galleries, faces, photos, photo_gc RESTART IDENTITY CASCADE`;
  await sql`DELETE FROM galleries WHERE name <> 'default'`;
  await rm(blobs.root, { recursive: true, force: true });
});

/** Bytes that sniff as JPEG and hash uniquely. */
const photo = () => Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), randomBytes(64)]);

const face = (seed = 1, dim = 4): NewFace => ({
  box: { x1: seed, y1: seed + 1, x2: seed + 10, y2: seed + 11 },
  embedding: Float32Array.from({ length: dim }, (_, i) => (seed + i) / 10),
});

async function drain<T>(listing: Listing<T>) {
  const items: T[] = [];
  for await (const batch of listing.batches) items.push(...batch);
  return { items, links: await listing.links() };
}

/** Every cross-table invariant of the store at once. */
async function expectConsistent() {
  const sql = tdb.db.owner;
  const [orphanPhotos] = await sql`SELECT count(*)::int AS n FROM photos p WHERE NOT EXISTS (SELECT 1 FROM faces f WHERE f.photo_hash = p.hash)`;
  expect(orphanPhotos.n).toBe(0);
  const [queued] = await sql`SELECT count(*)::int AS n FROM photo_gc`;
  expect(queued.n).toBe(0);
  const rows = (await sql`SELECT hash FROM photos ORDER BY hash`).map((r) => r.hash as string);
  const files: string[] = [];
  for await (const e of blobs.walk()) {
    expect(e.temporary).toBe(false);
    files.push(e.hash);
  }
  expect(files.sort()).toEqual(rows);
}

describe('adding faces', () => {
  it('stores faces, memberships and the photo in one go', async () => {
    await galleries.create(FIRST_TENANT, 'staff');
    const bytes = photo();
    const out = await add({ photo: bytes, faces: [face(1), face(50)], meta: 'alice', galleries: ['staff', 'default', 'staff'] });
    expect(out.map((f) => f.id)).toEqual([1, 2]);
    expect(out[0]).toMatchObject({ meta: 'alice', photo: null, photo_hash: sha256Hex(bytes), x1: 1, y1: 2, x2: 11, y2: 12, galleries: ['default', 'staff'] });
    expect(out[0].timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/);
    expect(Math.abs(Date.parse(`${out[0].timestamp}Z`) - Date.now())).toBeLessThan(60_000);
    expect(await blobs.read(sha256Hex(bytes))).toEqual(bytes);
    const [p] = await tdb.db.owner`SELECT size, content_type FROM photos`;
    expect(p).toEqual({ size: bytes.length, content_type: 'image/jpeg' });
    const [e] = await tdb.db.owner`SELECT dim, embedding FROM faces WHERE id = 2`;
    expect(e.dim).toBe(4);
    expect(Array.from(bytesToFloats(e.embedding))).toEqual(Array.from(face(50).embedding));
    await expectConsistent();
  });

  it('keeps the URL a photo came from and the camera', async () => {
    const [f] = await add({
      photo: photo(),
      photoUrl: 'https://example.com/a.jpg',
      faces: [face()],
      meta: '',
      galleries: [],
      camId: '123e4567-e89b-12d3-a456-426614174000',
    });
    expect(f.photo).toBe('https://example.com/a.jpg');
    const [row] = await tdb.db.owner`SELECT cam_id FROM faces`;
    expect(row.cam_id).toBe('123e4567-e89b-12d3-a456-426614174000');
  });

  it('stores nothing when a gallery is unknown', async () => {
    const err = await add({ photo: photo(), faces: [face()], meta: 'x', galleries: ['nope', 'zilch'] }).catch((e) => e);
    expect(err).toBeInstanceOf(DomainError);
    expect(err.code).toBe('NOT_FOUND');
    expect(err.message).toContain('nope');
    const [n] = await tdb.db.owner`SELECT (SELECT count(*) FROM faces)::int AS faces, (SELECT count(*) FROM photos)::int AS photos`;
    expect(n).toEqual({ faces: 0, photos: 0 });
    await expectConsistent();
  });

  it('shares one photo row and blob between adds of the same photo', async () => {
    const bytes = photo();
    await add({ photo: bytes, faces: [face(1)], meta: 'a', galleries: [] });
    await add({ photo: bytes, faces: [face(2)], meta: 'b', galleries: [] });
    const [n] = await tdb.db.owner`SELECT count(*)::int AS n FROM photos`;
    expect(n.n).toBe(1);
    await expectConsistent();
  });
});

describe('updating a face', () => {
  it('changes meta, person and galleries; default always stays', async () => {
    for (const g of ['a', 'b', 'c']) await galleries.create(FIRST_TENANT, g);
    const [f] = await add({ photo: photo(), faces: [face()], meta: 'old', galleries: ['a'] });
    let u = await update(f.id, { meta: 'new', personId: 42, galleries: { add: ['b'] } });
    expect(u).toMatchObject({ meta: 'new', galleries: ['default', 'a', 'b'] });
    const [row] = await tdb.db.owner`SELECT person_id FROM faces WHERE id = ${f.id}`;
    expect(Number(row.person_id)).toBe(42);
    u = await update(f.id, { galleries: { del: ['a', 'default'] } });
    expect(u?.galleries).toEqual(['default', 'b']);
    u = await update(f.id, { galleries: { set: ['c'] } });
    expect(u?.galleries).toEqual(['default', 'c']);
    u = await update(f.id, { galleries: { set: [] } });
    expect(u?.galleries).toEqual(['default']);
    u = await update(f.id, { personId: null });
    const [cleared] = await tdb.db.owner`SELECT person_id FROM faces WHERE id = ${f.id}`;
    expect(cleared.person_id).toBeNull();
  });

  it('rejects unknown galleries without changing anything, and reports unknown faces', async () => {
    await galleries.create(FIRST_TENANT, 'a');
    const [f] = await add({ photo: photo(), faces: [face()], meta: 'm', galleries: ['a'] });
    const err = await update(f.id, { meta: 'changed', galleries: { set: ['ghost'] } }).catch((e) => e);
    expect(err.code).toBe('NOT_FOUND');
    expect(err.message).toContain('ghost');
    expect(await store.getFace(T, f.id)).toMatchObject({ meta: 'm', galleries: ['default', 'a'] });
    expect(await update(9999, { meta: 'x' })).toBeUndefined();
  });
});

describe('deleting', () => {
  it('removes the photo row and blob with the last face of a photo', async () => {
    const bytes = photo();
    const hash = sha256Hex(bytes);
    const [a, b] = await add({ photo: bytes, faces: [face(1), face(2)], meta: '', galleries: [] });
    expect(await del(a.id)).toBe(true);
    expect(await blobs.exists(hash)).toBe(true);
    expect(await photos.info(hash)).toBeDefined();
    expect(await del(b.id)).toBe(true);
    expect(await blobs.exists(hash)).toBe(false);
    expect(await photos.info(hash)).toBeUndefined();
    expect(await del(b.id)).toBe(false);
    await expectConsistent();
  });

  it('deletes a gallery with its faces and their unused photos, and nothing else', async () => {
    await galleries.create(FIRST_TENANT, 'doomed');
    await galleries.create(FIRST_TENANT, 'kept');
    const shared = photo();
    const [inDoomed] = await add({ photo: shared, faces: [face(1)], meta: 'a', galleries: ['doomed'] });
    const [outside] = await add({ photo: shared, faces: [face(2)], meta: 'b', galleries: ['kept'] });
    const only = photo();
    await add({ photo: only, faces: [face(3), face(4)], meta: 'c', galleries: ['doomed', 'kept'] });
    expect(await dropGallery('doomed')).toBe(true);
    expect(await store.getFace(T, inDoomed.id)).toBeUndefined();
    expect(await store.getFace(T, outside.id)).toMatchObject({ galleries: ['default', 'kept'] });
    expect(await blobs.exists(sha256Hex(shared))).toBe(true);
    expect(await blobs.exists(sha256Hex(only))).toBe(false);
    expect(await galleries.list(FIRST_TENANT)).toEqual(['default', 'kept']);
    expect(await dropGallery('doomed')).toBe(false);
    await expectConsistent();
  });
});

describe('galleries', () => {
  it('lists default first and refuses duplicates', async () => {
    expect(await galleries.create(FIRST_TENANT, 'zeta')).toBe(true);
    expect(await galleries.create(FIRST_TENANT, 'Alpha')).toBe(true);
    expect(await galleries.create(FIRST_TENANT, 'zeta')).toBe(false);
    expect(await galleries.list(FIRST_TENANT)).toEqual(['default', 'Alpha', 'zeta']);
  });
});

describe('listings', () => {
  async function seed() {
    await galleries.create(FIRST_TENANT, 'g');
    // ids 1..7; metas: odd ids "odd", even ids "even"; ids 2, 3, 6 in g
    for (let i = 1; i <= 7; i++) {
      await add({ photo: photo(), faces: [face(i)], meta: i % 2 ? 'odd' : 'even', galleries: [2, 3, 6].includes(i) ? ['g'] : [] });
    }
  }

  it('lists everything newest first without a limit, with no page links', async () => {
    await seed();
    const { items, links } = await drain(await store.listFaces(T, {}, {}, 2));
    expect(items.map((f) => f.id)).toEqual([7, 6, 5, 4, 3, 2, 1]);
    expect(links).toEqual({});
  });

  it('pages forward with max_id and back with min_id', async () => {
    await seed();
    const p1 = await drain(await store.listFaces(T, {}, { limit: 3 }));
    expect(p1.items.map((f) => f.id)).toEqual([7, 6, 5]);
    expect(p1.links).toEqual({ nextMaxId: 5 });
    const p2 = await drain(await store.listFaces(T, {}, { limit: 3, maxId: 5 }));
    expect(p2.items.map((f) => f.id)).toEqual([4, 3, 2]);
    expect(p2.links).toEqual({ nextMaxId: 2, prevMinId: 4 });
    const p3 = await drain(await store.listFaces(T, {}, { limit: 3, maxId: 2 }));
    expect(p3.items.map((f) => f.id)).toEqual([1]);
    expect(p3.links).toEqual({ prevMinId: 1 });
    const back = await drain(await store.listFaces(T, {}, { limit: 3, minId: 1 }));
    expect(back.items.map((f) => f.id)).toEqual([4, 3, 2]);
    const back2 = await drain(await store.listFaces(T, {}, { limit: 3, minId: 4 }));
    expect(back2.items.map((f) => f.id)).toEqual([7, 6, 5]);
    expect(back2.links).toEqual({ nextMaxId: 5 });
  });

  it('filters by meta and by gallery, and 404s an unknown gallery', async () => {
    await seed();
    expect((await drain(await store.listFaces(T, { meta: 'even' }, {}))).items.map((f) => f.id)).toEqual([6, 4, 2]);
    expect((await drain(await store.listFaces(T, { meta: 'EVEN' }, {}))).items).toEqual([]);
    expect((await drain(await store.listFaces(T, { gallery: 'g' }, {}))).items.map((f) => f.id)).toEqual([6, 3, 2]);
    expect((await drain(await store.listFaces(T, { gallery: 'default' }, {}))).items).toHaveLength(7);
    expect((await drain(await store.listFaces(T, { gallery: 'g', meta: 'odd' }, {}))).items.map((f) => f.id)).toEqual([3]);
    const g = await drain(await store.listFaces(T, { gallery: 'g' }, { limit: 2 }));
    expect(g.items.map((f) => f.id)).toEqual([6, 3]);
    expect(g.links).toEqual({ nextMaxId: 3 });
    await expect(store.listFaces(T, { gallery: 'nope' }, {})).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });

  it('summarises metas by their first face, overall and per gallery', async () => {
    await seed();
    const all = await drain(await store.listMeta(T, {}, {}));
    expect(all.items.map((m) => [m.meta, m.count, m.face.id])).toEqual([
      ['even', 3, 2],
      ['odd', 4, 1],
    ]);
    const inG = await drain(await store.listMeta(T, { gallery: 'g' }, {}));
    expect(inG.items.map((m) => [m.meta, m.count, m.face.id])).toEqual([
      ['odd', 1, 3],
      ['even', 2, 2],
    ]);
    const paged = await drain(await store.listMeta(T, {}, { limit: 1 }));
    expect(paged.items.map((m) => m.meta)).toEqual(['even']);
    expect(paged.links).toEqual({ nextMaxId: 2 });
    const next = await drain(await store.listMeta(T, {}, { limit: 1, maxId: 2 }));
    expect(next.items.map((m) => m.meta)).toEqual(['odd']);
    expect(next.links).toEqual({ prevMinId: 1 });
  });

  it('stops reading when the consumer stops early, leaving the pool usable', async () => {
    await seed();
    const listing = await store.listFaces(T, {}, {}, 1);
    for await (const batch of listing.batches) {
      expect(batch).toHaveLength(1);
      break;
    }
    expect(await store.getFace(T, 1)).toBeDefined();
  });
});

describe('crash leftovers', () => {
  it('sweeps blobs without a row and stale temporary files, keeping live ones', async () => {
    const live = photo();
    await add({ photo: live, faces: [face()], meta: '', galleries: [] });
    const orphan = photo();
    await blobs.write(sha256Hex(orphan), orphan);
    const tmp = `${blobs.pathOf(sha256Hex(orphan))}.tmp-abc123`;
    await writeFile(tmp, 'partial');
    const old = new Date(Date.now() - 3600_000);
    await utimes(tmp, old, old);
    const fresh = `${blobs.pathOf(sha256Hex(live))}.tmp-def456`;
    await writeFile(fresh, 'in progress');
    const swept = await photos.sweepOrphans();
    expect(swept).toEqual({ blobs: 1, temporary: 1 });
    expect(await blobs.exists(sha256Hex(live))).toBe(true);
    expect(await blobs.exists(sha256Hex(orphan))).toBe(false);
    expect(existsSync(tmp)).toBe(false);
    expect(existsSync(fresh)).toBe(true);
    await rm(fresh);
    await expectConsistent();
  });

  it('finishes queued photo collection, never dropping a photo still in use', async () => {
    const used = photo();
    const [f] = await add({ photo: used, faces: [face()], meta: '', galleries: [] });
    const unused = photo();
    const [g] = await add({ photo: unused, faces: [face()], meta: '', galleries: [] });
    // As if the process died right after deleting g's face: row deleted and queued, not collected.
    await tdb.db.owner`DELETE FROM faces WHERE id = ${g.id}`;
    await tdb.db.owner`INSERT INTO photo_gc (hash) VALUES (${sha256Hex(used)}), (${sha256Hex(unused)})`;
    await photos.collect();
    expect(await store.getFace(T, f.id)).toBeDefined();
    expect(await blobs.exists(sha256Hex(used))).toBe(true);
    expect(await blobs.exists(sha256Hex(unused))).toBe(false);
    await expectConsistent();
  });
});

describe('concurrency', () => {
  it('50 parallel adds and deletes over shared photos and galleries stay consistent', async () => {
    await galleries.create(FIRST_TENANT, 'x');
    await galleries.create(FIRST_TENANT, 'y');
    const photos = Array.from({ length: 5 }, photo);
    const ops: Promise<unknown>[] = [];
    const added: number[] = [];
    for (let i = 0; i < 50; i++) {
      ops.push(
        store
          .addFaces({ tenant: FIRST_TENANT, photo: photos[i % 5], faces: [face(i)], meta: `m${i % 3}`, galleries: i % 2 ? ['x'] : ['x', 'y'] })
          .then(async ({ value: [f] }) => {
            added.push(f.id);
            // Some faces outside y (which is being deleted meanwhile) are deleted again at once, racing the adds of the same photos.
            if (i % 6 === 3) expect(await del(f.id)).toBe(true);
            // The others in y may already be gone with it; deleting is then a no-op.
            else if (i % 6 === 0) await del(f.id);
          }),
      );
    }
    ops.push(dropGallery('y'));
    await Promise.all(ops);
    await expectConsistent();
    const [counts] = await tdb.db.owner`
      SELECT (SELECT count(*) FROM faces)::int AS faces,
             (SELECT count(*) FROM face_galleries WHERE gallery = 'y')::int AS y`;
    expect(counts.y).toBe(0);
    expect(added).toHaveLength(50);
    const listed = await drain(await store.listFaces(T, {}, {}));
    expect(listed.items).toHaveLength(counts.faces);
    // Deleting everything leaves no photo, row or blob behind.
    await Promise.all(listed.items.map((f) => del(f.id)));
    await expectConsistent();
    const [left] = await tdb.db.owner`SELECT count(*)::int AS n FROM photos`;
    expect(left.n).toBe(0);
  });
});

describe('blob files', () => {
  it('writes atomically under ab/cd/<hash>', async () => {
    const bytes = photo();
    const hash = sha256Hex(bytes);
    await blobs.write(hash, bytes);
    expect(blobs.pathOf(hash)).toBe(path.join(blobs.root, hash.slice(0, 2), hash.slice(2, 4), hash));
    await blobs.write(hash, bytes);
    await mkdir(path.join(blobs.root, 'zz'), { recursive: true });
    const seen: string[] = [];
    for await (const e of blobs.walk()) seen.push(e.hash);
    expect(seen).toEqual([hash]);
  });
});
