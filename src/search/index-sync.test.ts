/**
 * The follower of a shard server holding one shard of four: it reads only the
 * rows of its shard from the change log, and still follows the log to its
 * end, so its position, its waiters and its snapshots (and the pruning that
 * waits for them) keep up when the newest changes are of other shards; and a
 * refill of its shard from the faces table. Real shards (native addon), real
 * PostgreSQL.
 */
import { mkdtemp, rm, unlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { until } from '../../test/harness/until.js';
import { lastPosition, logChanges, prunedThrough } from '../db/change-log.js';
import { FIRST_TENANT } from '../auth.js';
import { transaction } from '../db/client.js';
import { floatsToBytes } from '../db/embedding.js';
import { shardOfFace } from '../db/layout.js';
import { openFaceIndex, type FaceIndex } from '../native/face-index.js';
import { IndexSync } from './index-sync.js';

const SHARDS = 4;
const HELD = 1;
const DIMS = 4;

let tdb: TestDatabase;
let dir: string;
let index: FaceIndex;
let sync: IndexSync;
const warnings: string[] = [];
/** Every face stored in the held shard so far. */
const mine: number[] = [];

const vectorOf = (id: number) => Float32Array.from([1, id, id % 3, -id].map((x, i) => x / (10 + i)));

/**
 * Stores faces and logs them in one transaction. A face of another shard gets an embedding of the
 * wrong size: a follower that read it would log that it is damaged (index-sync.ts), so reading
 * only its own shard's rows is seen in the log.
 */
async function addFaces(count: number): Promise<{ ids: number[]; position: number }> {
  return transaction(tdb.db.sql, FIRST_TENANT, async (tx) => {
    const ids: number[] = [];
    for (let i = 0; i < count; i++) {
      const [{ id }] = await tx`SELECT nextval('faces_id_seq')::int AS id`;
      const embedding = shardOfFace(id, SHARDS) === HELD ? vectorOf(id) : new Float32Array(DIMS - 1);
      await tx`
        INSERT INTO faces (id, tenant_id, photo_hash, x1, y1, x2, y2, dim, embedding, model)
        VALUES (${id}, 1, ${'a'.repeat(64)}, 0, 0, 1, 1, ${embedding.length}, ${floatsToBytes(embedding)}, 'test')`;
      ids.push(id);
      if (shardOfFace(id, SHARDS) === HELD) mine.push(id);
    }
    return { ids, position: (await logChanges(tx, ids, 'upsert')) as number };
  });
}

/** Faces until one lands in a shard held elsewhere: the log then ends with a row that is not this server's. */
async function addUntilElsewhere(): Promise<{ id: number; position: number }> {
  for (;;) {
    const { ids, position } = await addFaces(1);
    if (shardOfFace(ids[0], SHARDS) !== HELD) return { id: ids[0], position };
  }
}

beforeAll(async () => {
  tdb = await freshDatabase();
  await tdb.db.owner`INSERT INTO search_layout (shards, rule) VALUES (${SHARDS}, 'mix64-mod')`;
  await tdb.db.owner`INSERT INTO photos (hash, size, content_type) VALUES (${'a'.repeat(64)}, 1, 'image/jpeg')`;
  dir = await mkdtemp(path.join(os.tmpdir(), 'index-sync-'));
  // An f32 graph: these 4-d vectors of neighbouring ids differ by less than the scan's f16 rounding.
  index = await openFaceIndex({ dir: path.join(dir, 'index'), shards: SHARDS, dims: DIMS, kind: 'hnsw', scalar: 'f32', owned: [HELD] });
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n')) if (line) warnings.push(JSON.parse(line).msg);
      done();
    },
  });
  sync = await IndexSync.start({
    sql: tdb.db.sql,
    index,
    model: 'test',
    dims: DIMS,
    log: pino({ level: 'warn' }, sink),
    snapshotSeconds: 3600,
    // A snapshot after every pass that applied anything, so the pruning it leads to is seen at once.
    snapshotChanges: 1,
    shardCount: SHARDS,
    server: 'test',
  });
});

afterAll(async () => {
  await sync?.stop();
  await tdb?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('IndexSync holding some of the shards', () => {
  it('applies only the faces of its shard, read without the others', async () => {
    const { ids, position } = await addFaces(40);
    expect(mine.length).toBeGreaterThan(0);
    expect(mine.length).toBeLessThan(ids.length);
    expect(await sync.caughtUp(position, 5_000)).toBe(true);
    const [held] = index.shards();
    expect(held.shard).toBe(HELD);
    expect(held.size).toBe(mine.length);
    const results = await index.searchBatch(Float32Array.from(mine.flatMap((id) => [...vectorOf(id)])), 1);
    expect(results.map((r) => r.matches[0]?.id)).toEqual(mine);
    // The other shards' damaged embeddings were never read.
    expect(warnings).toEqual([]);
  });

  it("moves to the end of the log when the newest changes are other shards'", async () => {
    await addFaces(5);
    const { position } = await addUntilElsewhere();
    expect(await sync.caughtUp(position, 5_000)).toBe(true);
    expect(sync.position()).toBe(position);
    expect(index.position()).toBe(position);
    expect(index.shards()[0].position).toBe(position);
    expect(await lastPosition(tdb.db.sql)).toBe(position);
    // Announced by the commit's notification, and applied: not behind.
    await until('the notification heard and answered', async () => (sync.behindMs() === 0 ? true : undefined));
    expect(warnings).toEqual([]);
  });

  it('snapshots its shard at the end of the log, so the log is pruned there', async () => {
    // The other shards' servers have saved theirs far ahead: this server's shard sets the floor.
    await tdb.db.owner`
      INSERT INTO shard_snapshots (shard, position, server)
      SELECT k, 1000000, 'elsewhere' FROM generate_series(0, ${SHARDS - 1}) k WHERE k <> ${HELD}`;
    const { position } = await addUntilElsewhere();
    expect(await sync.caughtUp(position, 5_000)).toBe(true);
    const saved = await until('the held shard snapshotted at the end of the log', async () => {
      const [row] = await tdb.db.owner`SELECT position FROM shard_snapshots WHERE shard = ${HELD}`;
      return row && Number(row.position) >= position ? Number(row.position) : undefined;
    });
    expect(saved).toBe(position);
    await until('the log pruned through it', async () => ((await prunedThrough(tdb.db.sql)) >= position ? true : undefined));
    const [left] = await tdb.db.owner`SELECT count(*)::int AS n FROM face_changes`;
    expect(left.n).toBe(0);
  });

  it('refills its shard from the faces table once its snapshot is gone and the log pruned', async () => {
    for (const ext of ['usearch', 'meta']) await unlink(path.join(dir, 'index', `shard-${HELD}.${ext}`));
    await sync.rebuild(HELD);
    await until('the shard rebuilt', async () => (index.shards()[0].state === 'live' ? true : undefined), 20_000);
    const [held] = index.shards();
    expect(held.size).toBe(mine.length);
    expect(held.position).toBe(await lastPosition(tdb.db.sql));
    const results = await index.searchBatch(Float32Array.from(mine.flatMap((id) => [...vectorOf(id)])), 1);
    expect(results.map((r) => r.matches[0]?.id)).toEqual(mine);
  });
});
