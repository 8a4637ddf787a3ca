// Reads a TensorFlow.js graph model (model.json + weight shards) into plain data:
// the GraphDef nodes with decoded attributes, and every weight as float32/int32.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

export interface TfNode {
  name: string;
  op: string;
  inputs: string[];
  attr: Record<string, TfAttr>;
}

/** GraphDef AttrValue as tfjs-converter writes it to JSON (int64 values are strings). */
export interface TfAttr {
  s?: string;
  i?: string;
  f?: number;
  b?: boolean;
  type?: string;
  shape?: { dim?: { size: string }[]; unknownRank?: boolean };
  list?: { s?: string[]; i?: string[]; f?: number[] };
}

export interface TfWeight {
  dtype: 'float32' | 'int32';
  shape: number[];
  data: Float32Array | Int32Array;
}

export interface TfGraph {
  nodes: TfNode[];
  weights: Map<string, TfWeight>;
  /** Output tensor names declared by the model's signature, without the ":0" suffix. */
  signatureOutputs: string[];
}

interface WeightSpec {
  name: string;
  shape: number[];
  dtype: string;
  quantization?: { dtype: string; scale?: number; min?: number };
}

interface ModelJson {
  modelTopology: { node: { name: string; op: string; input?: string[]; attr?: Record<string, TfAttr> }[] };
  weightsManifest: { paths: string[]; weights: WeightSpec[] }[];
  signature?: { outputs?: Record<string, { name: string }> };
  userDefinedMetadata?: { signature?: { outputs?: Record<string, { name: string }> } };
}

export function loadTfjsGraph(jsonPath: string): TfGraph {
  const json = JSON.parse(readFileSync(jsonPath, 'utf8')) as ModelJson;
  const nodes = json.modelTopology.node.map((n) => ({
    name: n.name,
    op: n.op,
    // control dependencies ("^name") only order execution; they carry no data
    inputs: (n.input ?? []).filter((i) => !i.startsWith('^')),
    attr: n.attr ?? {},
  }));

  const weights = new Map<string, TfWeight>();
  for (const group of json.weightsManifest) {
    const buffers = group.paths.map((p) => readFileSync(join(dirname(jsonPath), p)));
    const bytes = Buffer.concat(buffers);
    let offset = 0;
    for (const spec of group.weights) {
      const [weight, used] = decodeWeight(spec, bytes, offset);
      weights.set(spec.name, weight);
      offset += used;
    }
    if (offset !== bytes.byteLength) {
      throw new Error(`${jsonPath}: weights use ${offset} bytes but shards hold ${bytes.byteLength}`);
    }
  }

  const sig = json.signature ?? json.userDefinedMetadata?.signature;
  const signatureOutputs = Object.values(sig?.outputs ?? {}).map((o) => o.name.replace(/:0$/, ''));
  return { nodes, weights, signatureOutputs };
}

function decodeWeight(spec: WeightSpec, bytes: Buffer, offset: number): [TfWeight, number] {
  const count = spec.shape.reduce((a, b) => a * b, 1);
  const view = new DataView(bytes.buffer, bytes.byteOffset + offset);
  const q = spec.quantization;
  if (spec.dtype !== 'float32' && spec.dtype !== 'int32') {
    throw new Error(`weight ${spec.name}: unsupported dtype ${spec.dtype}`);
  }
  if (!q) {
    const data = spec.dtype === 'float32' ? new Float32Array(count) : new Int32Array(count);
    for (let i = 0; i < count; i++) {
      data[i] = spec.dtype === 'float32' ? view.getFloat32(i * 4, true) : view.getInt32(i * 4, true);
    }
    return [{ dtype: spec.dtype, shape: spec.shape, data }, count * 4];
  }
  const data = new Float32Array(count);
  if (q.dtype === 'float16') {
    for (let i = 0; i < count; i++) data[i] = halfToFloat(view.getUint16(i * 2, true));
  } else if (q.dtype === 'uint8' || q.dtype === 'uint16') {
    // affine quantisation as tfjs writes it: value = q * scale + min
    const scale = q.scale ?? 1;
    const min = q.min ?? 0;
    const wide = q.dtype === 'uint16';
    for (let i = 0; i < count; i++) data[i] = (wide ? view.getUint16(i * 2, true) : view.getUint8(i)) * scale + min;
  } else {
    throw new Error(`weight ${spec.name}: unsupported quantization ${q.dtype}`);
  }
  const bytesPer = q.dtype === 'uint8' ? 1 : 2;
  if (spec.dtype === 'int32') {
    return [{ dtype: 'int32', shape: spec.shape, data: Int32Array.from(data, Math.round) }, count * bytesPer];
  }
  return [{ dtype: 'float32', shape: spec.shape, data }, count * bytesPer];
}

/** IEEE 754 binary16 to number, including subnormals, infinities and NaN. */
export function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exponent = (h >> 10) & 0x1f;
  const fraction = h & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 0x1f) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

// Attribute accessors. The JSON omits default values (false, 0, empty lists).
export const attr = {
  str(n: TfNode, key: string, fallback = ''): string {
    const s = n.attr[key]?.s;
    return s === undefined ? fallback : Buffer.from(s, 'base64').toString('utf8');
  },
  strs(n: TfNode, key: string): string[] {
    return (n.attr[key]?.list?.s ?? []).map((s) => Buffer.from(s, 'base64').toString('utf8'));
  },
  int(n: TfNode, key: string, fallback = 0): number {
    const i = n.attr[key]?.i;
    return i === undefined ? fallback : Number(i);
  },
  ints(n: TfNode, key: string): number[] {
    return (n.attr[key]?.list?.i ?? []).map(Number);
  },
  float(n: TfNode, key: string, fallback = 0): number {
    return n.attr[key]?.f ?? fallback;
  },
  bool(n: TfNode, key: string, fallback = false): boolean {
    return n.attr[key]?.b ?? fallback;
  },
  shape(n: TfNode, key: string): number[] | undefined {
    const s = n.attr[key]?.shape;
    if (!s || s.unknownRank) return undefined;
    return (s.dim ?? []).map((d) => Number(d.size));
  },
};
