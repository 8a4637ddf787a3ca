// Proves that each converted ONNX model computes what the original TF.js graph computes:
// both run on identical inputs and their outputs are compared element by element. The
// originals are the files `npm run models -- --all` unpacks into models/npm/ (`npm test` runs
// it first), so a missing one fails rather than skips.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import { loadGraphModel, type GraphModel } from '@tensorflow/tfjs-converter';
import * as ort from 'onnxruntime-node';
import { beforeAll, describe, expect, it } from 'vitest';
import { ProtoWriter } from '../../models/convert/protobuf.js';
import { halfToFloat, type TfGraph } from '../../models/convert/tfjs-graph.js';
import { convertGraph, type ConvertResult } from '../../models/convert/to-onnx.js';
import {
  convertTfjsModel,
  findProjectRoot,
  isTfjsModel,
  readManifest,
  sourceDir,
  verifySources,
  type TfjsModel,
} from '../../models/prepare.js';
import { compare, makeInput, type Pattern } from './helpers.js';

const root = findProjectRoot(dirname(fileURLToPath(import.meta.url)));
const manifest = readManifest(root);

// Both engines compute in float32 but sum and fuse in different orders (ONNX Runtime also
// folds the transposes and fuses Conv+activation), so outputs drift by float rounding that
// grows with depth. The worst drift measured is 2.4e-6 of the output's magnitude; 1e-4 leaves
// 40x headroom yet sits far below what a wrong layout, padding or weight causes (errors of
// the order of the output itself).
const RELATIVE_TOLERANCE = 1e-4;

async function loadTfjs(model: TfjsModel): Promise<GraphModel> {
  const dir = sourceDir(root, model);
  const json = JSON.parse(readFileSync(join(dir, model.source.graph), 'utf8'));
  const weightSpecs = json.weightsManifest.flatMap((g: { weights: unknown[] }) => g.weights);
  const shards = json.weightsManifest.flatMap((g: { paths: string[] }) =>
    g.paths.map((p) => readFileSync(join(dirname(join(dir, model.source.graph)), p))),
  );
  const bytes = Buffer.concat(shards);
  const weightData = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  return loadGraphModel(
    tf.io.fromMemory({
      modelTopology: json.modelTopology,
      weightSpecs,
      weightData,
      format: json.format,
      signature: json.signature ?? json.userDefinedMetadata?.signature,
    }),
  );
}

function runTfjs(net: GraphModel, model: TfjsModel, data: Float32Array): Float32Array[] {
  const { height: h, width: w, channels: c } = model.input;
  const names = Object.values(model.outputs);
  return tf.tidy(() => {
    const x = tf.tensor4d(data, [data.length / (h * w * c), h, w, c]);
    const out = net.execute(x, names);
    return (Array.isArray(out) ? out : [out]).map((t) => t.dataSync() as Float32Array);
  });
}

async function runOnnx(session: ort.InferenceSession, model: TfjsModel, data: Float32Array): Promise<Float32Array[]> {
  const { height: h, width: w, channels: c } = model.input;
  const feeds = { [model.input.name]: new ort.Tensor('float32', data, [data.length / (h * w * c), h, w, c]) };
  const out = await session.run(feeds);
  return Object.values(model.outputs).map((name) => out[name].data as Float32Array);
}

beforeAll(async () => {
  await tf.setBackend('cpu');
  await tf.ready();
});

