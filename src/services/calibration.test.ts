import { describe, expect, it } from 'vitest';
import {
  calibrationOf,
  CALIBRATIONS,
  DEFAULT_RECOGNIZER,
  DEFAULT_THRESHOLD,
  falsePositiveIdentificationRate,
  IDENTIFY_FPIR,
  identifyConfidence,
  identifyCosine,
  isVerified,
  resolveIdentifyThreshold,
  resolveThreshold,
  thresholdPresets,
  toConfidence,
  type Calibration,
} from './calibration.js';
import { upperTail, upperTailZ } from './normal.js';

const sfaceMirror = CALIBRATIONS[DEFAULT_RECOGNIZER];

describe('calibration', () => {
  it('maps cosine to [0,1] monotonically for every recogniser', () => {
    for (const c of Object.values(CALIBRATIONS)) {
      let prev = -Infinity;
      for (let cos = -1.2; cos <= 1.2; cos += 0.01) {
        const v = toConfidence(cos, c);
        expect(v).toBeGreaterThanOrEqual(0);
        expect(v).toBeLessThanOrEqual(1);
        expect(v).toBeGreaterThanOrEqual(prev);
        prev = v;
      }
      expect(toConfidence(1, c)).toBeGreaterThan(0.99);
      expect(toConfidence(-1, c)).toBeLessThan(0.001);
    }
    expect(toConfidence(Number.NaN, sfaceMirror)).toBe(0);
  });

  it('gives one half at the logistic centre of the recogniser', () => {
    expect(toConfidence(sfaceMirror.center, sfaceMirror)).toBeCloseTo(0.5, 10);
    expect(toConfidence(CALIBRATIONS.faceres.center, CALIBRATIONS.faceres)).toBeCloseTo(0.5, 10);
  });

  it('orders presets strict > medium > low and places them at their cosines', () => {
    for (const c of Object.values(CALIBRATIONS)) {
      const p = thresholdPresets(c);
      expect(p.strict).toBeGreaterThan(p.medium);
      expect(p.medium).toBeGreaterThan(p.low);
      expect(p.medium).toBeCloseTo(toConfidence(c.cosineAtFar.medium, c), 4);
    }
  });

  it('resolves thresholds with the recogniser given', () => {
    expect(resolveThreshold(undefined, sfaceMirror)).toBe(DEFAULT_THRESHOLD);
    expect(resolveThreshold('none', sfaceMirror)).toBeNull();
    expect(resolveThreshold('strict', sfaceMirror)).toBe(thresholdPresets(sfaceMirror).strict);
    expect(resolveThreshold('strict', CALIBRATIONS.faceres)).toBe(thresholdPresets(CALIBRATIONS.faceres).strict);
    expect(resolveThreshold(0.3, CALIBRATIONS.faceres)).toBe(0.3);
    expect(() => resolveThreshold(1.5, CALIBRATIONS.faceres)).toThrow(RangeError);
    expect(isVerified(0.75, 0.75)).toBe(true);
    expect(isVerified(0.7499, 0.75)).toBe(false);
  });

  it('refuses a recogniser without measured thresholds', () => {
    expect(calibrationOf('faceres')).toBe(CALIBRATIONS.faceres);
    expect(() => calibrationOf('mobileface')).toThrow(/no calibration/);
  });
});

