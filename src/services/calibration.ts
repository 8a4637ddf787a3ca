/**
 * From the recogniser's cosine similarity to the `confidence` clients see,
 * and the threshold presets in that confidence space.
 *
 * `confidence` is the probability that two faces belong to one person at
 * equal priors, from a logistic fit of genuine against impostor pairs:
 * confidence = 1 / (1 + exp(-slope * (cosine - center))). It means the same
 * whatever recogniser is loaded, so thresholds stay meaningful; the presets
 * are the confidences at the false-accept rates the API has always promised
 * (strict FAR 1e-5, medium 1e-3, low 1e-1).
 *
 * The numbers come from `node dist/bench/accuracy.js` on the labelled photos
 * (124 genuine and 1646 impostor pairs of 60 faces of 14 people). FAR 1e-1
 * and 1e-3 are empirical impostor quantiles; 1e-5 is beyond what 1646 pairs
 * can show, so it is the Gaussian tail of the impostor scores (mean 0.376,
 * sd 0.069). Each recogniser needs its own numbers: an uncalibrated one is
 * refused at start-up rather than served with wrong thresholds.
 */

export interface Calibration {
  /** Logistic slope and centre on the cosine axis. */
  slope: number;
  center: number;
  /** Cosine similarity at each false-accept rate target. */
  cosineAtFar: { strict: number; medium: number; low: number };
}

export const CALIBRATIONS: Readonly<Record<string, Calibration>> = {
  faceres: {
    slope: 39.93,
    center: 0.5044,
    cosineAtFar: { strict: 0.6687, medium: 0.5956, low: 0.4656 },
  },
};

/** The recogniser the presets below belong to (the manifest's default). */
export const CALIBRATED_RECOGNIZER = 'faceres';
const active = CALIBRATIONS[CALIBRATED_RECOGNIZER];

/** Confidence in [0, 1] for a cosine similarity; monotone non-decreasing. NaN counts as no similarity. */
export function toConfidence(cosine: number, c: Calibration = active): number {
  if (Number.isNaN(cosine)) return 0;
  return 1 / (1 + Math.exp(-c.slope * (cosine - c.center)));
}

const round4 = (x: number) => Math.round(x * 1e4) / 1e4;

/** Preset thresholds in confidence space, rounded to 4 decimals. */
export const THRESHOLD_PRESETS = {
  /** FAR 1e-5 */
  strict: round4(toConfidence(active.cosineAtFar.strict)),
  /** FAR 1e-3 */
  medium: round4(toConfidence(active.cosineAtFar.medium)),
  /** FAR 1e-1 */
  low: round4(toConfidence(active.cosineAtFar.low)),
} as const;

export type ThresholdPreset = keyof typeof THRESHOLD_PRESETS | 'none';

export const DEFAULT_THRESHOLD = 0.75;

/** Refuses a recogniser whose thresholds were never measured. */
export function assertCalibrated(recognizer: string): void {
  if (recognizer !== CALIBRATED_RECOGNIZER) {
    throw new Error(
      `recogniser ${recognizer} has no calibration (thresholds are measured for ${CALIBRATED_RECOGNIZER}); ` +
        'measure it with bench/accuracy.ts and add it to src/services/calibration.ts',
    );
  }
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
