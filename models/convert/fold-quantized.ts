// Turns a weight-quantised ONNX model (int8 weights behind DequantizeLinear, as in the
// OpenCV-zoo "int8bq" builds) into a plain float32 model that ONNX Runtime runs as is.
//
// Why not run the quantised file: ONNX Runtime rejects its one-block bias quantisation
// (scale of one element with a block_size: "block_size must be 0 for per-tensor
// quantization"), and dequantising weights on every run buys nothing on CPU. So every
// DequantizeLinear whose inputs are all constant becomes the float32 tensor it computes
// (exactly: (q - zero_point) * scale is one correctly rounded float multiply), Reshapes
// of constants are folded, and what nothing reads any more is dropped. Graph inputs that
// are really weights (old exporters list them) are removed so the runtime may treat the
// weights as constants, chosen input/output axes become symbolic, and the IR version is
// raised to what the opset requires. Every field the rewrite does not touch is copied
// byte for byte from the source file.
//
// Optionally PRelu(x, slope) becomes Relu(x) + Min(x, 0) * slope: the same numbers (for
// x > 0 the second term is exactly 0, for x <= 0 the first), but ONNX Runtime's CPU PRelu
// with a per-channel slope costs about as much as the convolutions around it (half of
// SFace's time on AVX2), while the four elementwise ops are cheap and fuse.
import { DataType, encodeNode, encodeTensor, floatTensor, type Dim } from './onnx.js';
import {
  EntryField,
  GraphField,
  ModelField,
  OpsetField,
  TensorField,
  decodeModel,
  hasSubgraph,
  intAttribute,
  readNode,
  readTensor,
  replaceMessage,
  tensorDims,
  tensorName,
  valueInfoDims,
  valueInfoName,
  withSymbolicDims,
  type NodeView,
  type TensorData,
} from './onnx-reader.js';
import { ProtoMessage, ProtoWriter, type WireField } from './protobuf.js';

/** Bump whenever the emitted ONNX can change, so cached conversions are redone. */
export const FOLD_VERSION = 3;

export interface FoldOptions {
  /** Graph input/output name -> axis -> symbolic dimension name. */
  symbolicDims?: Record<string, Record<number, string>>;
  /** metadata_props entries to set (replacing entries with the same key). */
  metadata?: Record<string, string>;
  /** Rewrite PRelu as Relu(x) + Min(x, 0) * slope (identical values, much faster on CPU). */
  expandPrelu?: boolean;
}

export interface FoldResult {
  bytes: Uint8Array;
  inputs: { name: string; dims: Dim[] | undefined }[];
  outputs: { name: string; dims: Dim[] | undefined }[];
  /** Node count per op type after the rewrite. */
  ops: Record<string, number>;
  /** Number of weight elements stored in the model. */
  params: number;
  folded: { dequantize: number; reshape: number };
  /** PRelu nodes rewritten as elementwise ops. */
  expandedPrelu: number;
  removedInputs: number;
  droppedInitializers: number;
  irVersion: number;
}

