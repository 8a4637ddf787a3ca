import { describe, expect, it } from 'vitest';
import { DomainError } from '../errors.js';
import type { FaceResult } from '../native/engine.js';
import { requireQuality } from './faces.js';

const face = (x1: number, quality: number): FaceResult => ({ x1, y1: 0, x2: x1 + 80, y2: 80, score: 0.9, quality, landmarks: [] });

describe('requireQuality', () => {
  const faces = [face(0, 0.8), face(100, 0.2), face(200, 0.5)];

  it('passes every face when the gate is off or the boxes are the caller\'s', () => {
    expect(() => requireQuality(faces, [0, 1, 2], 0, 'photo', false)).not.toThrow();
    expect(() => requireQuality(faces, [0, 1, 2], 0.9, 'photo', true)).not.toThrow();
  });

  it('looks only at the chosen faces', () => {
    expect(() => requireQuality(faces, [0, 2], 0.4, 'photo', false)).not.toThrow();
  });

  it('answers 422 LOW_QUALITY naming the photo and listing each poor face with its quality', () => {
    let err: unknown;
    try {
      requireQuality(faces, [0, 1, 2], 0.6, 'photo', false);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(DomainError);
    const d = err as DomainError;
    expect([d.code, d.param]).toEqual(['LOW_QUALITY', 'photo']);
    expect(d.details?.faces).toEqual([
      { x1: 100, y1: 0, x2: 180, y2: 80, quality: 0.2 },
      { x1: 200, y1: 0, x2: 280, y2: 80, quality: 0.5 },
    ]);
  });
});
