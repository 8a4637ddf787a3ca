import { describe, expect, it } from 'vitest';
import { DomainError } from '../errors.js';
import { ERROR_STATUS } from '../http/errors.js';
import { abortError, mapEngineError, openEngine } from './engine.js';

const nativeError = (code: string, message = 'detail') => Object.assign(new Error(message), { code });

describe('mapEngineError', () => {
  it.each([
    ['IMAGE_UNSUPPORTED', 415],
    ['IMAGE_CORRUPT', 400],
    ['IMAGE_TOO_LARGE', 413],
    ['IMAGE_ASPECT_RATIO', 400],
    ['BAD_PARAM', 400],
    ['OVERLOADED', 503],
  ])('keeps %s, answered with %i', (code, status) => {
    const e = mapEngineError(nativeError(code));
    expect(e).toBeInstanceOf(DomainError);
    expect(e.code).toBe(code);
    expect(ERROR_STATUS[e.code]).toBe(status);
  });

  it('says the problem once, as a sentence', () => {
    const e = mapEngineError(nativeError('IMAGE_CORRUPT', 'image could not be decoded: unexpected end of file'));
    expect(e.message).toBe('Image could not be decoded: unexpected end of file');
  });

  it('asks for a retry when overloaded', () => {
    expect(mapEngineError(nativeError('OVERLOADED')).retryAfterS).toBe(1);
  });

  it('hides MODEL, INTERNAL and unknown failures behind a generic 500', () => {
    for (const err of [nativeError('MODEL', 'onnx blew up at /secret/path'), nativeError('INTERNAL'), new Error('x'), 'string']) {
      const e = mapEngineError(err);
      expect(e.code).toBe('INTERNAL');
      expect(e.message).not.toContain('secret');
      expect(e.cause).toBe(err);
    }
  });
});

describe('abortError', () => {
  it('passes our own reason through and names the others', () => {
    const mine = new DomainError('SERVICE_UNAVAILABLE', 'deadline', { retryAfterS: 1 });
    const ctl = new AbortController();
    ctl.abort(mine);
    expect(abortError(ctl.signal)).toBe(mine);
    expect(abortError(AbortSignal.abort()).code).toBe('CLIENT_CLOSED');
    const timeout = new DOMException('late', 'TimeoutError');
    expect(abortError(AbortSignal.abort(timeout)).code).toBe('SERVICE_UNAVAILABLE');
  });
});

describe('openEngine', () => {
  it('says clearly when the addon is not built', async () => {
    await expect(openEngine({} as never, '/nonexistent/index.cjs')).rejects.toThrow(/not built/);
  });
});
