import { afterEach, describe, expect, it } from 'vitest';
import {
  CALIBRATIONS,
  DEFAULT_RECOGNIZER,
  DEFAULT_THRESHOLD,
  isVerified,
  resolveThreshold,
  thresholdPresets,
  toConfidence,
  useCalibration,
} from './calibration.js';

describe('calibration', () => {
  afterEach(() => useCalibration(DEFAULT_RECOGNIZER));

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
    expect(toConfidence(Number.NaN)).toBe(0);
  });

  it('gives one half at the logistic centre of the active recogniser', () => {
    expect(toConfidence(CALIBRATIONS[DEFAULT_RECOGNIZER].center)).toBeCloseTo(0.5, 10);
    useCalibration('faceres');
    expect(toConfidence(CALIBRATIONS.faceres.center)).toBeCloseTo(0.5, 10);
  });

  it('orders presets strict > medium > low and places them at their cosines', () => {
    for (const c of Object.values(CALIBRATIONS)) {
      const p = thresholdPresets(c);
      expect(p.strict).toBeGreaterThan(p.medium);
      expect(p.medium).toBeGreaterThan(p.low);
      expect(p.medium).toBeCloseTo(toConfidence(c.cosineAtFar.medium, c), 4);
    }
  });

  it('resolves thresholds with the active recogniser', () => {
    expect(resolveThreshold(undefined)).toBe(DEFAULT_THRESHOLD);
    expect(resolveThreshold('none')).toBeNull();
    expect(resolveThreshold('strict')).toBe(thresholdPresets(CALIBRATIONS[DEFAULT_RECOGNIZER]).strict);
    useCalibration('faceres');
    expect(resolveThreshold('strict')).toBe(thresholdPresets(CALIBRATIONS.faceres).strict);
    expect(resolveThreshold(0.3)).toBe(0.3);
    expect(() => resolveThreshold(1.5)).toThrow(RangeError);
    expect(isVerified(0.75, 0.75)).toBe(true);
    expect(isVerified(0.7499, 0.75)).toBe(false);
  });

  it('refuses a recogniser without measured thresholds', () => {
    expect(() => useCalibration('faceres')).not.toThrow();
    expect(() => useCalibration('mobileface')).toThrow(/no calibration/);
  });
});
