import { describe, expect, it } from 'vitest';
import { loadConfig } from './index.js';

const MiB = 1024 * 1024;

describe('admission settings', () => {
  it('sizes the body memory budget to RAM, capped at 512 MiB, and gives photo routes their own limit', () => {
    const small = loadConfig({}, { root: '/tmp', cores: 2, totalMem: 1024 * MiB });
    expect(small.maxBodyMemory).toBe(256 * MiB);
    expect(small.maxEngineInflight).toBe(8);
    expect(small.requestTimeoutMs).toBe(30_000);
    const big = loadConfig({}, { root: '/tmp', cores: 16, totalMem: 64 * 1024 * MiB });
    expect(big.maxBodyMemory).toBe(512 * MiB);
    expect(big.maxEngineInflight).toBe(64);
  });

  it('reads the environment', () => {
    const c = loadConfig(
      { FACE_MAX_BODY_MEMORY: String(64 * MiB), FACE_MAX_ENGINE_INFLIGHT: '3', FACE_REQUEST_TIMEOUT_MS: '5000' },
      { root: '/tmp', cores: 2 },
    );
    expect([c.maxBodyMemory, c.maxEngineInflight, c.requestTimeoutMs]).toEqual([64 * MiB, 3, 5000]);
    expect(() => loadConfig({ FACE_MAX_BODY_MEMORY: '10' }, { root: '/tmp' })).toThrow(/FACE_MAX_BODY_MEMORY/);
  });
});
