/**
 * From the recogniser's cosine similarity to the `confidence` clients see,
 * and the threshold presets in that confidence space.
 *
 * Clients compare `confidence` with a threshold (default 0.75, presets
 * strict/medium/low), so confidence must mean the same thing whatever model
 * is loaded. The mapping is a monotone piecewise-linear curve through measured
 * anchor points; the presets are the confidences at the false-accept rates the
 * API has always promised (strict FAR 1e-5, medium 1e-3, low 1e-1).
 *
 * PLACEHOLDER VALUES: the anchors and presets below are not yet measured for
 * our recogniser. They are to be replaced after calibrating on labelled pairs
 * (cosine at each FAR target → preset; genuine/impostor distributions →
 * anchors). Keep this module the only place holding such numbers.
 */

/** [cosine, confidence] anchors, strictly increasing in both; cosines outside are clamped to the ends. */
export const CALIBRATION_ANCHORS: ReadonlyArray<readonly [number, number]> = [
  [-1.0, 0.0],
  [0.0, 0.2], // PLACEHOLDER
  [0.15, 0.5], // PLACEHOLDER
  [0.25, 0.6], // PLACEHOLDER
  [0.35, 0.7], // PLACEHOLDER
  [0.45, 0.8], // PLACEHOLDER
  [0.6, 0.9], // PLACEHOLDER
  [1.0, 1.0],
];

/** Preset thresholds in confidence space (PLACEHOLDER until measured at their FAR targets). */
export const THRESHOLD_PRESETS = {
  /** FAR 1e-5 */
  strict: 0.8, // PLACEHOLDER
  /** FAR 1e-3 */
  medium: 0.7, // PLACEHOLDER
  /** FAR 1e-1 */
  low: 0.57, // PLACEHOLDER
} as const;

export type ThresholdPreset = keyof typeof THRESHOLD_PRESETS | 'none';

export const DEFAULT_THRESHOLD = 0.75;

/** Confidence in [0, 1] for a cosine similarity; monotone non-decreasing. NaN counts as no similarity. */
export function toConfidence(cosine: number): number {
  const a = CALIBRATION_ANCHORS;
  if (!(cosine > a[0][0])) return a[0][1];
  if (cosine >= a[a.length - 1][0]) return a[a.length - 1][1];
  for (let i = 1; i < a.length; i++) {
    const [x1, y1] = a[i];
    if (cosine <= x1) {
      const [x0, y0] = a[i - 1];
      return y0 + ((cosine - x0) * (y1 - y0)) / (x1 - x0);
    }
  }
  return a[a.length - 1][1];
}

/**
 * The decision threshold in confidence space for a request's `threshold`:
 * a preset name, a number in [0, 1], or undefined for the default. `none`
 * gives null: similarity only, no verdict.
 */
export function resolveThreshold(value: ThresholdPreset | number | undefined): number | null {
  if (value === undefined) return DEFAULT_THRESHOLD;
  if (value === 'none') return null;
  if (typeof value === 'number') {
    if (!(value >= 0 && value <= 1)) throw new RangeError(`threshold out of range: ${value}`);
    return value;
  }
  return THRESHOLD_PRESETS[value];
}

/** A match is verified when its confidence reaches the threshold. */
export function isVerified(confidence: number, threshold: number): boolean {
  return confidence >= threshold;
}
