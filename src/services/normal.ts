/** The standard normal's upper tail and its inverse, for the calibration's score models. */

/** Complementary error function; Numerical Recipes' Chebyshev fit, relative error below 1.2e-7 everywhere. */
export function erfc(x: number): number {
  const z = Math.abs(x);
  const t = 1 / (1 + 0.5 * z);
  const r =
    t *
    Math.exp(
      -z * z -
        1.26551223 +
        t *
          (1.00002368 +
            t *
              (0.37409196 +
                t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))),
    );
  return x >= 0 ? r : 2 - r;
}

/** P(Z > z) for a standard normal Z. */
export function upperTail(z: number): number {
  return 0.5 * erfc(z / Math.SQRT2);
}

/** The z with P(Z > z) = p, for p in (0, 1); bisection to 1e-12 over [-40, 40] (the tail reaches 1e-300 well inside). */
export function upperTailZ(p: number): number {
  if (!(p > 0 && p < 1)) throw new RangeError(`tail probability out of (0, 1): ${p}`);
  let lo = -40;
  let hi = 40;
  while (hi - lo > 1e-12) {
    const mid = (lo + hi) / 2;
    if (upperTail(mid) > p) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}
