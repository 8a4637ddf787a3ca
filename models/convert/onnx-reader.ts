// Read access to an existing ONNX file, on top of the lossless protobuf reader: field
// numbers (from onnx/onnx.proto), node and attribute views, and tensor values. Only what
// the model rewrites need is interpreted; every other field travels through untouched.
import { ProtoMessage, ProtoWriter } from './protobuf.js';
import { DataType, type Dim } from './onnx.js';

/** ModelProto fields. */
export const ModelField = { irVersion: 1, graph: 7, opsetImport: 8, metadataProps: 14 } as const;
/** GraphProto fields. */
export const GraphField = { node: 1, initializer: 5, input: 11, output: 12, valueInfo: 13 } as const;
/** OperatorSetIdProto and StringStringEntryProto (metadata_props) fields. */
export const OpsetField = { domain: 1, version: 2 } as const;
export const EntryField = { key: 1, value: 2 } as const;
/** NodeProto fields. */
const NodeField = { input: 1, output: 2, name: 3, opType: 4, attribute: 5, domain: 7 } as const;
/** AttributeProto fields. */
const AttrField = { name: 1, i: 3, g: 6, graphs: 11 } as const;
/** TensorProto fields. */
export const TensorField = {
  dims: 1,
  dataType: 2,
  segment: 3,
  floatData: 4,
  int32Data: 5,
  int64Data: 7,
  name: 8,
  rawData: 9,
  dataLocation: 14,
} as const;

export function decodeModel(bytes: Uint8Array): { model: ProtoMessage; graph: ProtoMessage } {
  const model = ProtoMessage.decode(bytes);
  const graph = model.message(ModelField.graph);
  if (!graph) throw new Error('ONNX file has no graph');
  return { model, graph };
}

export interface NodeView {
  name: string;
  opType: string;
  domain: string;
  inputs: string[];
  outputs: string[];
  attributes: Map<string, ProtoMessage>;
}

export function readNode(node: ProtoMessage): NodeView {
  const attributes = new Map<string, ProtoMessage>();
  for (const a of node.messages(NodeField.attribute)) attributes.set(a.string(AttrField.name) ?? '', a);
  return {
    name: node.string(NodeField.name) ?? '',
    opType: node.string(NodeField.opType) ?? '',
    domain: node.string(NodeField.domain) ?? '',
    inputs: node.strings(NodeField.input),
    outputs: node.strings(NodeField.output),
    attributes,
  };
}

/** An int attribute, or its default when the node leaves it out. */
export function intAttribute(node: NodeView, name: string, fallback: number): number {
  return node.attributes.get(name)?.int(AttrField.i) ?? fallback;
}

/** Whether a node carries a subgraph (If, Loop, Scan), whose names the rewrites would have to follow. */
export function hasSubgraph(node: NodeView): boolean {
  return [...node.attributes.values()].some((a) => a.last(AttrField.g) !== undefined || a.last(AttrField.graphs) !== undefined);
}

export interface TensorData {
  name: string;
  dataType: number;
  dims: number[];
  /** Element values, in row-major order. */
  values: ArrayLike<number>;
}

export function tensorName(tensor: ProtoMessage): string {
  return tensor.string(TensorField.name) ?? '';
}

export function tensorDims(tensor: ProtoMessage): number[] {
  return tensor.ints(TensorField.dims);
}

