// Inputs and comparisons shared by the conversion proofs: deterministic inputs, so that a
// failure is reproducible and every proof feeds the same kinds of picture, and one measure
// of how far two outputs are apart.
import type { ModelInput } from '../../models/prepare.js';

/** Deterministic uniform [0, 1) generator. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export type Pattern = 'noise' | 'smooth';

/**
 * A batch of images in the model's input range and layout: noise, or a smooth
 * picture-like pattern. Pass an input with another height/width for size-dynamic models.
 */
export function makeInput(input: ModelInput, batch: number, seed: number, pattern: Pattern): Float32Array {
  const { height: h, width: w, channels: c, scale, offset } = input;
  const rand = mulberry32(seed);
  const phase = Array.from({ length: 6 }, () => rand() * Math.PI * 2);
  const out = new Float32Array(batch * h * w * c);
  for (let b = 0; b < batch; b++)
    for (let y = 0; y < h; y++)
      for (let x = 0; x < w; x++)
        for (let ch = 0; ch < c; ch++) {
          const pixel =
            pattern === 'noise'
              ? rand() * 255
              : 127.5 + 60 * Math.sin(x / 9 + phase[ch] + b) + 60 * Math.cos(y / 13 + phase[ch + 3] - b);
          const i = input.layout === 'NCHW' ? ((b * c + ch) * h + y) * w + x : ((b * h + y) * w + x) * c + ch;
          out[i] = pixel * scale + offset;
        }
  return out;
}

/** Largest absolute difference, the expected output's magnitude, and their ratio. */
export function compare(expected: ArrayLike<number>, actual: ArrayLike<number>) {
  if (expected.length !== actual.length) throw new Error(`${actual.length} values, expected ${expected.length}`);
  let maxAbs = 0;
  let magnitude = 0;
  for (let i = 0; i < expected.length; i++) {
    maxAbs = Math.max(maxAbs, Math.abs(expected[i] - actual[i]));
    magnitude = Math.max(magnitude, Math.abs(expected[i]));
  }
  return { maxAbs, magnitude, relative: maxAbs / Math.max(magnitude, 1e-6) };
}
