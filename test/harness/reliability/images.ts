/**
 * Hostile images made in code: decompression bombs (tiny files that claim or
 * inflate to tens of megapixels), headers that lie about the size, truncated
 * and mislabelled files. PNG rows are deflated with node:zlib, which is how a
 * 40-megapixel image fits in a few tens of kilobytes; JPEGs are encoded with
 * jpeg-js (a dev dependency, loaded on first use).
 */
import { createRequire } from 'node:module';
import { constants, crc32, deflateSync } from 'node:zlib';

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function pngChunk(type: string, data: Buffer): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([len, body, crc]);
}

function ihdr(width: number, height: number, colourType: number): Buffer {
  const h = Buffer.alloc(13);
  h.writeUInt32BE(width, 0);
  h.writeUInt32BE(height, 4);
  h[8] = 8; // bit depth
  h[9] = colourType; // 0 grey, 2 RGB, 6 RGBA
  return h;
}

/**
 * A valid 8-bit PNG of `width` × `height` pixels, every row filter 0 and
 * every pixel `value`. Rows are deflated in a stream so even a 40-megapixel
 * RGB image never needs its raw bytes in memory at once.
 */
export function uniformPng(width: number, height: number, colourType: 0 | 2 | 6 = 0, value = 0x80): Buffer {
  const channels = colourType === 0 ? 1 : colourType === 2 ? 3 : 4;
  const rowBytes = width * channels + 1;
  // Identical rows compress to almost nothing; one deflate over the repeated block keeps this fast.
  const rowsPerBlock = Math.max(1, Math.min(height, Math.floor((8 << 20) / rowBytes)));
  const block = Buffer.alloc(rowBytes * rowsPerBlock, value);
  for (let r = 0; r < rowsPerBlock; r++) block[r * rowBytes] = 0;
  const raw: Buffer[] = [];
  for (let done = 0; done < height; done += rowsPerBlock) raw.push(block.subarray(0, rowBytes * Math.min(rowsPerBlock, height - done)));
  const idat = deflateSync(Buffer.concat(raw), { level: constants.Z_BEST_COMPRESSION });
  return Buffer.concat([PNG_SIGNATURE, pngChunk('IHDR', ihdr(width, height, colourType)), pngChunk('IDAT', idat), pngChunk('IEND', Buffer.alloc(0))]);
}

/** A PNG whose header claims `width` × `height` but whose pixel data is a few bytes: refused from the header, or corrupt. */
export function lyingPng(width: number, height: number): Buffer {
  return Buffer.concat([PNG_SIGNATURE, pngChunk('IHDR', ihdr(width, height, 2)), pngChunk('IDAT', deflateSync(Buffer.alloc(64))), pngChunk('IEND', Buffer.alloc(0))]);
}

/** A PNG with a broken IHDR checksum. */
export function badCrcPng(): Buffer {
  const png = uniformPng(64, 64);
  png[29] ^= 0xff; // inside IHDR's CRC
  return png;
}

/**
 * `jpeg` with its frame header rewritten to claim `width` × `height` and the
 * entropy-coded data cut `keep` bytes after the start of scan: a decoder that
 * trusts the header allocates the full frame before finding out.
 */
export function lyingJpeg(jpeg: Buffer, width: number, height: number, keep = 256): Buffer {
  const out = Buffer.from(jpeg);
  let at = 2;
  let sos = -1;
  while (at + 4 <= out.length) {
    if (out[at] !== 0xff) throw new Error('lyingJpeg: lost the marker chain');
    const marker = out[at + 1];
    const len = out.readUInt16BE(at + 2);
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      out.writeUInt16BE(height, at + 5);
      out.writeUInt16BE(width, at + 7);
    }
    if (marker === 0xda) {
      sos = at + 2 + len;
      break;
    }
    at += 2 + len;
  }
  if (sos < 0) throw new Error('lyingJpeg: no start of scan');
  return out.subarray(0, Math.min(out.length, sos + keep));
}