export function foldQuantized(source: Uint8Array, options: FoldOptions = {}): FoldResult {
  const { model, graph } = decodeModel(source);
  const opset = defaultOpset(model);

  // Every constant by name: the file's initializers, then each folded result.
  const constants = new Map<string, ProtoMessage>();
  for (const t of graph.messages(GraphField.initializer)) constants.set(tensorName(t), t);
  const initializerNames = new Set(constants.keys());
  const created: ProtoMessage[] = [];
  const folded = { dequantize: 0, reshape: 0 };

  // Nodes are topologically ordered (the ONNX spec requires it), so one pass sees each
  // constant before its readers.
  const kept = new Map<WireField, NodeView>();
  for (const f of graph.all(GraphField.node)) {
    const node = readNode(ProtoMessage.decode(f.payload));
    if (hasSubgraph(node)) throw new Error(`node ${node.name} (${node.opType}) has a subgraph; not supported`);
    const result = foldNode(node, constants, opset);
    if (result) {
      folded[result.kind]++;
      constants.set(node.outputs[0], result.tensor);
      created.push(result.tensor);
    } else {
      kept.set(f, node);
    }
  }

  const graphOutputs = graph.messages(GraphField.output).map(valueInfoName);
  const used = new Set(graphOutputs);
  const produced = new Set<string>();
  for (const n of kept.values()) {
    for (const i of n.inputs) used.add(i);
    for (const o of n.outputs) produced.add(o);
  }

  const symbolic = new Map(Object.entries(options.symbolicDims ?? {}));
  const withDims = (f: WireField): WireField[] => {
    const info = ProtoMessage.decode(f.payload);
    const axes = symbolic.get(valueInfoName(info));
    if (!axes) return [f];
    symbolic.delete(valueInfoName(info));
    return fieldsOf(new ProtoWriter().bytes(f.field, withSymbolicDims(info, axes).encode()));
  };

  const fields: WireField[] = [];
  let expandedPrelu = 0;
  let removedInputs = 0;
  let droppedInitializers = 0;
  for (const f of graph.fields) {
    switch (f.field) {
      case GraphField.node: {
        const node = kept.get(f);
        if (!node) break;
        if (options.expandPrelu && node.opType === 'PRelu') {
          for (const n of expandPrelu(node)) fields.push(...fieldsOf(new ProtoWriter().bytes(GraphField.node, encodeNode(n).finish())));
          expandedPrelu++;
        } else {
          fields.push(f);
        }
        break;
      }
      case GraphField.initializer:
        if (used.has(tensorName(ProtoMessage.decode(f.payload)))) fields.push(f);
        else droppedInitializers++;
        break;
      case GraphField.input: {
        // A real input has no initializer behind it and something reads it.
        const name = valueInfoName(ProtoMessage.decode(f.payload));
        if (!initializerNames.has(name) && used.has(name)) fields.push(...withDims(f));
        else removedInputs++;
        break;
      }
      case GraphField.output:
        fields.push(...withDims(f));
        break;
      case GraphField.valueInfo:
        // Shapes of folded tensors would describe values no node produces any more, and with
        // symbolic dims every recorded intermediate shape is one size's: ONNX Runtime infers them.
        if (!options.symbolicDims && produced.has(valueInfoName(ProtoMessage.decode(f.payload)))) fields.push(f);
        break;
      default:
        fields.push(f);
    }
  }
  for (const t of created) {
    if (used.has(tensorName(t))) fields.push(...fieldsOf(new ProtoWriter().bytes(GraphField.initializer, t.encode())));
  }
  if (expandedPrelu > 0) {
    fields.push(...fieldsOf(new ProtoWriter().bytes(GraphField.initializer, encodeTensor(floatTensor(PRELU_ZERO, [], new Float32Array([0]))).finish())));
  }
  if (symbolic.size > 0) throw new Error(`no graph input or output named ${[...symbolic.keys()].join(', ')}`);
  const newGraph = new ProtoMessage(fields);

  const irVersion = Math.max(model.int(ModelField.irVersion) ?? 0, irVersionForOpset(opset));
  const out = rewriteModel(model, newGraph, irVersion, options.metadata ?? {});

  const ops: Record<string, number> = {};
  for (const n of newGraph.messages(GraphField.node).map(readNode)) ops[n.opType] = (ops[n.opType] ?? 0) + 1;
  let params = 0;
  for (const t of newGraph.messages(GraphField.initializer)) params += tensorDims(t).reduce((a, b) => a * b, 1);
  const summary = (info: ProtoMessage) => ({ name: valueInfoName(info), dims: valueInfoDims(info) });
  return {
    bytes: out.encode(),
    inputs: newGraph.messages(GraphField.input).map(summary),
    outputs: newGraph.messages(GraphField.output).map(summary),
    ops,
    params,
    folded,
    expandedPrelu,
    removedInputs,
    droppedInitializers,
    irVersion,
  };
}

/** Name of the scalar 0 the PRelu rewrite compares against. */
const PRELU_ZERO = 'fold_quantized/zero';

