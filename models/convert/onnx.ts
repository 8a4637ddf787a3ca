// ONNX model description and its protobuf encoding (field numbers from onnx/onnx.proto).
import { ProtoWriter } from './protobuf.js';

export const IR_VERSION = 8;
export const OPSET = 17;

/** TensorProto.DataType values the converters use (int8/uint8 only as quantised sources). */
export const DataType = { FLOAT: 1, UINT8: 2, INT8: 3, INT32: 6, INT64: 7 } as const;
export type DataTypeId = (typeof DataType)[keyof typeof DataType];

export type AttrValue = number | string | number[] | { floats: number[] } | { float: number };

export interface OnnxNode {
  opType: string;
  name: string;
  inputs: string[];
  outputs: string[];
  attrs?: Record<string, AttrValue>;
}

export interface OnnxTensor {
  name: string;
  dataType: DataTypeId;
  dims: number[];
  /** Little-endian element bytes, already in ONNX layout. */
  raw: Uint8Array;
}

/** A dimension is a fixed size or a symbolic name such as "batch". */
export type Dim = number | string;

export interface OnnxValueInfo {
  name: string;
  elemType: DataTypeId;
  dims: Dim[];
}

export interface OnnxGraph {
  name: string;
  nodes: OnnxNode[];
  initializers: OnnxTensor[];
  inputs: OnnxValueInfo[];
  outputs: OnnxValueInfo[];
}

export interface OnnxModel {
  graph: OnnxGraph;
  producerName: string;
  producerVersion: string;
  docString?: string;
  metadata?: Record<string, string>;
  /** Default-domain opset; OPSET unless given. */
  opset?: number;
}

export function floatTensor(name: string, dims: number[], data: Float32Array): OnnxTensor {
  return { name, dataType: DataType.FLOAT, dims, raw: littleEndianBytes(data) };
}

export function int64Tensor(name: string, dims: number[], values: readonly number[]): OnnxTensor {
  const data = new BigInt64Array(values.map((v) => BigInt(v)));
  return { name, dataType: DataType.INT64, dims, raw: littleEndianBytes(data) };
}

function littleEndianBytes(data: Float32Array | BigInt64Array): Uint8Array {
  const out = new Uint8Array(data.byteLength);
  const view = new DataView(out.buffer);
  if (data instanceof Float32Array) data.forEach((v, i) => view.setFloat32(i * 4, v, true));
  else data.forEach((v, i) => view.setBigInt64(i * 8, v, true));
  return out;
}

// AttributeProto.AttributeType
const AttrType = { FLOAT: 1, INT: 2, STRING: 3, FLOATS: 6, INTS: 7 } as const;

function encodeAttribute(name: string, value: AttrValue): ProtoWriter {
  const w = new ProtoWriter().string(1, name);
  if (typeof value === 'number') {
    if (!Number.isInteger(value)) throw new Error(`attribute ${name}: use { float } for non-integers`);
    w.varint(20, AttrType.INT).varint(3, value);
  } else if (typeof value === 'string') {
    w.varint(20, AttrType.STRING).string(4, value);
  } else if (Array.isArray(value)) {
    w.varint(20, AttrType.INTS).packedVarints(8, value);
  } else if ('floats' in value) {
    w.varint(20, AttrType.FLOATS).packedFloats(7, value.floats);
  } else {
    w.varint(20, AttrType.FLOAT).float(2, value.float);
  }
  return w;
}

export function encodeNode(node: OnnxNode): ProtoWriter {
  const w = new ProtoWriter();
  for (const i of node.inputs) w.string(1, i);
  for (const o of node.outputs) w.string(2, o);
  w.string(3, node.name).string(4, node.opType);
  for (const [k, v] of Object.entries(node.attrs ?? {})) w.message(5, encodeAttribute(k, v));
  return w;
}

export function encodeTensor(t: OnnxTensor): ProtoWriter {
  const w = new ProtoWriter();
  for (const d of t.dims) w.varint(1, d);
  return w.varint(2, t.dataType).string(8, t.name).bytes(9, t.raw);
}

function encodeValueInfo(v: OnnxValueInfo): ProtoWriter {
  const shape = new ProtoWriter();
  for (const d of v.dims) {
    const dim = typeof d === 'number' ? new ProtoWriter().varint(1, d) : new ProtoWriter().string(2, d);
    shape.message(1, dim);
  }
  const tensorType = new ProtoWriter().varint(1, v.elemType).message(2, shape);
  const type = new ProtoWriter().message(1, tensorType);
  return new ProtoWriter().string(1, v.name).message(2, type);
}

function encodeGraph(g: OnnxGraph): ProtoWriter {
  const w = new ProtoWriter();
  for (const n of g.nodes) w.message(1, encodeNode(n));
  w.string(2, g.name);
  for (const t of g.initializers) w.message(5, encodeTensor(t));
  for (const i of g.inputs) w.message(11, encodeValueInfo(i));
  for (const o of g.outputs) w.message(12, encodeValueInfo(o));
  return w;
}

export function encodeModel(m: OnnxModel): Uint8Array {
  const w = new ProtoWriter()
    .varint(1, IR_VERSION)
    .string(2, m.producerName)
    .string(3, m.producerVersion);
  if (m.docString) w.string(6, m.docString);
  w.message(7, encodeGraph(m.graph));
  w.message(8, new ProtoWriter().string(1, '').varint(2, m.opset ?? OPSET));
  for (const [key, value] of Object.entries(m.metadata ?? {})) {
    w.message(14, new ProtoWriter().string(1, key).string(2, value));
  }
  return w.finish();
}
