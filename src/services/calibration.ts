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
 * sface (with the yunet detector) comes from LFW deep-funneled through
 * `npm run bench:accuracy` (bench/lib/lfw.ts): 11,975 photos of 5,553 people,
 * the face nearest the centre of each (every photo has one), 97,640 genuine
 * pairs (every pair of photos of the 1,595 people with two or more) and
 * 71,596,685 impostor pairs (every pair of photos of different people). The
 * cosines are empirical impostor quantiles: FAR 1e-5 has 715 impostor pairs
 * above it, 1e-3 and 1e-1 come from a histogram of 1e-5 bins. The logistic is
 * fitted on every genuine pair against every impostor pair, each class
 * weighing half. LFW's label noise fills the far impostor tail (the same
 * photo or the same person filed under two names, two mislabelled photos,
 * twins), so the true false-accept rate at each preset is at most the
 * target. On the LFW 10-fold protocol sface scores 99.21% ± 0.26%.
 *
 * The other modes of docs/engine.md come from the same procedure on the same
 * photos (`npm run bench:accuracy -- --lfw-only`, which prints each entry):
 * sface:mirror (99.25% ± 0.33%) and sface:mirror+dlib-resnet, the `accurate`
 * mode (99.56% ± 0.33%; its cosines sit higher because half of each is dlib's,
 * whose impostor pairs average 0.83).
 *
 * faceres (with blazeface-back) comes from the labelled photos (124 genuine
 * and 1646 impostor pairs of 60 faces of 14 people): FAR 1e-1 and 1e-3 are
 * empirical impostor quantiles; 1e-5 is beyond what 1646 pairs can show, so
 * it is the Gaussian tail of the impostor scores (mean 0.376, sd 0.069).
 * Each recogniser needs its own numbers: an uncalibrated one is refused at
 * start-up rather than served with wrong thresholds.
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
  sface: {
    slope: 27.83,
    center: 0.3378,
    cosineAtFar: { strict: 0.471, medium: 0.3586, low: 0.1992 },
  },
  'sface:mirror': {
    slope: 28.25,
    center: 0.341,
    cosineAtFar: { strict: 0.4736, medium: 0.3603, low: 0.2005 },
  },
  'sface:mirror+dlib-resnet': {
    slope: 48.47,
    center: 0.6177,
    cosineAtFar: { strict: 0.6955, medium: 0.6264, low: 0.528 },
  },
};

/**
 * The manifest's default recogniser on the CPU (`defaults.recognizer`); its presets are the
 * ones the API documentation quotes.
 */
export const DEFAULT_RECOGNIZER = 'sface:mirror';
let active: Calibration = CALIBRATIONS[DEFAULT_RECOGNIZER];

/**
 * Makes `recognizer`'s numbers the ones every confidence and preset uses.
 * Called once at start-up with the loaded recogniser; an uncalibrated one is
 * refused rather than served with wrong thresholds.
 */
export function useCalibration(recognizer: string): void {
  const c = CALIBRATIONS[recognizer];
  if (!c) {
    throw new Error(
      `recogniser ${recognizer} has no calibration (measured: ${Object.keys(CALIBRATIONS).join(', ')}); ` +
        'measure it with `npm run bench:accuracy` and add it to src/services/calibration.ts',
    );
  }
  active = c;
}

/** Confidence in [0, 1] for a cosine similarity; monotone non-decreasing. NaN counts as no similarity. */
export function toConfidence(cosine: number, c: Calibration = active): number {
  if (Number.isNaN(cosine)) return 0;
  return 1 / (1 + Math.exp(-c.slope * (cosine - c.center)));
}

const round4 = (x: number) => Math.round(x * 1e4) / 1e4;

/** Preset thresholds in confidence space, rounded to 4 decimals. */
export function thresholdPresets(c: Calibration = active) {
  return {
    /** FAR 1e-5 */
    strict: round4(toConfidence(c.cosineAtFar.strict, c)),
    /** FAR 1e-3 */
    medium: round4(toConfidence(c.cosineAtFar.medium, c)),
    /** FAR 1e-1 */
    low: round4(toConfidence(c.cosineAtFar.low, c)),
  } as const;
}

export type ThresholdPreset = keyof ReturnType<typeof thresholdPresets> | 'none';

export const DEFAULT_THRESHOLD = 0.75;

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
  return thresholdPresets()[value];
}

/** A match is verified when its confidence reaches the threshold. */
export function isVerified(confidence: number, threshold: number): boolean {
  return confidence >= threshold;
}
