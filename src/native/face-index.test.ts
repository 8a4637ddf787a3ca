/**
 * Native failures of the search index reach callers as DomainErrors, whichever
 * way the addon raises them: thrown by a synchronous call, a promise refused
 * before any work starts, a failure on the index's worker pool, or napi's own
 * argument checks. Runs the real addon (build/addon) on a small index.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shardOfFace } from '../db/layout.js';
import { DomainError, type ErrorCode } from '../errors.js';
import { ERROR_STATUS } from '../http/errors.js';
import { openFaceIndex, shardOf, type FaceIndex } from './face-index.js';

const DIMS = 4;
const SHARDS = 2;
let dir: string;
let index: FaceIndex;

/** What `run` failed with, thrown or rejected; fails the test when it succeeds. */
async function failure(run: () => unknown): Promise<DomainError> {
  try {
    await run();
  } catch (err) {
    expect(err).toBeInstanceOf(DomainError);
    return err as DomainError;
  }
  throw new Error('expected the call to fail');
}

/** The mapped error has `code`, the status that code is sent with, and the addon's error (with its native code) as the cause. */
function expectMapped(e: DomainError, code: ErrorCode, status: number, nativeCode: string) {
  expect(e.code).toBe(code);
  expect(ERROR_STATUS[e.code]).toBe(status);
  expect((e.cause as { code?: unknown }).code).toBe(nativeCode);
}

const upsert = (id: number, vector: Float32Array) => ({ position: id, op: 'upsert' as const, id, vector, galleries: [] });

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'face-index-errors-'));
  index = await openFaceIndex({ dir, shards: SHARDS, dims: DIMS, scalar: 'f32' });
  // No snapshots yet: every shard starts empty and rebuilding; bring them live at position 0.
  for (const k of [0, 1]) await index.finishRebuild(k, 0);
});

afterAll(async () => {
  index?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('FaceIndex errors', () => {
  it('reports a first start as missing snapshots, not as failures', () => {
    const report = index.loadReport();
    expect(report.map((r) => [r.shard, r.position, r.missing])).toEqual([
      [0, 0, true],
      [1, 0, true],
    ]);
  });

  it('maps a malformed vector, found on the worker pool, to BAD_PARAM with the reason', async () => {
    const e = await failure(() => index.apply([upsert(1, new Float32Array(DIMS - 1).fill(1))]));
    expectMapped(e, 'BAD_PARAM', 400, 'BAD_PARAM');
    expect(e.message).toBe(`Vector has ${DIMS - 1} dimensions, the index expects ${DIMS}`);
    expectMapped(await failure(() => index.apply([upsert(2, new Float32Array(DIMS))])), 'BAD_PARAM', 400, 'BAD_PARAM');
    expectMapped(await failure(() => index.searchBatch(new Float32Array(DIMS + 1).fill(1), 5)), 'BAD_PARAM', 400, 'BAD_PARAM');
  });

  it('maps arguments refused before any work starts to BAD_PARAM, as rejections', async () => {
    const unknownOp = { position: 3, op: 'rename', id: 3 } as never;
    expectMapped(await failure(() => index.apply([unknownOp])), 'BAD_PARAM', 400, 'BAD_PARAM');
    expectMapped(await failure(() => index.refill(0, new Float64Array([1.5]), new Float32Array(DIMS).fill(1), [[]])), 'BAD_PARAM', 400, 'BAD_PARAM');
    const refused = index.finishRebuild(0, -1);
    expect(refused).toBeInstanceOf(Promise);
    expectMapped(await failure(() => refused), 'BAD_PARAM', 400, 'BAD_PARAM');
  });

  it('maps an unknown shard to BAD_PARAM in every healing step', async () => {
    for (const step of [
      () => index.markFailed(7),
      () => index.reload(7),
      () => index.beginRebuild(7),
      () => index.refill(7, new Float64Array(0), new Float32Array(0), []),
      () => index.replay(7, []),
      () => index.finishRebuild(7, 1),
    ]) {
      const e = await failure(step);
      expectMapped(e, 'BAD_PARAM', 400, 'BAD_PARAM');
      expect(e.message).toBe('Shard 7 does not exist');
    }
  });

  it('maps a shard in the wrong state to a retryable SERVICE_UNAVAILABLE', async () => {
    // Shard 0 is live: replaying into it and finishing its rebuild are for rebuilding shards only.
    const id = [1, 2, 3, 4, 5, 6, 7, 8].find((i) => shardOf(i, SHARDS) === 0)!;
    const one = new Float32Array(DIMS).fill(1);
    for (const step of [() => index.replay(0, [upsert(id, one)]), () => index.finishRebuild(0, 1)]) {
      const e = await failure(step);
      expectMapped(e, 'SERVICE_UNAVAILABLE', 503, 'INDEX_UNAVAILABLE');
      expect(e.retryAfterS).toBe(1);
    }
  });

  it('throws mapped errors from synchronous calls', () => {
    for (const call of [() => index.setOffline(9), () => index.setOnline(9)]) {
      let thrown: unknown;
      try {
        call();
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(DomainError);
      expectMapped(thrown as DomainError, 'BAD_PARAM', 400, 'BAD_PARAM');
    }
  });

  it('maps shardOf with a bad argument to BAD_PARAM', async () => {
    expect(shardOf(1, SHARDS)).toBeLessThan(SHARDS);
    for (const [id, shards] of [
      [-1, 4],
      [1.5, 4],
      [2 ** 53, 4],
      [Number.NaN, 4],
      [1, 0],
    ]) {
      expectMapped(await failure(() => shardOf(id, shards)), 'BAD_PARAM', 400, 'BAD_PARAM');
    }
  });

  it('hides failures without a client-facing code behind a generic INTERNAL', async () => {
    // napi's own argument conversion: a string where a shard number is declared.
    const e = await failure(() => index.reload('one' as never));
    expect(e.code).toBe('INTERNAL');
    expect(e.message).toBe('Internal server error');
    expect(e.cause).toBeInstanceOf(Error);
  });

  it('maps a bad option at open to BAD_PARAM', async () => {
    const e = await failure(() => openFaceIndex({ dir, shards: SHARDS, dims: DIMS, scalar: 'f8' as never }));
    expectMapped(e, 'BAD_PARAM', 400, 'BAD_PARAM');
  });

  it('maps calls on a closed index to INTERNAL, thrown or rejected', async () => {
    const closing = await openFaceIndex({ dir: path.join(dir, 'closed'), shards: 1, dims: DIMS, scalar: 'f32' });
    closing.close();
    expectMapped(await failure(() => closing.apply([upsert(1, new Float32Array(DIMS).fill(1))])), 'INTERNAL', 500, 'INTERNAL');
    expectMapped(await failure(() => closing.snapshot()), 'INTERNAL', 500, 'INTERNAL');
    expectMapped(await failure(() => closing.shards()), 'INTERNAL', 500, 'INTERNAL');
    expectMapped(await failure(() => closing.position()), 'INTERNAL', 500, 'INTERNAL');
  });
});

describe('shardOf', () => {
  it('routes as the TypeScript copy of the rule that tags the change log (db/layout.ts)', () => {
    const ids = [...Array.from({ length: 5000 }, (_, i) => i), 2 ** 32 - 1, 2 ** 32, 2 ** 40 + 3, Number.MAX_SAFE_INTEGER];
    for (const shards of [1, 2, 3, 4, 7, 16, 4096]) {
      const differ = ids.filter((id) => shardOf(id, shards) !== shardOfFace(id, shards));
      expect(differ, `${shards} shards`).toEqual([]);
    }
  });
});
