// Proves the rewrite of the PyPI models (models/convert/fold-quantized.ts): every folded
// weight equals a plain dequantisation written here from the ONNX definition, the
// converted graph computes exactly what the original graph computes with those weights,
// and it keeps one real input, no DequantizeLinear and the symbolic dims the manifest
// asks for. The originals come from the wheel `npm run models` caches (npm install runs
// it), so a missing wheel fails rather than skips.
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as ort from 'onnxruntime-node';
import { beforeAll, describe, expect, it } from 'vitest';
import { FOLD_VERSION, foldQuantized } from '../../models/convert/fold-quantized.js';
import { DataType, encodeModel, encodeTensor, floatTensor, type DataTypeId, type OnnxNode, type OnnxTensor } from '../../models/convert/onnx.js';
import {
  EntryField,
  GraphField,
  ModelField,
  TensorTypeField,
  TypeField,
  ValueInfoField,
  decodeModel,
  intAttribute,
  readNode,
  readTensor,
  replaceMessage,
  tensorDims,
  tensorName,
  valueInfoDims,
  valueInfoName,
  type NodeView,
  type TensorData,
} from '../../models/convert/onnx-reader.js';
import { ProtoMessage, ProtoWriter, type WireField } from '../../models/convert/protobuf.js';
import { convertPypiModel, findProjectRoot, isPypiModel, readManifest, readPypiSource, type PypiModel } from '../../models/prepare.js';
import { compare, makeInput, mulberry32 } from './helpers.js';

const root = findProjectRoot(dirname(fileURLToPath(import.meta.url)));
const pypiModels = readManifest(root).models.filter(isPypiModel);

/**
 * DequantizeLinear as the ONNX spec words it, one element at a time: the element's index
 * along every axis picks its scale and zero point (all of them for a per-tensor scale, the
 * one along `axis` per axis, and with block_size the index divided by block_size along
 * `axis` and the index itself along every other axis); y = (x - zero_point) * scale in
 * float32.
 */
function referenceDequantize(x: TensorData, scale: TensorData, zeroPoint: TensorData | undefined, axisAttribute: number, blockSize: number): Float32Array {
  const rank = x.dims.length;
  const axis = axisAttribute < 0 ? axisAttribute + rank : axisAttribute;
  const out = new Float32Array(x.values.length);
  const index = new Array<number>(rank).fill(0);
  for (let flat = 0; flat < x.values.length; flat++) {
    let rest = flat;
    for (let d = rank - 1; d >= 0; d--) {
      index[d] = rest % x.dims[d];
      rest = Math.floor(rest / x.dims[d]);
    }
    let s = 0;
    if (blockSize > 0) {
      for (let d = 0; d < rank; d++) s = s * scale.dims[d] + (d === axis ? Math.floor(index[d] / blockSize) : index[d]);
    } else if (scale.values.length > 1) {
      s = index[axis];
    }
    const zp = zeroPoint ? zeroPoint.values[s] : 0;
    out[flat] = Math.fround((x.values[flat] - zp) * scale.values[s]);
  }
  return out;
}

interface Quantized {
  node: NodeView;
  reference: Float32Array;
  /** The tensor the converted model should hold: the DequantizeLinear output, or the Reshape of it. */
  finalName: string;
  finalDims: number[];
}

/** Every DequantizeLinear of a model with its reference value, read with nothing but the spec. */
function quantizedWeights(bytes: Uint8Array): Quantized[] {
  const { graph } = decodeModel(bytes);
  const constants = new Map(graph.messages(GraphField.initializer).map((t) => [tensorName(t), readTensor(t)]));
  const nodes = graph.messages(GraphField.node).map(readNode);
  return nodes
    .filter((n) => n.opType === 'DequantizeLinear')
    .map((node) => {
      const [x, scale, zeroPoint] = node.inputs.map((name) => constants.get(name)!);
      const reference = referenceDequantize(x, scale, zeroPoint, intAttribute(node, 'axis', 1), intAttribute(node, 'block_size', 0));
      const reshape = nodes.find((n) => n.opType === 'Reshape' && n.inputs[0] === node.outputs[0]);
      if (!reshape) return { node, reference, finalName: node.outputs[0], finalDims: x.dims };
      const shape = Array.from(constants.get(reshape.inputs[1])!.values);
      // These files spell every target shape out; a 0 or -1 would need Reshape's rules here.
      expect(shape.every((d) => d > 0)).toBe(true);
      return { node, reference, finalName: reshape.outputs[0], finalDims: shape };
    });
}

