/**
 * From the recogniser's cosine similarity to the `confidence` clients see,
 * and the threshold presets in that confidence space: verify's 1:1 logistic
 * here, identify's 1:N confidence (identifyConfidence) at the end of the file.
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

import { upperTail, upperTailZ } from './normal.js';

export interface Calibration {
  /** Logistic slope and centre on the cosine axis. */
  slope: number;
  center: number;
  /** Cosine similarity at each false-accept rate target. */
  cosineAtFar: { strict: number; medium: number; low: number };
  /** The score tails behind identify's 1:N confidence; absent: the recogniser cannot identify with a calibrated confidence. */
  openSet?: OpenSetFit;
}

/**
 * Normal models of the two score tails that decide a 1:N search (`npm run bench:open-set`
 * fits them on LFW): the impostor upper tail, fitted to the impostor cosines at per-pair
 * false-accept rates 1e-3 to 1e-5 (LFW counts them cleanly; at 1e-6 its label noise
 * dominates), and the genuine lower tail, fitted to the genuine cosines at false-reject
 * rates 2% to 30% (where identify decides). Fitting the tails, not the bulk, is the point:
 * a stranger's best match among N faces sits in the impostor tail, far from where the 1:1
 * logistic is fitted.
 */
export interface OpenSetFit {
  impostor: { mean: number; sd: number };
  genuine: { mean: number; sd: number };
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
    // bench:open-set -- --mode sface, on the same pairs as sface:mirror's.
    openSet: { impostor: { mean: 0.0623, sd: 0.0954 }, genuine: { mean: 0.7321, sd: 0.1447 } },
  },
  'sface:mirror': {
    slope: 28.25,
    center: 0.341,
    cosineAtFar: { strict: 0.4736, medium: 0.3603, low: 0.2005 },
    // bench:open-set on all 71,596,685 impostor and 97,640 genuine LFW pairs.
    openSet: { impostor: { mean: 0.0613, sd: 0.0963 }, genuine: { mean: 0.7413, sd: 0.144 } },
  },
  'sface:mirror+dlib-resnet': {
    slope: 48.47,
    center: 0.6177,
    cosineAtFar: { strict: 0.6955, medium: 0.6264, low: 0.528 },
    // bench:open-set -- --mode accurate, on the same pairs.
    openSet: { impostor: { mean: 0.4446, sd: 0.0586 }, genuine: { mean: 0.8465, sd: 0.0773 } },
  },
};

/**
 * The manifest's CPU default where the processor lacks AVX-512 (`defaults.recognizer`); its
 * presets are the ones the API documentation quotes. The running recogniser's calibration is
 * {@link calibrationOf} it, passed to whatever turns its similarities into confidences.
 */
export const DEFAULT_RECOGNIZER = 'sface:mirror';

/**
 * `recognizer`'s numbers, which every confidence and preset of its similarities uses. Read once
 * at start-up for the loaded recogniser; an uncalibrated one is refused rather than served with
 * wrong thresholds.
 */
export function calibrationOf(recognizer: string): Calibration {
  const c = CALIBRATIONS[recognizer];
  if (!c) {
    throw new Error(
      `recogniser ${recognizer} has no calibration (measured: ${Object.keys(CALIBRATIONS).join(', ')}); ` +
        'measure it with `npm run bench:accuracy` and add it to src/services/calibration.ts',
    );
  }
  return c;
}

/** Confidence in [0, 1] for a cosine similarity; monotone non-decreasing. NaN counts as no similarity. */
export function toConfidence(cosine: number, c: Calibration): number {
  if (Number.isNaN(cosine)) return 0;
  return 1 / (1 + Math.exp(-c.slope * (cosine - c.center)));
}

const round4 = (x: number) => Math.round(x * 1e4) / 1e4;