describe("identify's 1:N confidence", () => {
  const fitted = Object.entries(CALIBRATIONS).filter(([, c]) => c.openSet);

  it('has a fit for the default recogniser', () => {
    expect(CALIBRATIONS[DEFAULT_RECOGNIZER].openSet).toBeDefined();
  });

  it('rises with the cosine and falls with the number of faces searched, as odds divided by N', () => {
    for (const c of Object.values(CALIBRATIONS)) {
      for (const n of [1, 1e3, 1e6]) {
        let prev = 0;
        for (let cos = -1; cos <= 1; cos += 0.01) {
          const v = identifyConfidence(cos, n, c);
          expect(v).toBeGreaterThanOrEqual(prev);
          expect(v).toBeLessThanOrEqual(1);
          prev = v;
        }
      }
      const odds = (p: number) => p / (1 - p);
      const cos = identifyCosine(0.5, 1000, c);
      // Ten times the faces: a tenth of the odds.
      expect(odds(identifyConfidence(cos, 10_000, c)) / odds(identifyConfidence(cos, 1000, c))).toBeCloseTo(0.1, 6);
      expect(identifyConfidence(cos, 1000, c)).toBeCloseTo(0.5, 6);
    }
    expect(identifyConfidence(Number.NaN, 10, sfaceMirror)).toBe(0);
    // An empty scope counts as one face, never as fewer.
    expect(identifyConfidence(0.5, 0, sfaceMirror)).toBe(identifyConfidence(0.5, 1, sfaceMirror));
  });

  it('lets at most 2% of strangers through at the default threshold from a hundred to a billion faces', () => {
    for (const [name, c] of fitted) {
      let prev = 0;
      for (const n of [1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9]) {
        const cos = identifyCosine(DEFAULT_THRESHOLD, n, c);
        const fpir = falsePositiveIdentificationRate(cos, n, c);
        expect(fpir, `${name} at N = ${n}`).toBeLessThanOrEqual(0.02);
        expect(fpir, `${name} at N = ${n}`).toBeGreaterThan(1e-4);
        // More faces searched need a higher cosine for the same confidence.
        expect(cos).toBeGreaterThan(prev);
        prev = cos;
      }
    }
  });

  it('keeps the 1:1 default lax where 1:N needs more: the best of 12,000 impostors passes it almost surely', () => {
    const c = CALIBRATIONS[DEFAULT_RECOGNIZER];
    const oneToOne = c.center + Math.log(DEFAULT_THRESHOLD / (1 - DEFAULT_THRESHOLD)) / c.slope;
    expect(falsePositiveIdentificationRate(oneToOne, 12_000, c)).toBeGreaterThan(0.9);
    expect(identifyCosine(DEFAULT_THRESHOLD, 12_000, c)).toBeGreaterThan(oneToOne + 0.1);
  });

  it('turns presets into shares of strangers named at the N searched', () => {
    for (const [name, c] of fitted) {
      for (const n of [1, 1e3, 1e6]) {
        const t = { strict: 0, medium: 0, low: 0 };
        for (const preset of ['strict', 'medium', 'low'] as const) {
          t[preset] = resolveIdentifyThreshold(preset, n, c)!;
          const fpir = falsePositiveIdentificationRate(identifyCosine(t[preset], n, c), n, c);
          expect(Math.abs(Math.log(fpir / IDENTIFY_FPIR[preset])), `${name} ${preset} at N = ${n}`).toBeLessThan(0.01);
        }
        expect(t.strict).toBeGreaterThan(t.medium);
        expect(t.medium).toBeGreaterThan(t.low);
      }
    }
    expect(resolveIdentifyThreshold(undefined, 1e6, sfaceMirror)).toBe(DEFAULT_THRESHOLD);
    expect(resolveIdentifyThreshold(0.9, 1e6, sfaceMirror)).toBe(0.9);
    expect(resolveIdentifyThreshold('none', 1e6, sfaceMirror)).toBeNull();
    expect(() => resolveIdentifyThreshold(2, 10, sfaceMirror)).toThrow(RangeError);
  });

  it('falls back on the 1:1 odds over N, and on verify\'s presets, for a recogniser without a fit', () => {
    const c = CALIBRATIONS.faceres;
    expect(c.openSet).toBeUndefined();
    const odds = (p: number) => p / (1 - p);
    expect(odds(identifyConfidence(0.6, 100, c))).toBeCloseTo(odds(toConfidence(0.6, c)) / 100, 6);
    expect(resolveIdentifyThreshold('medium', 1e6, c)).toBe(thresholdPresets(c).medium);
  });

  it('inverts the normal tail', () => {
    for (const p of [0.5, 0.1, 1e-3, 1e-6, 1e-9, 1e-12]) expect(upperTail(upperTailZ(p)) / p).toBeCloseTo(1, 5);
    expect(upperTailZ(0.5)).toBeCloseTo(0, 6);
    expect(upperTailZ(0.975)).toBeCloseTo(-1.959964, 5);
    expect(() => upperTailZ(0)).toThrow(RangeError);
  });
});
