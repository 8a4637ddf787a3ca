import { describe, expect, it } from 'vitest';
import { CALIBRATION_ANCHORS, DEFAULT_THRESHOLD, isVerified, resolveThreshold, THRESHOLD_PRESETS, toConfidence } from './calibration.js';

describe('calibration', () => {
  it('maps cosine to [0,1] monotonically, clamping the ends', () => {
    let prev = -Infinity;
    for (let c = -1.2; c <= 1.2; c += 0.01) {
      const v = toConfidence(c);
      expect(v).toBeGreaterThanOrEqual(0);
      expect(v).toBeLessThanOrEqual(1);
      expect(v).toBeGreaterThanOrEqual(prev);
      prev = v;
    }
    expect(toConfidence(1)).toBe(1);
    expect(toConfidence(Number.NaN)).toBe(0);
  });

  it('passes through its anchors', () => {
    for (const [cos, conf] of CALIBRATION_ANCHORS) expect(toConfidence(cos)).toBeCloseTo(conf, 10);
  });

  it('keeps anchors increasing and presets ordered strict > medium > low', () => {
    for (let i = 1; i < CALIBRATION_ANCHORS.length; i++) {
      expect(CALIBRATION_ANCHORS[i][0]).toBeGreaterThan(CALIBRATION_ANCHORS[i - 1][0]);
      expect(CALIBRATION_ANCHORS[i][1]).toBeGreaterThan(CALIBRATION_ANCHORS[i - 1][1]);
    }
    expect(THRESHOLD_PRESETS.strict).toBeGreaterThan(THRESHOLD_PRESETS.medium);
    expect(THRESHOLD_PRESETS.medium).toBeGreaterThan(THRESHOLD_PRESETS.low);
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
});