/**
 * The original graph run on the reference weights: each DequantizeLinear becomes an Identity
 * of a float initializer holding referenceDequantize's result; every other node, initializer
 * and value-info stays as the file has it. Only the graph inputs change (the real input
 * alone, as the original also lists weights and stale names nobody feeds) and the real
 * input's and the outputs' shapes are left undeclared, so that any size and batch can run.
 */
function referenceModel(bytes: Uint8Array, model: PypiModel, weights: Quantized[]): Uint8Array {
  const { model: file, graph } = decodeModel(bytes);
  const byNode = new Map(weights.map((w) => [w.node.name, w]));
  const fields: WireField[] = [];
  const add = (writer: ProtoWriter) => fields.push(...ProtoMessage.decode(writer.finish()).fields);
  const withoutShape = (f: WireField) => {
    const info = ProtoMessage.decode(f.payload);
    const type = info.message(ValueInfoField.type)!;
    const stripped = replaceMessage(type, TypeField.tensorType, type.message(TypeField.tensorType)!.without(TensorTypeField.shape));
    add(new ProtoWriter().bytes(f.field, replaceMessage(info, ValueInfoField.type, stripped).encode()));
  };
  for (const f of graph.fields) {
    if (f.field === GraphField.node) {
      const w = byNode.get(readNode(ProtoMessage.decode(f.payload)).name);
      if (w) {
        const constant = `${w.node.outputs[0]}:reference`;
        const identity = new ProtoWriter().string(1, constant).string(2, w.node.outputs[0]).string(3, w.node.name).string(4, 'Identity');
        add(new ProtoWriter().message(GraphField.node, identity));
        const dims = tensorDims(constantTensor(graph, w.node.inputs[0]));
        add(new ProtoWriter().message(GraphField.initializer, encodeTensor(floatTensor(constant, dims, w.reference))));
        continue;
      }
    } else if (f.field === GraphField.input) {
      if (valueInfoName(ProtoMessage.decode(f.payload)) === model.input.name) withoutShape(f);
      continue;
    } else if (f.field === GraphField.output) {
      withoutShape(f);
      continue;
    }
    fields.push(f);
  }
  return replaceMessage(file, ModelField.graph, new ProtoMessage(fields)).encode();
}

function constantTensor(graph: ProtoMessage, name: string): ProtoMessage {
  return graph.messages(GraphField.initializer).find((t) => tensorName(t) === name)!;
}

// Unoptimised sessions run the same kernels on the same weights in the same order, so the
// converted and reference graphs must agree to the bit. Warnings are off: the reference
// keeps the quantised tensors it no longer reads, and the runtime lists each one.
const EXACT = { intraOpNumThreads: 2, interOpNumThreads: 1, graphOptimizationLevel: 'disabled', logSeverityLevel: 3 } as const;
const OPTIMISED = { intraOpNumThreads: 2, interOpNumThreads: 1, logSeverityLevel: 3 } as const;

async function run(session: ort.InferenceSession, inputName: string, data: Float32Array, dims: number[]) {
  const out = await session.run({ [inputName]: new ort.Tensor('float32', data, dims) });
  return Object.fromEntries(session.outputNames.map((n) => [n, out[n]]));
}

// Optimised sessions fuse Conv with the BatchNormalization and activation that follow (the
// weights are constants now) and so round differently from the unfused reference. The
// drift is measured against the output's magnitude, or 1 where that is smaller (YuNet's
// cls/obj are probabilities, some near 0 everywhere): worst measured 1.1e-6 (SFace), so
// 1e-5 leaves 9x headroom and sits far below what one wrong weight causes.
const OPTIMISED_TOLERANCE = 1e-5;

/** The size the size-dynamic detector is tried at: not the nominal 640x640, and not square. */
const ODD_SIZE = { height: 320, width: 480 };

