// Proves the dlib-resnet conversion (models/convert/dlib-dnn.ts): the converted graph,
// fed dlib's own face chips normalised as the manifest says, gives the descriptors dlib
// itself computes from those chips, one at a time and as a batch; and the parser refuses a
// damaged file with an error that says where. The chips and dlib's descriptors are the
// fixture bench/engine/dlib-reference.py made with dlib-bin 20.0.1 (test/fixtures/dlib-resnet);
// the converted model and the cached .dat are what `npm run models -- --all` leaves behind
// (`npm test` runs it first), so a missing one fails rather than skips.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inflateSync } from 'node:zlib';
import * as ort from 'onnxruntime-node';
import { beforeAll, describe, expect, it } from 'vitest';
import { DlibFormatError, parseDlibFaceResnet } from '../../models/convert/dlib-dnn.js';
import { dlibSourcePath, findProjectRoot, isDlibModel, readDlibSource, readManifest, type DlibModel } from '../../models/prepare.js';

const root = findProjectRoot(dirname(fileURLToPath(import.meta.url)));
const model = readManifest(root).models.find((m): m is DlibModel => m.id === 'dlib-resnet' && isDlibModel(m));
const fixtureDir = join(root, 'test', 'fixtures', 'dlib-resnet');

interface Fixture {
  dlib: string;
  chips: { file: string; photo: string; descriptor: number[] }[];
}

// ONNX Runtime and dlib (im2col + its own GEMM) sum in different orders, and the converted
// graph has each affine layer folded into its convolution's weights, so the two drift by float
// rounding through 29 convolutions. Measured against dlib-bin 20.0.1 on the six chips (descriptor
// values up to ~0.35 in magnitude, norms ~1.45): worst max |difference| 2.7e-7, worst cosine
// 1 - 2e-13; with ONNX Runtime's graph optimisations off 3.2e-7 (unfolded Mul/Add affines:
// 2.4e-7, so folding costs nothing measurable). 2e-6 leaves 6x headroom over all of those. What
// it catches, measured while writing the converter: add_prev's zero padding put at the start
// instead of the end 0.49 (channels) or 0.14 (rows/columns), filters flipped (convolution
// instead of correlation) 0.20, a stride-2 convolution padded by size/2 0.32, BGR instead of
// RGB 0.096, and even one weight of one mid-network filter off by 1% 3.2e-6. The cosine bound
// is the coarse check asked of every recogniser conversion; all the errors above but the 1%
// weight break it too.
const MAX_ABS_DIFFERENCE = 2e-6;
const MIN_COSINE = 0.9999;
/** Batch rows against single runs (measured: identical); ONNX Runtime may pick other kernels per batch size. */
const BATCH_MAX_ABS_DIFFERENCE = 1e-6;

/** Decodes an 8-bit, non-interlaced RGB or RGBA PNG to RGB bytes (what cv2.imwrite writes). */
function decodePng(png: Buffer): { width: number; height: number; rgb: Uint8Array } {
  if (png.readUInt32BE(0) !== 0x89504e47) throw new Error('not a PNG');
  let pos = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat: Buffer[] = [];
  while (pos < png.length) {
    const length = png.readUInt32BE(pos);
    const type = png.toString('latin1', pos + 4, pos + 8);
    const data = png.subarray(pos + 8, pos + 8 + length);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      const [depth, colour, , , interlace] = data.subarray(8);
      if (depth !== 8 || (colour !== 2 && colour !== 6) || interlace !== 0) throw new Error(`PNG depth ${depth}, colour ${colour}, interlace ${interlace}: not supported`);
      channels = colour === 2 ? 3 : 4;
    } else if (type === 'IDAT') {
      idat.push(data);
    } else if (type === 'IEND') {
      break;
    }
    pos += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const pixels = new Uint8Array(height * stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    const out = pixels.subarray(y * stride, (y + 1) * stride);
    const prev = y > 0 ? pixels.subarray((y - 1) * stride, y * stride) : new Uint8Array(stride);
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? out[x - channels] : 0;
      const b = prev[x];
      const c = x >= channels ? prev[x - channels] : 0;
      let predictor: number;
      switch (filter) {
        case 0:
          predictor = 0;
          break;
        case 1:
          predictor = a;
          break;
        case 2:
          predictor = b;
          break;
        case 3:
          predictor = (a + b) >> 1;
          break;
        case 4: {
          const p = a + b - c;
          const pa = Math.abs(p - a);
          const pb = Math.abs(p - b);
          const pc = Math.abs(p - c);
          predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          throw new Error(`PNG filter ${filter}`);
      }
      out[x] = (line[x] + predictor) & 0xff;
    }
  }
  if (channels === 3) return { width, height, rgb: pixels };
  const rgb = new Uint8Array(width * height * 3);
  for (let i = 0; i < width * height; i++) rgb.set(pixels.subarray(i * 4, i * 4 + 3), i * 3);
  return { width, height, rgb };
}

