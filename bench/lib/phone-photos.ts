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
import path from 'node:path';
import { jpegSize, placeInFrame } from '../../test/harness/frames.js';

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
  const src = jpegSize(photo);
  const scale = Math.min((width * FILL) / src.width, (height * FILL) / src.height);
  const [w, h] = [Math.round(src.width * scale), Math.round(src.height * scale)];
  const encoded = placeInFrame(photo, { width, height, scale, left: Math.floor((width - w) / 2), top: Math.floor((height - h) / 2) });
  mkdirSync(cacheDir, { recursive: true });
  writeFileSync(file, encoded);
  return encoded;
}
