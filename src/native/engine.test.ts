import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os, { availableParallelism } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../config/index.js';
import { DomainError } from '../errors.js';
import { ERROR_STATUS } from '../http/errors.js';
import { until } from '../../test/harness/until.js';
import { abortError, engineOptionsFrom, keepTemporaryFilesIn, mapEngineError, openEngine } from './engine.js';

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

describe('keepTemporaryFilesIn', () => {
  it("points TMPDIR, and so os.tmpdir(), at the data folder's tmp/, made if missing", () => {
    const before = process.env.TMPDIR;
    const dataDir = path.join(mkdtempSync(path.join(os.tmpdir(), 'face-data-')), 'data');
    try {
      const dir = keepTemporaryFilesIn(dataDir);
      expect(dir).toBe(path.join(dataDir, 'tmp'));
      expect(existsSync(dir)).toBe(true);
      expect([process.env.TMPDIR, os.tmpdir()]).toEqual([dir, dir]);
    } finally {
      if (before === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = before;
      rmSync(path.dirname(dataDir), { recursive: true, force: true });
    }
  });
});

describe('openEngine', () => {
  it('says clearly when the addon is not built', async () => {
    await expect(openEngine({} as never, '/nonexistent/index.cjs')).rejects.toThrow(/not built/);
  });

  it('starts as many pipeline threads as FACE_PIPELINE_THREADS says, one per core by default', async () => {
    // Thread names are the engine's own ("face-pipeline-0", ...), as /proc shows them; a thread
    // that exits between the listing and the read has no name left to read.
    const name = (task: string) => {
      try {
        return readFileSync(`/proc/self/task/${task}/comm`, 'utf8');
      } catch {
        return '';
      }
    };
    const pipelineThreads = () => readdirSync('/proc/self/task').filter((t) => name(t).startsWith('face-pipeline')).length;
    for (const [env, expected] of [[{ FACE_PIPELINE_THREADS: '5' }, 5], [{}, Math.max(2, availableParallelism())]] as const) {
      const before = pipelineThreads();
      const engine = await openEngine(engineOptionsFrom(loadConfig(env)));
      try {
        // A thread names itself once it runs, which may be just after open() resolved.
        const started = () => pipelineThreads() - before;
        await until('the pipeline threads to be named', async () => (started() >= expected ? true : undefined), 5_000).catch(() => {});
        expect(started(), JSON.stringify(env)).toBe(expected);
      } finally {
        engine.close();
      }
      await until('the pipeline threads to exit', async () => (pipelineThreads() === before ? true : undefined), 10_000);
    }
  });
});