/** PRelu(x, slope) as Relu(x) + Min(x, 0) * slope, writing the PRelu's own output name. */
function expandPrelu(node: NodeView) {
  const [x, slope] = node.inputs;
  const out = node.outputs[0];
  const part = (suffix: string) => `${out}/prelu_${suffix}`;
  return [
    { opType: 'Relu', name: part('relu'), inputs: [x], outputs: [part('positive')] },
    { opType: 'Min', name: part('min'), inputs: [x, PRELU_ZERO], outputs: [part('negative')] },
    { opType: 'Mul', name: part('mul'), inputs: [part('negative'), slope], outputs: [part('scaled')] },
    { opType: 'Add', name: part('add'), inputs: [part('positive'), part('scaled')], outputs: [out] },
  ];
}

/** The model with the new graph, IR version and metadata entries; other fields as they were. */
function rewriteModel(model: ProtoMessage, graph: ProtoMessage, irVersion: number, metadata: Record<string, string>): ProtoMessage {
  const replaced = (f: WireField) =>
    f.field === ModelField.metadataProps && (ProtoMessage.decode(f.payload).string(EntryField.key) ?? '') in metadata;
  let out = replaceMessage(new ProtoMessage(model.fields.filter((f) => !replaced(f))), ModelField.graph, graph)
    .without(ModelField.irVersion)
    .with(new ProtoWriter().varint(ModelField.irVersion, irVersion));
  for (const [key, value] of Object.entries(metadata)) {
    out = out.with(new ProtoWriter().message(ModelField.metadataProps, new ProtoWriter().string(EntryField.key, key).string(EntryField.value, value)));
  }
  return out;
}

function fieldsOf(writer: ProtoWriter): WireField[] {
  return [...ProtoMessage.decode(writer.finish()).fields];
}

function defaultOpset(model: ProtoMessage): number {
  for (const o of model.messages(ModelField.opsetImport)) {
    const domain = o.string(OpsetField.domain) ?? '';
    if (domain === '' || domain === 'ai.onnx') return o.int(OpsetField.version) ?? 0;
  }
  throw new Error('model imports no default-domain opset');
}

// From onnx/docs/Versioning.md: the IR version of the release that introduced each opset
// (a runtime may refuse an opset newer than the file's IR version allows).
const IR_FOR_OPSET: [opset: number, ir: number][] = [
  [9, 4],
  [10, 5],
  [11, 6],
  [12, 7],
  [15, 8],
  [19, 9],
  [21, 10],
  [23, 11],
];
const LATEST_KNOWN_OPSET = 23;

function irVersionForOpset(opset: number): number {
  if (opset > LATEST_KNOWN_OPSET) throw new Error(`opset ${opset}: its IR version is not in the table`);
  let ir = 3;
  for (const [o, v] of IR_FOR_OPSET) if (opset >= o) ir = v;
  return ir;
}

type Folded = { kind: 'dequantize' | 'reshape'; tensor: ProtoMessage };

function foldNode(node: NodeView, constants: Map<string, ProtoMessage>, opset: number): Folded | undefined {
  if (node.domain !== '' && node.domain !== 'ai.onnx') return undefined;
  const inputs = node.inputs.filter((i) => i !== '');
  if (inputs.length === 0 || !inputs.every((i) => constants.has(i))) return undefined;
  const constant = (i: number) => (node.inputs[i] ? constants.get(node.inputs[i]) : undefined);
  const output = node.outputs[0];
  if (node.opType === 'DequantizeLinear') {
    const [x, scale, zeroPoint] = [0, 1, 2].map((i) => constant(i));
    const values = dequantize(node, readTensor(x!), readTensor(scale!), zeroPoint && readTensor(zeroPoint), opset);
    const tensor = ProtoMessage.decode(encodeTensor(floatTensor(output, tensorDims(x!), values)).finish());
    return { kind: 'dequantize', tensor };
  }
  if (node.opType === 'Reshape') {
    const data = constant(0)!;
    const shape = readTensor(constant(1)!);
    const dims = reshapeDims(tensorDims(data), Array.from(shape.values), intAttribute(node, 'allowzero', 0) === 1, node.name);
    // Same element bytes under a new name and shape; dims unpacked as onnx.ts writes them.
    const head = new ProtoWriter();
    for (const d of dims) head.varint(TensorField.dims, d);
    head.string(TensorField.name, output);
    return { kind: 'reshape', tensor: new ProtoMessage([...fieldsOf(head), ...data.without(TensorField.dims, TensorField.name).fields]) };
  }
  return undefined;
}

