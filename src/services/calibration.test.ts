import { describe, expect, it } from 'vitest';
import {
  CALIBRATIONS,
  DEFAULT_THRESHOLD,
  THRESHOLD_PRESETS,
  assertCalibrated,
  isVerified,
  resolveThreshold,
  toConfidence,
} from './calibration.js';

describe('calibration', () => {
  it('maps cosine to [0,1] monotonically', () => {
    let prev = -Infinity;
    for (let c = -1.2; c <= 1.2; c += 0.01) {
      const v = toConfidence(c);
      expect(v).toBeGreaterThanOrEqual(0);
      expect(v).toBeLessThanOrEqual(1);
      expect(v).toBeGreaterThanOrEqual(prev);
      prev = v;
    }
    expect(toConfidence(1)).toBeGreaterThan(0.999);
    expect(toConfidence(-1)).toBeLessThan(0.001);
    expect(toConfidence(Number.NaN)).toBe(0);
  });

  it('gives one half at the logistic centre', () => {
    expect(toConfidence(CALIBRATIONS.faceres.center)).toBeCloseTo(0.5, 10);
  });

  it('orders presets strict > default > low and places them at their cosines', () => {
    expect(THRESHOLD_PRESETS.strict).toBeGreaterThan(THRESHOLD_PRESETS.medium);
    expect(THRESHOLD_PRESETS.medium).toBeGreaterThan(THRESHOLD_PRESETS.low);
    const { cosineAtFar } = CALIBRATIONS.faceres;
    expect(THRESHOLD_PRESETS.medium).toBeCloseTo(toConfidence(cosineAtFar.medium), 4);
  });

  it('resolves thresholds', () => {
    expect(resolveThreshold(undefined)).toBe(DEFAULT_THRESHOLD);
    expect(resolveThreshold('none')).toBeNull();
    expect(resolveThreshold('strict')).toBe(THRESHOLD_PRESETS.strict);
    expect(resolveThreshold(0.3)).toBe(0.3);
    expect(() => resolveThreshold(1.5)).toThrow(RangeError);
    expect(isVerified(0.75, 0.75)).toBe(true);
    expect(isVerified(0.7499, 0.75)).toBe(false);
  });

  it('refuses a recogniser without measured thresholds', () => {
    expect(() => assertCalibrated('faceres')).not.toThrow();
    expect(() => assertCalibrated('mobileface')).toThrow(/no calibration/);
  });
});