/** A lossless WebP (VP8L) header claiming `width` × `height` (each at most 16384) over a few bytes of data. */
export function lyingWebp(width: number, height: number): Buffer {
  const vp8l = Buffer.alloc(5 + 16);
  vp8l[0] = 0x2f;
  const bits = (width - 1) | ((height - 1) << 14); // 14 bits each, alpha and version bits zero
  vp8l.writeUInt32LE(bits >>> 0, 1);
  const chunk = Buffer.concat([Buffer.from('VP8L'), Buffer.from(Uint32Array.of(vp8l.length).buffer), vp8l]);
  const riff = Buffer.concat([Buffer.from('WEBP'), chunk]);
  return Buffer.concat([Buffer.from('RIFF'), Buffer.from(Uint32Array.of(riff.length).buffer), riff]);
}

/** A GIF header: a format the service does not take. */
export function gif(): Buffer {
  return Buffer.concat([Buffer.from('GIF89a'), Buffer.from([1, 0, 1, 0, 0, 0, 0]), Buffer.from([0x2c, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 1, 0, 0x3b])]);
}

/** A BMP header claiming 30000 × 30000 pixels. */
export function bmp(): Buffer {
  const b = Buffer.alloc(54);
  b.write('BM', 0, 'latin1');
  b.writeUInt32LE(54, 2);
  b.writeUInt32LE(54, 10);
  b.writeUInt32LE(40, 14);
  b.writeInt32LE(30000, 18);
  b.writeInt32LE(30000, 22);
  b.writeUInt16LE(1, 26);
  b.writeUInt16LE(24, 28);
  return b;
}

interface JpegJs {
  encode(img: { data: Buffer; width: number; height: number }, quality?: number): { data: Buffer };
  decode(data: Buffer, opts?: { useTArray?: boolean; formatAsRGBA?: boolean }): { data: Uint8Array; width: number; height: number };
}

const jpegJs = (): JpegJs => createRequire(import.meta.url)('jpeg-js') as JpegJs;

/** A baseline JPEG whose frame header claims `width` × `height` while its scan holds 64 × 64 pixels: a few kilobytes announcing tens of megapixels. */
export function jpegAnnouncing(width: number, height: number): Buffer {
  const side = 64;
  const data = Buffer.alloc(side * side * 4);
  for (let i = 0; i < side * side; i++) data.set([(i % side) * 4, Math.floor(i / side) * 4, 128, 255], i * 4);
  const jpeg = Buffer.from(jpegJs().encode({ data, width: side, height: side }, 90).data);
  const sof = jpeg.indexOf(Buffer.from([0xff, 0xc0]));
  if (sof < 0) throw new Error('the encoder wrote no baseline frame header');
  jpeg.writeUInt16BE(height, sof + 5);
  jpeg.writeUInt16BE(width, sof + 7);
  return jpeg;
}

/** A `side` × `side` JPEG cut from a demo photo around the box, resampled (nearest pixel). */
export function cropJpeg(photo: Buffer, box: { x1: number; y1: number; x2: number; y2: number }, side = 150): Buffer {
  const img = jpegJs().decode(photo, { useTArray: true, formatAsRGBA: true });
  const extent = Math.max(box.x2 - box.x1, box.y2 - box.y1) * 1.3;
  const [cx, cy] = [(box.x1 + box.x2) / 2, (box.y1 + box.y2) / 2];
  const out = Buffer.alloc(side * side * 4);
  for (let y = 0; y < side; y++) {
    for (let x = 0; x < side; x++) {
      const sx = Math.min(img.width - 1, Math.max(0, Math.round(cx - extent / 2 + ((x + 0.5) * extent) / side)));
      const sy = Math.min(img.height - 1, Math.max(0, Math.round(cy - extent / 2 + ((y + 0.5) * extent) / side)));
      const from = (sy * img.width + sx) * 4;
      out.set(img.data.subarray(from, from + 4), (y * side + x) * 4);
    }
  }
  return Buffer.from(jpegJs().encode({ data: out, width: side, height: side }, 90).data);
}
