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
