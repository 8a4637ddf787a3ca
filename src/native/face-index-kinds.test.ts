/**
 * Both index kinds through the addon: concurrent searches (gathered into
 * shared passes while one runs) each get their own answer, a gallery keeps to
 * its members, snapshots load back into the same kind and are refused by the
 * other, which then rebuilds. Runs the real addon (build/addon).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openFaceIndex, type FaceIndex, type IndexChange } from './face-index.js';

const DIMS = 32;
const SHARDS = 2;
const FACES = 600;

/** Deterministic unit-ish vectors, distinct per id. */
function vectorOf(id: number): Float32Array {
  const v = new Float32Array(DIMS);
  let s = id * 2654435761;
  for (let i = 0; i < DIMS; i++) {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    v[i] = s / 2 ** 30 - 1;
  }
  return v;
}

const changes: IndexChange[] = Array.from({ length: FACES }, (_, i) => ({
  position: i + 1,
  op: 'upsert' as const,
  id: i + 1,
  vector: vectorOf(i + 1),
  galleries: (i + 1) % 3 === 0 ? ['threes'] : [],
}));

let root: string;
beforeAll(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), 'face-index-kinds-'));
});
afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

async function openLive(dir: string, kind: 'scan' | 'hnsw'): Promise<FaceIndex> {
  const index = await openFaceIndex({ dir, shards: SHARDS, dims: DIMS, kind, scalar: 'f32' });
  for (const s of index.loadReport()) if (s.error !== undefined || s.missing) await index.finishRebuild(s.shard, 0);
  return index;
}

describe.each(['scan', 'hnsw'] as const)('the %s kind', (kind) => {
  let index: FaceIndex;
  const dir = () => path.join(root, kind);

  beforeAll(async () => {
    index = await openLive(dir(), kind);
    await index.apply(changes);
  });
  afterAll(() => index?.close());

  it('answers concurrent searches each with its own faces, galleries kept', async () => {
    const asked = Array.from({ length: 120 }, (_, i) => 1 + ((i * 37) % FACES));
    const results = await Promise.all(
      asked.map((id) => index.searchBatch(vectorOf(id), 2, id % 3 === 0 ? 'threes' : undefined)),
    );
    results.forEach(([r], i) => {
      expect(r.matches[0].id).toBe(asked[i]);
      expect(r.matches[0].similarity).toBeCloseTo(1, 2);
      expect(r.live).toBe(SHARDS);
      if (asked[i] % 3 === 0) expect(r.matches.every((m) => m.id % 3 === 0)).toBe(true);
    });
  });

  it('loads its snapshots back, and the other kind refuses them and rebuilds', async () => {
    const saved = await index.snapshot();
    expect(saved.every((s) => s.error === undefined && s.position > 0)).toBe(true);
    index.close();

    index = await openFaceIndex({ dir: dir(), shards: SHARDS, dims: DIMS, kind, scalar: 'f32' });
    expect(index.loadReport().every((s) => s.error === undefined && !s.missing && s.position > 0)).toBe(true);
    const [again] = await index.searchBatch(vectorOf(7), 1);
    expect(again.matches[0].id).toBe(7);

    const other = await openFaceIndex({ dir: dir(), shards: SHARDS, dims: DIMS, kind: kind === 'scan' ? 'hnsw' : 'scan', scalar: 'f32' });
    try {
      const report = other.loadReport();
      // Each shard's sidecar names the kind it was written by.
      expect(report.every((s) => s.position === 0 && s.error !== undefined)).toBe(true);
      expect(other.shards().every((s) => s.state === 'rebuilding' && s.size === 0)).toBe(true);
    } finally {
      other.close();
    }
  });
});