function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let ab = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / Math.sqrt(aa * bb);
}

function maxAbsDifference(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

describe('dlib-resnet against dlib', () => {
  let session: ort.InferenceSession;
  let fixture: Fixture;
  /** Each chip as the model's input: planar RGB, value = (pixel - mean) * scale + offset. */
  let inputs: Float32Array[];

  beforeAll(async () => {
    if (!model) throw new Error('models/manifest.json has no dlib-resnet model from a PyPI sdist');
    const onnx = join(root, 'models', model.onnx);
    if (!existsSync(onnx)) throw new Error(`${onnx} is missing: run npm run models -- --all (npm test runs it first)`);
    session = await ort.InferenceSession.create(onnx, { intraOpNumThreads: 2, interOpNumThreads: 1 });
    fixture = JSON.parse(readFileSync(join(fixtureDir, 'descriptors.json'), 'utf8')) as Fixture;
    const { height, width, scale, offset } = model.input;
    const mean = model.input.mean ?? [0, 0, 0];
    inputs = fixture.chips.map((chip) => {
      const png = decodePng(readFileSync(join(fixtureDir, chip.file)));
      expect([png.height, png.width]).toEqual([height, width]);
      const plane = height * width;
      const data = new Float32Array(3 * plane);
      for (let i = 0; i < plane; i++) {
        for (let k = 0; k < 3; k++) data[k * plane + i] = (png.rgb[i * 3 + k] - mean[k]) * scale + offset;
      }
      return data;
    });
  }, 120_000);

  async function run(batch: Float32Array[]): Promise<Float32Array> {
    const { height, width } = model!.input;
    const data = new Float32Array(batch.length * 3 * height * width);
    batch.forEach((x, i) => data.set(x, i * x.length));
    const feeds = { [model!.input.name]: new ort.Tensor('float32', data, [batch.length, 3, height, width]) };
    const out = await session.run(feeds);
    const descriptor = out[model!.outputs.embedding];
    expect(descriptor.dims).toEqual([batch.length, 128]);
    return descriptor.data as Float32Array;
  }

  it('declares the manifest input and output', () => {
    expect(session.inputNames).toEqual([model!.input.name]);
    expect(session.outputNames).toEqual([model!.outputs.embedding]);
    expect(fixture.chips.length).toBeGreaterThanOrEqual(5);
  });

  it("gives dlib's descriptor for each chip", async () => {
    let worstDifference = 0;
    let worstCosine = 1;
    for (const [i, chip] of fixture.chips.entries()) {
      const got = await run([inputs[i]]);
      const difference = maxAbsDifference(got, chip.descriptor);
      const cos = cosine(got, chip.descriptor);
      worstDifference = Math.max(worstDifference, difference);
      worstCosine = Math.min(worstCosine, cos);
      expect(difference, `${chip.file} (${chip.photo}): max |difference|`).toBeLessThanOrEqual(MAX_ABS_DIFFERENCE);
      expect(cos, `${chip.file} (${chip.photo}): cosine`).toBeGreaterThanOrEqual(MIN_COSINE);
    }
    console.log(JSON.stringify({ model: 'dlib-resnet', dlib: fixture.dlib, chips: fixture.chips.length, maxAbs: worstDifference, oneMinusCosine: 1 - worstCosine }));
  });

  it('gives the same rows for a batch of all chips as one at a time', async () => {
    const batch = await run(inputs);
    let worst = 0;
    for (const [i, x] of inputs.entries()) {
      const difference = maxAbsDifference(batch.subarray(i * 128, (i + 1) * 128), await run([x]));
      worst = Math.max(worst, difference);
      expect(difference, `row ${i}`).toBeLessThanOrEqual(BATCH_MAX_ABS_DIFFERENCE);
    }
    console.log(JSON.stringify({ model: 'dlib-resnet', batchVsSingleMaxAbs: worst }));
  });

  it("keeps dlib's chips of different people apart and its own threshold meaningful", async () => {
    // Not a proof of the conversion, a sanity check of the reading: distinct people's raw
    // descriptors lie beyond dlib's 0.6 euclidean threshold.
    const batch = await run(inputs);
    for (let i = 0; i < inputs.length; i++) {
      for (let j = i + 1; j < inputs.length; j++) {
        let d = 0;
        for (let k = 0; k < 128; k++) d += (batch[i * 128 + k] - batch[j * 128 + k]) ** 2;
        expect(Math.sqrt(d), `${fixture.chips[i].photo} vs ${fixture.chips[j].photo}`).toBeGreaterThan(0.6);
      }
    }
  });
});

describe('dlib-resnet parser on damage', () => {
  let bytes: Uint8Array;

  beforeAll(() => {
    if (!model) throw new Error('models/manifest.json has no dlib-resnet model from a PyPI sdist');
    if (!existsSync(dlibSourcePath(root, model))) throw new Error(`${dlibSourcePath(root, model)} is missing: run npm run models -- --all (npm test runs it first)`);
    bytes = readDlibSource(root, model);
  });

  it('reads the pinned file whole', () => {
    const net = parseDlibFaceResnet(bytes);
    expect(net.mean).toEqual([Math.fround(122.782), Math.fround(117.001), Math.fround(104.298)]);
    expect(net.loss).toEqual({ tag: 'loss_metric_2', margin: Math.fround(0.04), distanceThreshold: Math.fround(0.6) });
    expect(net.layers.filter((l) => l.layer.kind === 'con')).toHaveLength(29);
  });

  it('refuses a truncated file, saying where it ends', () => {
    for (const length of [0, 3, 200, 340, 1000, bytes.length >> 1, bytes.length - 1]) {
      const cut = () => parseDlibFaceResnet(bytes.subarray(0, length));
      expect(cut, `cut at ${length}`).toThrow(DlibFormatError);
      expect(cut, `cut at ${length}`).toThrow(/truncated|ends/);
    }
  });

  it('refuses trailing bytes', () => {
    const longer = new Uint8Array(bytes.length + 1);
    longer.set(bytes);
    expect(() => parseDlibFaceResnet(longer)).toThrow(/1 bytes follow the network/);
  });

  it('refuses a wrong layer tag, naming the layer and what it expected', () => {
    const at = Buffer.from(bytes).indexOf('con_4');
    expect(at).toBeGreaterThan(0);
    const damaged = Uint8Array.from(bytes);
    damaged[at + 4] = '9'.charCodeAt(0);
    expect(() => parseDlibFaceResnet(damaged)).toThrow(new RegExp(`stem con \\(layer 1 of \\d+\\), byte ${at - 2}: expected the name tag 'con_4' or 'con_5' or 'con_6', found 'con_9'`));
  });

  it('refuses a layer in the wrong place', () => {
    // The stem's relu_ tag replaced by a con_'s (same length): a convolution where anet_type
    // has a ReLU.
    const at = Buffer.from(bytes).indexOf('relu_');
    const damaged = Uint8Array.from(bytes);
    damaged.set(Buffer.from('con_4'), at);
    expect(() => parseDlibFaceResnet(damaged)).toThrow(/stem relu \(layer 3 of \d+\).*expected the name tag 'relu_' or 'relu_2', found 'con_4'/);
  });

  it('refuses a stride or padding other than anet_type declares', () => {
    // The stem con's stored settings follow its params tensor: num_filters 32, nr 7, nc 7,
    // stride_y 2 as the integers 01 20 01 07 01 07 01 02. Make stride_y 1.
    const at = Buffer.from(bytes).indexOf(Buffer.from([0x01, 0x20, 0x01, 0x07, 0x01, 0x07, 0x01, 0x02]));
    expect(at).toBeGreaterThan(0);
    const damaged = Uint8Array.from(bytes);
    damaged[at + 7] = 1;
    expect(() => parseDlibFaceResnet(damaged)).toThrow(/stem con .*stored con<32,7,7,1,2>.*declared con<32,7,7,2,2>/);
  });
});