/** Decodes a tensor's values from raw_data or the typed repeated field the spec allows for its type. */
export function readTensor(tensor: ProtoMessage): TensorData {
  const name = tensorName(tensor);
  const dataType = tensor.int(TensorField.dataType) ?? 0;
  const dims = tensorDims(tensor);
  if (tensor.int(TensorField.dataLocation) === 1) throw new Error(`tensor ${name}: external data is not supported`);
  if (tensor.last(TensorField.segment)) throw new Error(`tensor ${name}: segmented tensors are not supported`);
  const raw = tensor.last(TensorField.rawData)?.payload;
  let values: ArrayLike<number>;
  switch (dataType) {
    case DataType.FLOAT:
      values = raw ? littleEndian(raw, 4, (v, p) => v.getFloat32(p, true)) : tensor.floats(TensorField.floatData);
      break;
    case DataType.INT8:
      values = raw ? new Int8Array(raw.buffer, raw.byteOffset, raw.byteLength) : tensor.ints(TensorField.int32Data);
      break;
    case DataType.UINT8:
      values = raw ? raw : tensor.ints(TensorField.int32Data);
      break;
    case DataType.INT32:
      values = raw ? littleEndian(raw, 4, (v, p) => v.getInt32(p, true)) : tensor.ints(TensorField.int32Data);
      break;
    case DataType.INT64:
      values = raw ? littleEndian(raw, 8, (v, p) => safeInteger(v.getBigInt64(p, true), name)) : tensor.ints(TensorField.int64Data);
      break;
    default:
      throw new Error(`tensor ${name}: data type ${dataType} is not supported`);
  }
  const count = dims.reduce((a, b) => a * b, 1);
  if (values.length !== count) throw new Error(`tensor ${name}: ${values.length} values for dims [${dims}]`);
  return { name, dataType, dims, values };
}

function littleEndian(raw: Uint8Array, size: number, get: (view: DataView, pos: number) => number): number[] {
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const out = new Array<number>(raw.byteLength / size);
  for (let i = 0; i < out.length; i++) out[i] = get(view, i * size);
  return out;
}

function safeInteger(v: bigint, name: string): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) throw new Error(`tensor ${name}: int64 ${v} out of range`);
  return Number(v);
}

// ValueInfoProto -> TypeProto -> TypeProto.Tensor -> TensorShapeProto -> Dimension.
export const ValueInfoField = { name: 1, type: 2 } as const;
export const TypeField = { tensorType: 1 } as const;
export const TensorTypeField = { shape: 2 } as const;
const ShapeField = { dim: 1 } as const;
const DimField = { value: 1, param: 2 } as const;

export function valueInfoName(info: ProtoMessage): string {
  return info.string(ValueInfoField.name) ?? '';
}

function valueInfoShape(info: ProtoMessage): ProtoMessage | undefined {
  return info.message(ValueInfoField.type)?.message(TypeField.tensorType)?.message(TensorTypeField.shape);
}

/** The declared dims (fixed sizes or symbolic names), or undefined when no shape is declared. */
export function valueInfoDims(info: ProtoMessage): Dim[] | undefined {
  return valueInfoShape(info)
    ?.messages(ShapeField.dim)
    .map((d) => d.string(DimField.param) ?? d.int(DimField.value) ?? '?');
}

/** A copy of a tensor value-info whose given axes carry symbolic names instead of sizes. */
export function withSymbolicDims(info: ProtoMessage, axes: Record<number, string>): ProtoMessage {
  const name = valueInfoName(info);
  const type = info.message(ValueInfoField.type);
  const tensorType = type?.message(TypeField.tensorType);
  const shape = tensorType?.message(TensorTypeField.shape);
  if (!type || !tensorType || !shape) throw new Error(`${name}: no tensor shape to make symbolic`);
  const dims = shape.messages(ShapeField.dim);
  for (const axis of Object.keys(axes).map(Number)) {
    if (!(axis >= 0 && axis < dims.length)) throw new Error(`${name}: axis ${axis} out of range for rank ${dims.length}`);
  }
  let newShape = shape.without(ShapeField.dim);
  for (const [axis, dim] of dims.entries()) {
    // Dimension.value is a oneof: drop both members, keep anything else (a denotation).
    const param = axes[axis];
    const d = param === undefined ? dim : dim.without(DimField.value, DimField.param).with(new ProtoWriter().string(DimField.param, param));
    newShape = newShape.with(new ProtoWriter().bytes(ShapeField.dim, d.encode()));
  }
  const newTensorType = replaceMessage(tensorType, TensorTypeField.shape, newShape);
  return replaceMessage(info, ValueInfoField.type, replaceMessage(type, TypeField.tensorType, newTensorType));
}

/** A copy of `parent` whose singular message field `field` holds `child`. */
export function replaceMessage(parent: ProtoMessage, field: number, child: ProtoMessage): ProtoMessage {
  return parent.without(field).with(new ProtoWriter().bytes(field, child.encode()));
}
