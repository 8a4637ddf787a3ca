import { describe, expect, it } from 'vitest';
import { mapEngineError, openEngine } from './engine.js';

const nativeError = (code: string, message = 'detail') => Object.assign(new Error(message), { code });

describe('mapEngineError', () => {
  it.each([
    ['IMAGE_UNSUPPORTED', 415, 'IMAGE_UNSUPPORTED'],
    ['IMAGE_CORRUPT', 400, 'IMAGE_CORRUPT'],
    ['IMAGE_TOO_LARGE', 413, 'IMAGE_TOO_LARGE'],
    ['BAD_PARAM', 400, 'BAD_PARAM'],
    ['OVERLOADED', 503, 'SERVICE_UNAVAILABLE'],
  ])('maps %s to %i', (code, status, error) => {
    const e = mapEngineError(nativeError(code));
    expect(e.status).toBe(status);
    expect(e.error).toBe(error);
  });

  it('asks for a retry when overloaded', () => {
    expect(mapEngineError(nativeError('OVERLOADED')).headers).toEqual({ 'Retry-After': '1' });
  });

  it('hides MODEL, INTERNAL and unknown failures behind a generic 500', () => {
    for (const err of [nativeError('MODEL', 'onnx blew up at /secret/path'), nativeError('INTERNAL'), new Error('x'), 'string']) {
      const e = mapEngineError(err);
      expect(e.body()).toEqual({ code: 500, reason: 'Internal server error', error: 'INTERNAL' });
      expect(e.cause).toBe(err);
    }
  });
});

describe('openEngine', () => {
  it('says clearly when the addon is not built', async () => {
    await expect(openEngine({} as never, '/nonexistent/index.cjs')).rejects.toThrow(/not built/);
  });
});

describe('openEngine with an addon file', () => {
  it('loads FaceEngine from the given path, forwards options and maps rejections', async () => {
    const { mkdtempSync, writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const path = await import('node:path');
    const dir = mkdtempSync(path.join(tmpdir(), 'engine-'));
    const file = path.join(dir, 'index.cjs');
    writeFileSync(
      file,
      `exports.FaceEngine = { async open(opts) { return {
        opts, closed: 0,
        async analyze(img, o) { if (img.length === 0) throw Object.assign(new Error('empty'), { code: 'IMAGE_CORRUPT' });
          return { width: 1, height: 1, faces: [], embeddings: new Float32Array(0), dim: 4, seen: o }; },
        async similarity(a, b, dim) { return new Float32Array((a.length / dim) * (b.length / dim)); },
        info() { return { providers: opts.providers, simd: 'scalar', recognizer: 'r', dim: 4, models: [] }; },
        close() { this.closed++; },
      }; } };`,
    );
    const engine = await openEngine({ providers: ['cpu'] } as never, file);
    expect(engine.info().providers).toEqual(['cpu']);
    const a = await engine.analyze(Buffer.from('x'), { embed: false, age: false, gender: false, emotions: false });
    expect((a as unknown as { seen: object }).seen).toEqual({ embed: false, age: false, gender: false, emotions: false });
    await expect(engine.analyze(Buffer.alloc(0), { embed: true, age: false, gender: false, emotions: false })).rejects.toMatchObject({
      status: 400,
      error: 'IMAGE_CORRUPT',
    });
    expect(await engine.similarity(new Float32Array(8), new Float32Array(12), 4)).toHaveLength(6);
    expect(await engine.similarity(new Float32Array(0), new Float32Array(12), 4)).toHaveLength(0);
    engine.close();
    engine.close();
    await expect(engine.analyze(Buffer.from('x'), { embed: false, age: false, gender: false, emotions: false })).rejects.toMatchObject({ status: 503 });
  });
});