// The PyPI models have their own proof (fold-quantized.test.ts); every TF.js model is converted
// here in memory, optional ones included.
for (const model of manifest.models.filter(isTfjsModel)) {
  describe(`${model.id} conversion`, () => {
    let converted: ConvertResult;
    let session: ort.InferenceSession;
    let reference: GraphModel;

    beforeAll(async () => {
      verifySources(root, model);
      converted = convertTfjsModel(root, model);
      session = await ort.InferenceSession.create(converted.bytes, { intraOpNumThreads: 2, interOpNumThreads: 1 });
      reference = await loadTfjs(model);
    }, 120_000);

    it('declares the manifest input and outputs', () => {
      expect(session.inputNames).toEqual([model.input.name]);
      expect([...session.outputNames].sort()).toEqual(Object.values(model.outputs).sort());
    });

    const patterns: Pattern[] = model.role === 'detector' ? ['noise', 'smooth'] : ['noise'];
    for (const [k, pattern] of patterns.entries()) {
      it(`matches TF.js on a ${pattern} input`, async () => {
        const input = makeInput(model.input, 1, 17 + k, pattern);
        const expected = runTfjs(reference, model, input);
        const actual = await runOnnx(session, model, input);
        const names = Object.keys(model.outputs);
        const report = names.map((name, i) => {
          expect(actual[i].length, `${name} size`).toBe(expected[i].length);
          return { name, ...compare(expected[i], actual[i]) };
        });
        console.log(JSON.stringify({ model: model.id, pattern, outputs: report }));
        for (const r of report) {
          expect(r.magnitude, `${r.name} is all zeros, the comparison would prove nothing`).toBeGreaterThan(0);
          expect(r.relative, `${r.name}: max abs diff ${r.maxAbs} vs magnitude ${r.magnitude}`).toBeLessThan(RELATIVE_TOLERANCE);
        }
      }, 120_000);
    }

    if (model.input.dynamicBatch) {
      it('gives each image of a batch of 3 the same result as running it alone', async () => {
        const batch = makeInput(model.input, 3, 99, 'smooth');
        const together = await runOnnx(session, model, batch);
        const per = batch.length / 3;
        for (let b = 0; b < 3; b++) {
          const alone = await runOnnx(session, model, batch.slice(b * per, (b + 1) * per));
          alone.forEach((out, i) => {
            const slice = together[i].slice(b * out.length, (b + 1) * out.length);
            expect(compare(out, slice).relative).toBeLessThan(1e-5);
          });
        }
      }, 60_000);
    }
  });
}

describe('converter building blocks', () => {
  it('encodes varints, including negative int64 as ten bytes', () => {
    expect([...new ProtoWriter().varint(1, 300).finish()]).toEqual([0x08, 0xac, 0x02]);
    const negative = new ProtoWriter().varint(3, -1).finish();
    expect(negative.length).toBe(11);
    expect(negative[10]).toBe(0x01);
  });

  it('decodes float16 weights', () => {
    expect(halfToFloat(0x3c00)).toBe(1);
    expect(halfToFloat(0xc000)).toBe(-2);
    expect(halfToFloat(0x0001)).toBeCloseTo(5.960464477539063e-8, 20);
    expect(halfToFloat(0x7c00)).toBe(Infinity);
  });

  const tinyGraph = (op: string): TfGraph => ({
    nodes: [
      { name: 'x', op: 'Placeholder', inputs: [], attr: { dtype: { type: 'DT_FLOAT' }, shape: { shape: { dim: [{ size: '-1' }, { size: '4' }, { size: '4' }, { size: '1' }] } } } },
      { name: 'y', op, inputs: ['x'], attr: {} },
    ],
    weights: new Map(),
    signatureOutputs: ['y'],
  });

  it('names the op it cannot translate', () => {
    expect(() => convertGraph(tinyGraph('Cumsum'), { graphName: 't', dynamicBatch: true })).toThrow(/unsupported TensorFlow op Cumsum/);
  });

  it('refuses a reshape that would fold the batch into features', () => {
    const g = tinyGraph('Reshape');
    g.nodes[1].inputs.push('shape');
    g.nodes.push({ name: 'shape', op: 'Const', inputs: [], attr: {} });
    g.weights.set('shape', { dtype: 'int32', shape: [1], data: new Int32Array([-1]) });
    expect(() => convertGraph(g, { graphName: 't', dynamicBatch: true })).toThrow(/does not keep the batch/);
  });
});