/** Preset thresholds in confidence space, rounded to 4 decimals. */
export function thresholdPresets(c: Calibration) {
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
export function resolveThreshold(value: ThresholdPreset | number | undefined, c: Calibration): number | null {
  if (value === undefined) return DEFAULT_THRESHOLD;
  if (value === 'none') return null;
  if (typeof value === 'number') {
    if (!(value >= 0 && value <= 1)) throw new RangeError(`threshold out of range: ${value}`);
    return value;
  }
  return thresholdPresets(c)[value];
}

/** A match is verified when its confidence reaches the threshold. */
export function isVerified(confidence: number, threshold: number): boolean {
  return confidence >= threshold;
}

/**
 * Identify's `confidence`: the probability that a match is the person, given the `searched`
 * faces it was the best of.
 *
 * A stranger's best match among N faces is the best of N impostor scores, whose density at
 * a cosine s is N·f_imp(s)·(1 − FAR(s))^(N−1); an enrolled person's match at s has density
 * f_gen(s)·(1 − FAR(s))^(N−1) (no impostor above it). At equal priors of "enrolled" and
 * "stranger" the odds of the match being the person are therefore LR(s) / N, with
 * LR = f_gen / f_imp the per-pair likelihood ratio from the normal fits of the two tails
 * (OpenSetFit), made non-decreasing in s:
 *
 *   confidence = 1 / (1 + N / LR(s))
 *
 * So the confidence falls as the deployment grows: a cosine that names someone among a
 * thousand faces may name nobody among a million. The share of strangers it lets through at
 * a threshold t is 1 − (1 − FAR(s_t))^N, where s_t is the cosine at which the confidence
 * reaches t; docs/engine.md has it per N. A recogniser without an OpenSetFit falls back on
 * the 1:1 logistic's odds divided by N, and on verify's presets: stricter than it needs to
 * be (more enrolled people missed), never laxer, since the logistic's impostor tail is far
 * heavier than the real one.
 */
export function identifyConfidence(cosine: number, searched: number, c: Calibration): number {
  if (Number.isNaN(cosine)) return 0;
  const logOdds = logLikelihoodRatio(cosine, c) - Math.log(Math.max(1, searched));
  return 1 / (1 + Math.exp(-logOdds));
}

/** ln(f_gen / f_imp) at a cosine, non-decreasing: held at its extreme where the two normals' quadratic turns. */
export function logLikelihoodRatio(cosine: number, c: Calibration): number {
  const fit = c.openSet;
  if (!fit) return c.slope * (cosine - c.center);
  const { impostor: i, genuine: g } = fit;
  const at = (x: number) => Math.log(i.sd / g.sd) - 0.5 * ((x - g.mean) / g.sd) ** 2 + 0.5 * ((x - i.mean) / i.sd) ** 2;
  // d/dx = (x − μi)/σi² − (x − μg)/σg², zero at the turning point below; a minimum when σg > σi.
  const curvature = 1 / i.sd ** 2 - 1 / g.sd ** 2;
  if (curvature === 0) return at(cosine);
  const turn = (i.mean / i.sd ** 2 - g.mean / g.sd ** 2) / curvature;
  if (curvature > 0 && cosine < turn) return at(turn);
  if (curvature < 0 && cosine > turn) return at(turn);
  return at(cosine);
}

/** Share of impostor pairs at or above a cosine (the per-pair false-accept rate), from the impostor tail's normal. */
export function pairFalseAcceptRate(cosine: number, c: Calibration): number {
  const fit = c.openSet;
  if (!fit) return Number.NaN;
  return upperTail((cosine - fit.impostor.mean) / fit.impostor.sd);
}

/** Share of strangers whose best match among `searched` faces reaches a cosine: 1 − (1 − FAR)^N. */
export function falsePositiveIdentificationRate(cosine: number, searched: number, c: Calibration): number {
  const far = pairFalseAcceptRate(cosine, c);
  return -Math.expm1(Math.max(1, searched) * Math.log1p(-far));
}

/** Identify's presets: the same names, as targets for the share of strangers named (FPIR) rather than of impostor pairs. */
export const IDENTIFY_FPIR = { strict: 1e-5, medium: 1e-3, low: 1e-1 } as const;

/**
 * The decision threshold of an identification among `searched` faces, in identify's
 * confidence: the default 0.75 and numbers as given; a preset is the confidence at the cosine
 * where the share of strangers named is the preset's FPIR (IDENTIFY_FPIR) for this N.
 */
export function resolveIdentifyThreshold(value: ThresholdPreset | number | undefined, searched: number, c: Calibration): number | null {
  const fit = c.openSet;
  if (typeof value !== 'string' || value === 'none' || !fit) return resolveThreshold(value, c);
  const n = Math.max(1, searched);
  // The per-pair rate whose best-of-N reaches the target: 1 − (1 − r)^(1/N).
  const perPair = -Math.expm1(Math.log1p(-IDENTIFY_FPIR[value]) / n);
  return identifyConfidence(fit.impostor.mean + fit.impostor.sd * upperTailZ(perPair), n, c);
}

/**
 * Identify's decision as a test of a cosine: whether a match among `searched` reaches
 * `threshold` (a preset, a number, or `none`: every match).
 */
export function identifyAccepts(threshold: ThresholdPreset | number | undefined, searched: number, c: Calibration): (cosine: number) => boolean {
  const t = resolveIdentifyThreshold(threshold, searched, c);
  return (cosine) => t === null || isVerified(identifyConfidence(cosine, searched, c), t);
}

/** The cosine at which identify's confidence among `searched` faces reaches `t`: the inverse of identifyConfidence, by bisection. */
export function identifyCosine(t: number, searched: number, c: Calibration): number {
  let lo = -1;
  let hi = 2;
  for (let i = 0; i < 80; i++) {
    const mid = (lo + hi) / 2;
    if (identifyConfidence(mid, searched, c) >= t) hi = mid;
    else lo = mid;
  }
  return hi;
}
