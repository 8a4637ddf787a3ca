/**
 * Photos placed into larger frames, the way a camera or a phone sees a
 * person: the photo scaled (bilinear) and put anywhere on a noisy grey
 * background (so the JPEG is not trivially compressible), parts outside the
 * frame cut off, encoded at quality 90 with jpeg-js.
 */
import { createRequire } from 'node:module';

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

export interface Placement {
  /** The frame's size. */
  width: number;
  height: number;
  /** Frame pixels per photo pixel. */
  scale: number;
  /** Where the photo's top-left corner lands in the frame (may be negative: cut off). */
  left: number;
  top: number;
}

/** The size of a JPEG, read by decoding it. */
export function jpegSize(photo: Buffer): { width: number; height: number } {
  const { width, height } = jpeg.decode(photo, { useTArray: true, formatAsRGBA: true });
  return { width, height };
}

/** `photo` (a JPEG) scaled and placed in a frame as `at` says, as a JPEG. */
export function placeInFrame(photo: Buffer, at: Placement): Buffer {
  const { width, height, scale, left, top } = at;
  const src = jpeg.decode(photo, { useTArray: true, formatAsRGBA: true });
  const [w, h] = [Math.round(src.width * scale), Math.round(src.height * scale)];
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
  for (let y = Math.max(0, -top); y < Math.min(h, height - top); y++) {
    const sy = Math.min(src.height - 1, Math.max(0, (y + 0.5) / scale - 0.5));
    const y0 = Math.floor(sy);
    const y1 = Math.min(src.height - 1, y0 + 1);
    const fy = sy - y0;
    for (let x = Math.max(0, -left); x < Math.min(w, width - left); x++) {
      const sx = Math.min(src.width - 1, Math.max(0, (x + 0.5) / scale - 0.5));
      const x0 = Math.floor(sx);
      const x1 = Math.min(src.width - 1, x0 + 1);
      const fx = sx - x0;
      const o = ((top + y) * width + left + x) * 4;
      for (let c = 0; c < 3; c++) {
        const px = (xx: number, yy: number) => src.data[(yy * src.width + xx) * 4 + c];
        const v = (px(x0, y0) * (1 - fx) + px(x1, y0) * fx) * (1 - fy) + (px(x0, y1) * (1 - fx) + px(x1, y1) * fx) * fy;
        out[o + c] = Math.round(v);
      }
    }
  }
  return jpeg.encode({ width, height, data: out }, 90).data;
}

export interface FaceBox {
  x1: number;
  y1: number;
  x2: number;
  y2: number;
}

export interface FacePlacement {
  /** The frame's size. */
  width: number;
  height: number;
  /** The face's width in the frame, in pixels. */
  face: number;
  /** Where the face's box sits, each of x and y as a fraction of the room left (0: 1 px from the left or top edge, 1: from the right or bottom). */
  fx: number;
  fy: number;
}

/** `photo` scaled so that its face `subject` (a box on it) is `at.face` wide, placed as `at` says: the frame, and where the face's box now is. */
export function placeFace(photo: Buffer, subject: FaceBox, at: FacePlacement): { frame: Buffer; face: FaceBox } {
  const scale = at.face / (subject.x2 - subject.x1);
  const [fw, fh] = [(subject.x2 - subject.x1) * scale, (subject.y2 - subject.y1) * scale];
  const x = Math.round(1 + at.fx * (at.width - fw - 2));
  const y = Math.round(1 + at.fy * (at.height - fh - 2));
  const frame = placeInFrame(photo, { width: at.width, height: at.height, scale, left: Math.round(x - subject.x1 * scale), top: Math.round(y - subject.y1 * scale) });
  return { frame, face: { x1: x, y1: y, x2: x + fw, y2: y + fh } };
}

/** Overlap of two boxes: intersection over union. */
export function iou(a: FaceBox, b: FaceBox): number {
  const w = Math.max(0, Math.min(a.x2, b.x2) - Math.max(a.x1, b.x1));
  const h = Math.max(0, Math.min(a.y2, b.y2) - Math.max(a.y1, b.y1));
  const area = (x: FaceBox) => (x.x2 - x.x1) * (x.y2 - x.y1);
  return (w * h) / (area(a) + area(b) - w * h);
}