for (const model of pypiModels) {
  describe(`${model.id} from ${model.source.package} ${model.source.version}`, () => {
    let original: Uint8Array;
    let converted: Uint8Array;
    let weights: Quantized[];
    let exact: ort.InferenceSession;
    let reference: ort.InferenceSession;

    beforeAll(async () => {
      original = readPypiSource(root, model);
      converted = convertPypiModel(root, model).bytes;
      weights = quantizedWeights(original);
      exact = await ort.InferenceSession.create(converted, EXACT);
      reference = await ort.InferenceSession.create(referenceModel(original, model, weights), EXACT);
    }, 120_000);

    it('re-encodes the untouched source byte for byte', () => {
      expect(Buffer.compare(Buffer.from(ProtoMessage.decode(original).encode()), Buffer.from(original))).toBe(0);
    });

    it('holds the reference dequantisation in every folded weight, exactly, and every other initializer unchanged', () => {
      const { graph: before } = decodeModel(original);
      const { graph: after } = decodeModel(converted);
      const originals = new Map(before.all(GraphField.initializer).map((f) => [tensorName(ProtoMessage.decode(f.payload)), f.payload]));
      const folded = new Map(weights.map((w) => [w.finalName, w]));
      let maxAbs = 0;
      let elements = 0;
      for (const f of after.all(GraphField.initializer)) {
        const t = ProtoMessage.decode(f.payload);
        const w = folded.get(tensorName(t));
        if (!w) {
          // The scalar 0 of the PRelu rewrite is the one constant the converter adds.
          if (tensorName(t) === 'fold_quantized/zero') {
            expect(Array.from(readTensor(t).values)).toEqual([0]);
            continue;
          }
          // Not folded: must be the file's own initializer, byte for byte.
          expect(Buffer.compare(Buffer.from(f.payload), Buffer.from(originals.get(tensorName(t)) ?? []))).toBe(0);
          continue;
        }
        folded.delete(tensorName(t));
        const value = readTensor(t);
        expect(value.dataType).toBe(DataType.FLOAT);
        expect(value.dims).toEqual(w.finalDims);
        maxAbs = Math.max(maxAbs, compare(w.reference, value.values).maxAbs);
        elements += value.values.length;
      }
      console.log(JSON.stringify({ model: model.id, foldedWeights: weights.length, elements, maxAbs }));
      expect([...folded.keys()], 'folded weights missing from the converted model').toEqual([]);
      expect(maxAbs).toBe(0);
    });

    it('has the one real input, no DequantizeLinear, the manifest dims and a converter stamp', () => {
      const { model: m, graph } = decodeModel(converted);
      expect(exact.inputNames).toEqual([model.input.name]);
      expect(graph.messages(GraphField.input).map(valueInfoName)).toEqual([model.input.name]);
      const ops = graph.messages(GraphField.node).map((n) => readNode(n).opType);
      expect(ops).not.toContain('DequantizeLinear');
      // PRelu is rewritten as Relu(x) + Min(x, 0) * slope; the exact-output test below proves it equal.
      expect(ops).not.toContain('PRelu');
      const read = new Set(graph.messages(GraphField.node).flatMap((n) => readNode(n).inputs));
      expect(graph.messages(GraphField.initializer).map(tensorName).filter((n) => !read.has(n)), 'unused initializers').toEqual([]);
      expect(m.int(ModelField.irVersion)).toBe(10);
      const metadata = Object.fromEntries(m.messages(ModelField.metadataProps).map((e) => [e.string(EntryField.key), e.string(EntryField.value)]));
      expect(metadata.converter_version).toBe(String(FOLD_VERSION));

      const [input] = graph.messages(GraphField.input).map(valueInfoDims);
      const outputs = graph.messages(GraphField.output).map(valueInfoDims);
      if (model.input.dynamicSize) {
        expect(input).toEqual([1, 3, 'height', 'width']);
        for (const dims of outputs) expect(typeof dims![1]).toBe('string');
      }
      if (model.input.dynamicBatch) {
        expect(input).toEqual(['batch', 3, model.input.height, model.input.width]);
        for (const dims of outputs) expect(dims![0]).toBe('batch');
      }
    });

    const size = model.input.dynamicSize ? ODD_SIZE : { height: model.input.height, width: model.input.width };
    const batch = model.input.dynamicBatch ? 3 : 1;
    const dims = [batch, model.input.channels, size.height, size.width];
    const input = makeInput({ ...model.input, ...size }, batch, 7, 'smooth');

    it(`computes what the original graph computes on the reference weights (${dims.join('x')}), exactly`, async () => {
      const want = await run(reference, model.input.name, input, dims);
      const got = await run(exact, model.input.name, input, dims);
      const optimised = await run(await ort.InferenceSession.create(converted, OPTIMISED), model.input.name, input, dims);
      const report = Object.keys(want).map((name) => ({
        name,
        dims: got[name].dims,
        exact: compare(want[name].data as Float32Array, got[name].data as Float32Array).maxAbs,
        optimised: compare(want[name].data as Float32Array, optimised[name].data as Float32Array),
      }));
      console.log(JSON.stringify({ model: model.id, dims, outputs: report }));
      for (const r of report) {
        expect(r.optimised.magnitude, `${r.name} is all zeros, the comparison would prove nothing`).toBeGreaterThan(0);
        expect(r.exact, r.name).toBe(0);
        expect(r.optimised.maxAbs / Math.max(r.optimised.magnitude, 1), r.name).toBeLessThan(OPTIMISED_TOLERANCE);
      }
      if (model.input.dynamicSize) {
        // One row per grid cell at each stride, whatever the input size.
        for (const [name, tensor] of Object.entries(got)) {
          const stride = Number(name.split('_').pop());
          expect(tensor.dims[1], name).toBe((size.height / stride) * (size.width / stride));
        }
      }
    }, 120_000);

    if (model.input.dynamicBatch) {
      it('gives each image of a batch of 3 the same result as running it alone', async () => {
        const session = await ort.InferenceSession.create(converted, OPTIMISED);
        const together = await run(session, model.input.name, input, dims);
        const per = input.length / batch;
        let worst = 0;
        for (let b = 0; b < batch; b++) {
          const alone = await run(session, model.input.name, input.slice(b * per, (b + 1) * per), [1, ...dims.slice(1)]);
          for (const [name, tensor] of Object.entries(alone)) {
            const n = tensor.data.length;
            const slice = (together[name].data as Float32Array).slice(b * n, (b + 1) * n);
            worst = Math.max(worst, compare(tensor.data as Float32Array, slice).relative);
          }
        }
        console.log(JSON.stringify({ model: model.id, batchVsSingleRelative: worst }));
        expect(worst).toBeLessThan(1e-5);
      }, 60_000);
    }
  });
}

