/**
 * Phone-sized photos built from the small demo photos, for benches that must
 * see what users send (12 MP and more): the photo scaled to fill most of the
 * frame (bilinear), centred on a noisy grey background so the JPEG is not
 * trivially compressible, encoded at quality 90 with jpeg-js. Encoding 12 MP
 * in JavaScript takes seconds, so each photo is kept under .bench-out/ by its
 * source's hash and the frame size.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);

interface RawImage {
  width: number;
  height: number;
  data: Uint8Array;
}

const jpeg = require('jpeg-js') as {
  decode(data: Buffer, opts: { useTArray: true; formatAsRGBA: true }): RawImage;
  encode(image: RawImage, quality: number): { data: Buffer };
};

/** Of the frame's width and height, the most the photo may take. */
const FILL = 0.9;

/**
 * `photo` (a JPEG) scaled into a `width` x `height` frame, as a JPEG; cached in
 * `cacheDir`.
 */
export function phonePhoto(photo: Buffer, width: number, height: number, cacheDir: string): Buffer {
  const key = createHash('sha256').update(photo).digest('hex').slice(0, 16);
  const file = path.join(cacheDir, `${key}-${width}x${height}.jpg`);
  if (existsSync(file)) return readFileSync(file);
  const src = jpeg.decode(photo, { useTArray: true, formatAsRGBA: true });
  const scale = Math.min((width * FILL) / src.width, (height * FILL) / src.height);
  const [w, h] = [Math.round(src.width * scale), Math.round(src.height * scale)];
  const [left, top] = [Math.floor((width - w) / 2), Math.floor((height - h) / 2)];
  const out = new Uint8Array(width * height * 4);
  let seed = 12345;
  for (let i = 0; i < width * height; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    const v = 110 + ((seed >>> 16) % 36);
    out[i * 4] = v;
    out[i * 4 + 1] = v;
    out[i * 4 + 2] = v;
    out[i * 4 + 3] = 255;
  }
  for (let y = 0; y < h; y++) {
    const sy = Math.min(src.height - 1, Math.max(0, (y + 0.5) / scale - 0.5));
    const y0 = Math.floor(sy);
    const y1 = Math.min(src.height - 1, y0 + 1);
    const fy = sy - y0;
    for (let x = 0; x < w; x++) {
      const sx = Math.min(src.width - 1, Math.max(0, (x + 0.5) / scale - 0.5));
      const x0 = Math.floor(sx);
      const x1 = Math.min(src.width - 1, x0 + 1);
      const fx = sx - x0;
      const o = ((top + y) * width + left + x) * 4;
      for (let c = 0; c < 3; c++) {
        const at = (xx: number, yy: number) => src.data[(yy * src.width + xx) * 4 + c];
        const v = (at(x0, y0) * (1 - fx) + at(x1, y0) * fx) * (1 - fy) + (at(x0, y1) * (1 - fx) + at(x1, y1) * fx) * fy;
        out[o + c] = Math.round(v);
      }
    }
  }
  const encoded = jpeg.encode({ width, height, data: out }, 90).data;
  mkdirSync(cacheDir, { recursive: true });
  writeFileSync(file, encoded);
  return encoded;
}
