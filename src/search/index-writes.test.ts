/**
 * Writes waiting for the search index, against the real shards (native
 * addon), a real follower and a real PostgreSQL.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { logChanges } from '../db/change-log.js';
import { transaction } from '../db/client.js';
import { FaceStore } from '../db/faces.js';
import { PhotoBlobs, PhotoStore } from '../db/photos.js';
import { createLogger } from '../log.js';
import { openFaceIndex, type FaceIndex } from '../native/face-index.js';
import { IndexSync } from './index-sync.js';
import { IndexWrites } from './index-writes.js';
import { localShards } from './search-shards.js';
import { FIRST_TENANT } from '../auth.js';

let tdb: TestDatabase;
let dir: string;
let index: FaceIndex;
let sync: IndexSync;
let store: FaceStore;

const SHARDS = 2;

beforeAll(async () => {
  tdb = await freshDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'index-writes-'));
  index = await openFaceIndex({ dir: path.join(dir, 'index'), shards: SHARDS, dims: 4, scalar: 'f32' });
  sync = await IndexSync.start({
    sql: tdb.db.sql,
    index,
    model: 'test',
    dims: 4,
    log: createLogger('silent'),
    snapshotSeconds: 3600,
    snapshotChanges: 1_000_000,
    shardCount: SHARDS,
    server: 'test',
  });
  store = new FaceStore(tdb.db.sql, new PhotoStore(tdb.db.sql, new PhotoBlobs(path.join(dir, 'photos'))), { model: 'test' });
});

afterAll(async () => {
  await sync?.stop();
  await tdb?.drop();
  await rm(dir, { recursive: true, force: true });
});

let seed = 0;
async function addFace(): Promise<{ id: number; position: number }> {
  seed++;
  const photo = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), Buffer.from(`photo-${seed}`)]);
  const embedding = Float32Array.from([1, seed, seed % 3, -seed].map((x, i) => x / (10 + i)));
  const written = await store.addFaces({ tenant: FIRST_TENANT, photo, faces: [{ box: { x1: 0, y1: 0, x2: 10, y2: 10 }, embedding }], meta: '', galleries: [] });
  return { id: written.value[0].id, position: written.position as number };
}

const findable = async (id: number) => {
  const [row] = await tdb.db.owner`SELECT embedding FROM faces WHERE id = ${id}`;
  const v = new Float32Array(new Uint8Array(row.embedding as Buffer).buffer.slice(0));
  const [result] = await index.searchBatch(v, 1);
  return result.matches.some((m) => m.id === id);
};

describe('IndexWrites.settle', () => {
  it('returns once search serves the write, with no lag', async () => {
    const writes = new IndexWrites(localShards(index, sync));
    const { id, position } = await addFace();
    expect(await writes.settle(position, true)).toBeUndefined();
    expect(await findable(id)).toBe(true);
    expect(await writes.settle(undefined, true)).toBeUndefined();
  });

  it('flags an add at once while a shard is out of search, but not a delete', async () => {
    const writes = new IndexWrites(localShards(index, sync), undefined, 5_000);
    index.setOffline(1);
    try {
      const t0 = Date.now();
      const { id, position } = await addFace();
      expect(await writes.settle(position, true)).toEqual({ behind: 1, total: SHARDS });
      // Nothing to wait for: the offline shard has applied the change, it is just not searched.
      expect(Date.now() - t0).toBeLessThan(2_000);
      const gone = await store.deleteFace({ tenant: FIRST_TENANT }, id);
      expect(await writes.settle(gone?.position, false)).toBeUndefined();
    } finally {
      index.setOnline(1);
    }
  });

  it('gives up after its limit while the follower is stuck, and reports every shard behind', async () => {
    const writes = new IndexWrites(localShards(index, sync), undefined, 300);
    const { id } = await addFace();
    // A change the follower cannot read while another session holds the faces table (locked
    // first: the commit's notification wakes the follower at once).
    const lock = await tdb.db.sql.reserve();
    let position = 0;
    try {
      await lock`BEGIN`;
      await lock`LOCK TABLE faces IN ACCESS EXCLUSIVE MODE`;
      position = (await transaction(tdb.db.sql, FIRST_TENANT, (tx) => logChanges(tx, [id], 'galleries'))) as number;
      const t0 = Date.now();
      expect(await writes.settle(position, true)).toEqual({ behind: SHARDS, total: SHARDS });
      expect(Date.now() - t0).toBeGreaterThanOrEqual(290);
    } finally {
      await lock`ROLLBACK`;
      lock.release();
    }
    // Once the follower can read again, the same write settles.
    expect(await new IndexWrites(localShards(index, sync)).settle(position, true)).toBeUndefined();
  });
});