describe('DequantizeLinear folding on every layout the spec allows', () => {
  // A tiny graph whose outputs are dequantised constants (through Identity, so that the
  // outputs stay node outputs), once as written and once folded; ONNX Runtime's own
  // DequantizeLinear is a second, independent reference.
  const rand = mulberry32(5);
  const ints = (n: number, type: DataTypeId) => Array.from({ length: n }, () => Math.floor(rand() * 256) - (type === DataType.INT8 ? 128 : 0));
  const intTensor = (name: string, dims: number[], type: DataTypeId): OnnxTensor => {
    const values = ints(dims.reduce((a, b) => a * b, 1), type);
    return { name, dataType: type, dims, raw: type === DataType.INT8 ? new Uint8Array(Int8Array.from(values).buffer) : Uint8Array.from(values) };
  };
  const scales = (name: string, dims: number[]) =>
    floatTensor(name, dims, Float32Array.from({ length: dims.reduce((a, b) => a * b, 1) }, () => 0.001 + rand() * 0.05));
  const cases: { name: string; x: number[]; scale: number[]; type: DataTypeId; zeroPoint: boolean; axis?: number; blockSize?: number }[] = [
    { name: 'per-tensor', x: [2, 3], scale: [], type: DataType.INT8, zeroPoint: true },
    { name: 'per-axis', x: [3, 4], scale: [3], type: DataType.UINT8, zeroPoint: true, axis: 0 },
    { name: 'per-axis, negative axis, no zero point', x: [2, 3, 2], scale: [3], type: DataType.INT8, zeroPoint: false, axis: -2 },
    { name: 'blocked, partial last block', x: [2, 5], scale: [2, 3], type: DataType.INT8, zeroPoint: true, axis: 1, blockSize: 2 },
    { name: 'blocked along axis 0', x: [5, 2], scale: [2, 2], type: DataType.UINT8, zeroPoint: true, axis: 0, blockSize: 4 },
  ];
  const initializers: OnnxTensor[] = [];
  const nodes: OnnxNode[] = [];
  for (const [i, c] of cases.entries()) {
    initializers.push(intTensor(`x${i}`, c.x, c.type), scales(`s${i}`, c.scale));
    if (c.zeroPoint) initializers.push(intTensor(`z${i}`, c.scale, c.type));
    const attrs = { ...(c.axis === undefined ? {} : { axis: c.axis }), ...(c.blockSize ? { block_size: c.blockSize } : {}) };
    const inputs = [`x${i}`, `s${i}`, ...(c.zeroPoint ? [`z${i}`] : [])];
    nodes.push({ opType: 'DequantizeLinear', name: `dq${i}`, inputs, outputs: [`d${i}`], attrs });
    nodes.push({ opType: 'Identity', name: `out${i}`, inputs: [`d${i}`], outputs: [`y${i}`] });
  }
  // A Reshape of a dequantised constant, with Reshape's 0 (copy) and -1 (infer).
  initializers.push({ name: 'shape', dataType: DataType.INT64, dims: [2], raw: new Uint8Array(BigInt64Array.from([0n, -1n]).buffer) });
  nodes.push({ opType: 'Reshape', name: 'reshape', inputs: ['d2', 'shape'], outputs: ['r2'] });
  nodes.push({ opType: 'Identity', name: 'out-reshape', inputs: ['r2'], outputs: ['reshaped'] });
  const outputs = [...cases.map((c, i) => ({ name: `y${i}`, elemType: DataType.FLOAT, dims: c.x })), { name: 'reshaped', elemType: DataType.FLOAT, dims: [2, 6] }];
  const source = encodeModel({ graph: { name: 'dq', nodes, initializers, inputs: [], outputs }, producerName: 'test', producerVersion: '0', opset: 21 });

  it('equals the reference and ONNX Runtime on each layout, and folds the Reshape', async () => {
    const result = foldQuantized(source);
    expect(result.folded).toEqual({ dequantize: cases.length, reshape: 1 });
    const folded = await (await ort.InferenceSession.create(result.bytes, EXACT)).run({});
    const runtime = await (await ort.InferenceSession.create(source, EXACT)).run({});
    const { graph } = decodeModel(source);
    for (const [i, c] of cases.entries()) {
      const get = (name: string) => readTensor(constantTensor(graph, name));
      const want = referenceDequantize(get(`x${i}`), get(`s${i}`), c.zeroPoint ? get(`z${i}`) : undefined, c.axis ?? 1, c.blockSize ?? 0);
      expect(Array.from(folded[`y${i}`].data as Float32Array), c.name).toEqual(Array.from(want));
      expect(Array.from(runtime[`y${i}`].data as Float32Array), `${c.name} (ONNX Runtime)`).toEqual(Array.from(want));
    }
    expect(folded.reshaped.dims).toEqual([2, 6]);
    expect(Array.from(folded.reshaped.data as Float32Array)).toEqual(Array.from(folded.y2.data as Float32Array));
  });

  it('refuses a scale that fits no layout', () => {
    const bad = encodeModel({
      graph: {
        name: 'bad',
        nodes: [{ opType: 'DequantizeLinear', name: 'dq', inputs: ['x', 's'], outputs: ['y'], attrs: { axis: 1 } }],
        initializers: [intTensor('x', [2, 3], DataType.INT8), scales('s', [2])],
        inputs: [],
        outputs: [{ name: 'y', elemType: DataType.FLOAT, dims: [2, 3] }],
      },
      producerName: 'test',
      producerVersion: '0',
      opset: 21,
    });
    expect(() => foldQuantized(bad)).toThrow(/fits neither per-tensor, per-axis nor blocked/);
  });
});
