import { describe, expect, it } from 'vitest';
import { loadConfig } from './index.js';

describe('loadConfig', () => {
  it('has documented defaults', () => {
    const c = loadConfig({}, { root: '/srv/face', cores: 8 });
    expect(c).toMatchObject({
      port: 8080,
      host: '0.0.0.0',
      dataDir: '/srv/face/data',
      modelDir: '/srv/face/models',
      ortLibrary: '/srv/face/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1',
      providers: ['cpu'],
      maxPixels: 64_000_000,
      maxUploadBytes: 32 * 1024 * 1024,
      fetch: { timeoutMs: 5000, maxRedirects: 3, allowPrivate: false },
    });
    expect([c.token, c.databaseUrl, c.pgPort, c.publicUrl]).toEqual([undefined, undefined, undefined, undefined]);
    expect(c.inferenceWorkers * c.intraThreads).toBeLessThanOrEqual(8);
  });

  it('gives the engine settings the defaults they have always had', () => {
    const c = loadConfig({}, { root: '/srv/face', cores: 8 });
    expect(c).toMatchObject({
      tensorrtCache: '/srv/face/data/trt-cache',
      inferenceWorkers: 8,
      intraThreads: 1,
      maxBatch: 32,
      batchWaitUs: 2000,
      queueCapacity: 256,
      maxDecodeBytes: 512 * 1024 * 1024,
      maxAspectRatio: 20,
      heavyQueueMs: 10_000,
      pipelineThreads: 0,
      heavyThreads: 0,
      minFace: 40,
    });
    expect([c.recognizer, c.detector, c.detectThreshold]).toEqual([undefined, undefined, undefined]);
    expect(loadConfig({}, { root: '/r', cores: 32 })).toMatchObject({ inferenceWorkers: 8, intraThreads: 4 });
    expect(loadConfig({}, { root: '/r', cores: 2 })).toMatchObject({ inferenceWorkers: 2, intraThreads: 1 });
    expect(loadConfig({ FACE_DATA_DIR: '/d' }, { root: '/r', cores: 2 }).tensorrtCache).toBe('/d/trt-cache');
  });

  it('parses values and treats empty strings as unset', () => {
    const c = loadConfig(
      { PORT: '0', FACE_PROVIDERS: 'TensorRT, cuda,cpu', FACE_FETCH_ALLOW_PRIVATE: 'true', FACE_TOKEN: '', FACE_MAX_INFLIGHT: '5' },
      { root: '/r', cores: 2 },
    );
    expect(c.port).toBe(0);
    expect(c.providers).toEqual(['tensorrt', 'cuda', 'cpu']);
    expect(c.fetch.allowPrivate).toBe(true);
    expect(c.token).toBeUndefined();
    expect(c.maxInflight).toBe(5);
  });

  it('names every invalid variable', () => {
    expect(() => loadConfig({ PORT: 'eighty', FACE_FETCH_ALLOW_PRIVATE: 'sure' }, { root: '/r', cores: 1 })).toThrow(
      /PORT.*FACE_FETCH_ALLOW_PRIVATE/,
    );
    // The engine's settings are parsed apart (config/engine-options.ts); their problems are named alongside.
    expect(() => loadConfig({ PORT: 'eighty', FACE_MAX_BATCH: '0', FACE_PROVIDERS: ',' }, { root: '/r', cores: 1 })).toThrow(
      /PORT.*FACE_PROVIDERS.*FACE_MAX_BATCH/,
    );
  });
});