/**
 * DequantizeLinear (opsets 10 to 21): y = (x - zero_point) * scale, with one scale for the
 * tensor, one per index along `axis`, or (block_size > 0) one per block of block_size
 * consecutive indices along `axis`, the scale then having x's shape with that axis
 * shrunk to ceil(size / block_size).
 */
function dequantize(node: NodeView, x: TensorData, scale: TensorData, zeroPoint: TensorData | undefined, opset: number): Float32Array {
  const where = `DequantizeLinear ${node.name}`;
  if (x.dataType !== DataType.INT8 && x.dataType !== DataType.UINT8) throw new Error(`${where}: data type ${x.dataType} is not int8/uint8`);
  if (scale.dataType !== DataType.FLOAT) throw new Error(`${where}: scale type ${scale.dataType} is not float`);
  if (zeroPoint && (zeroPoint.dataType !== x.dataType || zeroPoint.dims.join() !== scale.dims.join())) {
    throw new Error(`${where}: zero point does not match the data type or the scale's shape`);
  }
  const outputType = intAttribute(node, 'output_dtype', 0);
  if (outputType !== 0 && outputType !== DataType.FLOAT) throw new Error(`${where}: output_dtype ${outputType} is not float`);
  const blockSize = opset >= 21 ? intAttribute(node, 'block_size', 0) : 0;
  const rank = x.dims.length;
  const axisAttribute = intAttribute(node, 'axis', 1);
  const axis = axisAttribute < 0 ? axisAttribute + rank : axisAttribute;

  let mode: 'tensor' | 'axis' | 'block';
  if (blockSize === 0 && scale.values.length === 1 && scale.dims.length <= 1) mode = 'tensor';
  else if (blockSize === 0 && scale.dims.length === 1 && scale.dims[0] === x.dims[axis]) mode = 'axis';
  else if (blockSize > 0 && scale.dims.length === rank && x.dims.every((d, i) => scale.dims[i] === (i === axis ? Math.ceil(d / blockSize) : d))) mode = 'block';
  else throw new Error(`${where}: scale [${scale.dims}] fits neither per-tensor, per-axis nor blocked (axis ${axis}, block_size ${blockSize}) for data [${x.dims}]`);

  // x viewed as [outer, n, inner] around the axis; a per-tensor scale needs no axis.
  const outer = mode === 'tensor' ? 1 : x.dims.slice(0, axis).reduce((a, b) => a * b, 1);
  const n = mode === 'tensor' ? 1 : x.dims[axis];
  const inner = x.values.length / (outer * n);
  const blocks = mode === 'block' ? scale.dims[axis] : 0;
  const step = mode === 'block' ? 1 : 0;
  const q = x.values;
  const s = scale.values;
  const zp = zeroPoint?.values;
  const out = new Float32Array(q.length);
  for (let o = 0; o < outer; o++) {
    for (let a = 0; a < n; a++) {
      const row = (o * n + a) * inner;
      const first = mode === 'tensor' ? 0 : mode === 'axis' ? a : (o * blocks + Math.floor(a / blockSize)) * inner;
      // The difference is an exact integer and its product with a float32 scale is exact
      // in a double, so storing into the Float32Array rounds once, as a float runtime does.
      for (let i = 0; i < inner; i++) out[row + i] = (q[row + i] - (zp ? zp[first + i * step] : 0)) * s[first + i * step];
    }
  }
  return out;
}

function reshapeDims(from: number[], shape: number[], allowZero: boolean, where: string): number[] {
  const count = from.reduce((a, b) => a * b, 1);
  const dims = shape.map((d, i) => (d === 0 && !allowZero ? from[i] : d));
  const unknown = dims.indexOf(-1);
  if (unknown >= 0) {
    const known = dims.reduce((a, b, i) => (i === unknown ? a : a * b), 1);
    dims[unknown] = known === 0 ? 0 : count / known;
  }
  if (dims.some((d) => d === undefined || d < 0 || !Number.isInteger(d)) || dims.reduce((a, b) => a * b, 1) !== count) {
    throw new Error(`Reshape ${where}: shape [${shape}] does not fit [${from}]`);
  }
  return dims;
}
