import { describe, expect, it } from 'vitest';
import { DomainError } from '../errors.js';
import type { FaceResult } from '../native/engine.js';
import { requireQuality, selectFaces, subjectOf, SUBJECT_AREA_MARGIN } from './analysis.js';

const face = (x1: number, quality: number): FaceResult => ({ x1, y1: 0, x2: x1 + 80, y2: 80, score: 0.9, aligned: true, quality, landmarks: [] });

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

describe('the subject of a photo', () => {
  /** A square face of `side` pixels centred at (cx, cy). */
  const at = (cx: number, cy: number, side: number): FaceResult => ({
    x1: cx - side / 2,
    y1: cy - side / 2,
    x2: cx + side / 2,
    y2: cy + side / 2,
    score: 0.9,
    aligned: true,
    quality: 0.7,
    landmarks: [],
  });
  const photo = (...faces: FaceResult[]) => ({ faces, width: 1000, height: 800 });

  it('is the biggest face when no other comes within the margin of its area', () => {
    // A face at the edge, clearly bigger than the one in the middle.
    expect(subjectOf(photo(at(100, 100, 200), at(500, 400, 150)))).toBe(0);
    expect(selectFaces(photo(at(100, 100, 200), at(500, 400, 150)), 'biggest', 'photo', false)).toEqual([0]);
  });

  it('is the one nearest the centre among faces of about the same size', () => {
    // A background face 2% bigger in area than the person in the middle, and a third, smaller one.
    const edge = at(100, 100, 202);
    const middle = at(520, 390, 200);
    expect(subjectOf(photo(edge, middle, at(480, 400, 100)))).toBe(1);
    expect(selectFaces(photo(edge, middle), 'biggest', 'photo', false)).toEqual([1]);
    // Beyond the margin the size wins again.
    const side = Math.sqrt(1 - SUBJECT_AREA_MARGIN) * 200 - 2;
    expect(subjectOf(photo(at(100, 100, 200), at(500, 400, side)))).toBe(0);
    expect(subjectOf(photo(edge, middle), 0)).toBe(0);
  });

  it('leaves the other selectors and caller boxes as they were', () => {
    const faces = photo(at(100, 100, 202), at(520, 390, 200));
    expect(selectFaces(faces, 'all', 'photo', false)).toEqual([0, 1]);
    expect(selectFaces(faces, 'biggest', 'photo', true)).toEqual([0, 1]);
    expect(() => selectFaces(faces, 'reject', 'photo', false)).toThrow(DomainError);
  });
});
