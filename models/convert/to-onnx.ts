// Translates a TensorFlow.js GraphDef into an ONNX graph.
//
// Tensors stay in TensorFlow's NHWC layout. Each layout-sensitive op (convolution,
// pooling, resize, depth-to-space) is wrapped in NHWC->NCHW / NCHW->NHWC transposes;
// ONNX Runtime's transpose optimiser cancels adjacent pairs, so the wrapping costs
// nothing at run time while keeping every translation locally correct.
import {
  DataType,
  encodeModel,
  floatTensor,
  int64Tensor,
  type AttrValue,
  type Dim,
  type OnnxModel,
  type OnnxNode,
  type OnnxTensor,
  type OnnxValueInfo,
} from './onnx.js';
import { attr, type TfGraph, type TfNode, type TfWeight } from './tfjs-graph.js';

/** Bump whenever the emitted ONNX can change, so cached conversions are redone. */
export const CONVERTER_VERSION = 1;

export interface ConvertOptions {
  graphName: string;
  /** Give the input a symbolic "batch" dimension; fails if the graph hard-codes batch 1. */
  dynamicBatch: boolean;
  /** Tensors to expose as model outputs; defaults to the model signature. */
  outputs?: string[];
  metadata?: Record<string, string>;
}

export interface ConvertResult {
  model: OnnxModel;
  bytes: Uint8Array;
  inputs: OnnxValueInfo[];
  outputs: OnnxValueInfo[];
  /** ONNX node count per op type. */
  ops: Record<string, number>;
  /** Number of weight elements stored in the model. */
  params: number;
}

/** Marks the batch dimension in shapes and in constant-folded shape vectors. */
const BATCH = -1;
const TO_NCHW = [0, 3, 1, 2];
const TO_NHWC = [0, 2, 3, 1];

type Shape = number[];
type FoldedInts = { shape: Shape; values: number[] };

export function convertGraph(graph: TfGraph, options: ConvertOptions): ConvertResult {
  return new Converter(graph, options).run();
}

class Converter {
  private readonly byName = new Map<string, TfNode>();
  private readonly nodes: OnnxNode[] = [];
  private readonly initializers = new Map<string, OnnxTensor>();
  private readonly shapes = new Map<string, Shape>();
  private readonly folded = new Map<string, FoldedInts>();
  private readonly inputs: OnnxValueInfo[] = [];
  private serial = 0;

  constructor(
    private readonly graph: TfGraph,
    private readonly options: ConvertOptions,
  ) {
    for (const n of graph.nodes) this.byName.set(n.name, n);
  }

  run(): ConvertResult {
    const outputNames = (this.options.outputs ?? this.graph.signatureOutputs).map(tensorName);
    if (outputNames.length === 0) throw new Error('model declares no outputs; pass them explicitly');
    for (const n of this.topologicalOrder(outputNames)) this.convertNode(n);

    const outputs = outputNames.map((name) => {
      if (!this.shapes.has(name)) throw new Error(`output ${name} is not a computed tensor`);
      return this.valueInfo(name, this.shape(name));
    });
    const model: OnnxModel = {
      graph: {
        name: this.options.graphName,
        nodes: this.nodes,
        initializers: [...this.initializers.values()],
        inputs: this.inputs,
        outputs,
      },
      producerName: 'face-service-model-converter',
      producerVersion: String(CONVERTER_VERSION),
      metadata: this.options.metadata,
    };
    const ops: Record<string, number> = {};
    for (const n of this.nodes) ops[n.opType] = (ops[n.opType] ?? 0) + 1;
    let params = 0;
    for (const t of this.initializers.values()) params += t.dims.reduce((a, b) => a * b, 1);
    return { model, bytes: encodeModel(model), inputs: this.inputs, outputs, ops, params };
  }

  /** Only nodes that feed the requested outputs, producers before consumers. */
  private topologicalOrder(outputs: string[]): TfNode[] {
    const order: TfNode[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const stack: { node: TfNode; next: number }[] = [];
    for (const out of outputs) {
      const root = this.node(out);
      if (state.has(root.name)) continue;
      state.set(root.name, 'open');
      stack.push({ node: root, next: 0 });
      while (stack.length > 0) {
        const top = stack[stack.length - 1];
        if (top.next < top.node.inputs.length) {
          const dep = this.node(tensorName(top.node.inputs[top.next++]));
          const s = state.get(dep.name);
          if (s === 'open') throw new Error(`graph has a cycle through ${dep.name}`);
          if (s === undefined) {
            state.set(dep.name, 'open');
            stack.push({ node: dep, next: 0 });
          }
        } else {
          state.set(top.node.name, 'done');
          order.push(top.node);
          stack.pop();
        }
      }
    }
    return order;
  }

  private convertNode(n: TfNode): void {
    switch (n.op) {
      case 'Const':
        if (!this.graph.weights.has(n.name)) throw new Error(`Const ${n.name} has no value in the weights manifest`);
        return;
      case 'Placeholder':
        return this.placeholder(n);
      case 'Identity':
      case 'StopGradient':
      case 'Snapshot':
        return this.unary(n, 'Identity');
      case 'Conv2D':
      case '_FusedConv2D':
        return this.conv(n, false);
      case 'DepthwiseConv2dNative':
      case 'FusedDepthwiseConv2dNative':
        return this.conv(n, true);
      case 'MaxPool':
      case 'AvgPool':
        return this.pool(n);
      case 'MatMul':
      case '_FusedMatMul':
        return this.matMul(n);
      case 'Add':
      case 'AddV2':
      case 'BiasAdd':
        return this.binary(n, 'Add');
      case 'Sub':
        return this.binary(n, 'Sub');
      case 'Mul':
        return this.binary(n, 'Mul');
      case 'RealDiv':
        return this.binary(n, 'Div');
      case 'Maximum':
        return this.binary(n, 'Max');
      case 'Minimum':
        return this.binary(n, 'Min');
      case 'Relu':
      case 'Sigmoid':
      case 'Tanh':
      case 'Abs':
      case 'Exp':
      case 'Sqrt':
      case 'Neg':
        return this.unary(n, n.op);
      case 'Relu6':
        return this.define(n, this.activation(this.in(n, 0), 'Relu6', n), this.shape(n.inputs[0]));
      case 'LeakyRelu':
        return this.define(n, this.activation(this.in(n, 0), 'LeakyRelu', n), this.shape(n.inputs[0]));
      case 'Prelu':
        return this.define(n, this.emit('PRelu', [this.in(n, 0), this.in(n, 1)]), this.shape(n.inputs[0]));
      case 'Square': {
        const x = this.in(n, 0);
        return this.define(n, this.emit('Mul', [x, x]), this.shape(n.inputs[0]));
      }
      case 'Rsqrt':
        return this.define(n, this.emit('Reciprocal', [this.emit('Sqrt', [this.in(n, 0)])]), this.shape(n.inputs[0]));
      case 'Softmax':
        return this.define(n, this.emit('Softmax', [this.in(n, 0)], { axis: -1 }), this.shape(n.inputs[0]));
      case 'Mean':
      case 'Sum':
      case 'Max':
      case 'Min':
        return this.reduce(n);
      case 'Pad':
        return this.pad(n);
      case 'Reshape':
        return this.reshape(n);
      case 'Squeeze':
        return this.squeeze(n);
      case 'ConcatV2':
        return this.concat(n);
      case 'ResizeBilinear':
        return this.resizeBilinear(n);
      case 'DepthToSpace':
        return this.depthToSpace(n);
      case 'Shape':
      case 'StridedSlice':
      case 'Pack':
        return this.fold(n);
      default:
        throw new Error(`unsupported TensorFlow op ${n.op} (node ${n.name})`);
    }
  }

  // ---- graph plumbing -------------------------------------------------------

  private node(name: string): TfNode {
    const n = this.byName.get(name);
    if (!n) throw new Error(`graph references missing node ${name}`);
    return n;
  }

  private emit(opType: string, inputs: string[], attrs?: Record<string, AttrValue>, output?: string): string {
    const out = output ?? derived(`${opType}_${this.serial++}`);
    this.nodes.push({ opType, name: `${out}/${opType}`, inputs, outputs: [out], attrs });
    return out;
  }

  /** Binds the TF node's output name to an already emitted ONNX tensor. */
  private define(n: TfNode, produced: string, shape: Shape): void {
    if (produced !== n.name) this.emit('Identity', [produced], undefined, n.name);
    this.shapes.set(n.name, shape);
  }

  /** ONNX name for input i of a node, materialising constants as initializers. */
  private in(n: TfNode, i: number): string {
    const name = tensorName(n.inputs[i]);
    if (this.shapes.has(name)) return name;
    const w = this.graph.weights.get(name);
    if (w && this.node(name).op === 'Const') {
      if (w.dtype !== 'float32') throw new Error(`${n.op} ${n.name}: integer constant ${name} used as data`);
      return this.addFloat(name, w.shape, w.data as Float32Array);
    }
    if (this.folded.has(name)) throw new Error(`${n.op} ${n.name}: shape computation ${name} used as data`);
    throw new Error(`${n.op} ${n.name}: input ${name} was not converted`);
  }

  private shape(tensor: string): Shape {
    const name = tensorName(tensor);
    const s = this.shapes.get(name);
    if (s) return s;
    const w = this.graph.weights.get(name);
    if (w) return w.shape;
    throw new Error(`no static shape for ${name}`);
  }

  private weight(n: TfNode, i: number): TfWeight {
    const name = tensorName(n.inputs[i]);
    const w = this.graph.weights.get(name);
    if (!w || this.node(name).op !== 'Const') throw new Error(`${n.op} ${n.name}: input ${i} must be a constant`);
    return w;
  }

  /** Integer values of a constant or constant-folded input (e.g. axes, paddings, shapes). */
  private ints(n: TfNode, i: number): FoldedInts {
    const name = tensorName(n.inputs[i]);
    const f = this.folded.get(name);
    if (f) return f;
    const w = this.weight(n, i);
    return { shape: w.shape, values: Array.from(w.data, Math.round) };
  }

  private addFloat(name: string, dims: number[], data: Float32Array): string {
    if (!this.initializers.has(name)) this.initializers.set(name, floatTensor(name, dims, data));
    return name;
  }

  private addInt64(name: string, values: number[]): string {
    const unique = derived(`${name}_${this.serial++}`);
    this.initializers.set(unique, int64Tensor(unique, [values.length], values));
    return unique;
  }

  private valueInfo(name: string, shape: Shape): OnnxValueInfo {
    const dims: Dim[] = shape.map((d) => (d === BATCH ? 'batch' : d));
    return { name, elemType: DataType.FLOAT, dims };
  }

  // ---- ops ------------------------------------------------------------------

  private placeholder(n: TfNode): void {
    if (n.attr.dtype?.type !== 'DT_FLOAT') throw new Error(`input ${n.name} must be float32`);
    const shape = attr.shape(n, 'shape');
    if (!shape || shape.length !== 4 || shape.slice(1).some((d) => d < 1)) {
      throw new Error(`input ${n.name} needs a static NHWC shape, got ${JSON.stringify(shape)}`);
    }
    const s = [this.options.dynamicBatch ? BATCH : 1, ...shape.slice(1)];
    this.shapes.set(n.name, s);
    this.inputs.push(this.valueInfo(n.name, s));
  }

  private unary(n: TfNode, opType: string): void {
    this.emit(opType, [this.in(n, 0)], undefined, n.name);
    this.shapes.set(n.name, this.shape(n.inputs[0]));
  }

  private binary(n: TfNode, opType: string): void {
    this.emit(opType, [this.in(n, 0), this.in(n, 1)], undefined, n.name);
    this.shapes.set(n.name, broadcast(this.shape(n.inputs[0]), this.shape(n.inputs[1]), n));
  }

  /** Applies a TF activation; `nchw` says whether x is a transposed image tensor. */
  private activation(x: string, kind: string, n: TfNode, alpha?: TfWeight, nchw = false): string {
    switch (kind) {
      case 'Relu':
        return this.emit('Relu', [x]);
      case 'Relu6':
        return this.emit('Clip', [
          x,
          this.addFloat(derived('zero'), [], new Float32Array([0])),
          this.addFloat(derived('six'), [], new Float32Array([6])),
        ]);
      case 'LeakyRelu':
        return this.emit('LeakyRelu', [x], { alpha: { float: attr.float(n, 'leakyrelu_alpha', attr.float(n, 'alpha', 0.2)) } });
      case 'Prelu': {
        if (!alpha) throw new Error(`${n.name}: Prelu without alpha`);
        // PRelu broadcasts the slope from the right, so a per-channel slope for NCHW needs shape [C,1,1]
        const c = alpha.data.length;
        const dims = nchw ? [c, 1, 1] : [c];
        return this.emit('PRelu', [x, this.addFloat(derived(`${n.name}/slope`), dims, alpha.data as Float32Array)]);
      }
      default:
        throw new Error(`unsupported fused activation ${kind} in ${n.op} ${n.name}`);
    }
  }

  /** Splits fused_ops into [hasBias, activation] and checks the argument count. */
  private fusedOps(n: TfNode): { bias: boolean; act?: string; alpha?: TfWeight } {
    if (!n.op.startsWith('_Fused') && !n.op.startsWith('Fused')) return { bias: false };
    const ops = attr.strs(n, 'fused_ops');
    const numArgs = attr.int(n, 'num_args');
    if (ops[0] !== 'BiasAdd' || ops.length > 2) throw new Error(`${n.op} ${n.name}: unsupported fused_ops [${ops.join(', ')}]`);
    const act = ops[1];
    const expectedArgs = act === 'Prelu' ? 2 : 1;
    if (numArgs !== expectedArgs) throw new Error(`${n.op} ${n.name}: num_args ${numArgs} does not match [${ops.join(', ')}]`);
    // inputs are [x, filter-or-matrix, bias, alpha?]
    return { bias: true, act, alpha: act === 'Prelu' ? this.weight(n, 3) : undefined };
  }

  private conv(n: TfNode, depthwise: boolean): void {
    if (attr.str(n, 'data_format', 'NHWC') !== 'NHWC') throw new Error(`${n.name}: only NHWC convolutions are supported`);
    const [batch, inH, inW, inC] = this.shape(n.inputs[0]);
    const k = this.weight(n, 1);
    const [kH, kW, kIn, kOut] = k.shape;
    const strides = attr.ints(n, 'strides');
    const dil = attr.ints(n, 'dilations');
    const [sH, sW] = [strides[1] ?? 1, strides[2] ?? 1];
    const [dH, dW] = [dil[1] ?? 1, dil[2] ?? 1];
    const geom = windowGeometry(n, [inH, inW], [kH, kW], [sH, sW], [dH, dW]);

    let weight: Float32Array;
    let wDims: number[];
    let group = 1;
    let outC: number;
    if (depthwise) {
      if (kIn !== inC) throw new Error(`${n.name}: depthwise kernel expects ${kIn} channels, input has ${inC}`);
      weight = depthwiseToOnnx(k.data as Float32Array, kH, kW, kIn, kOut);
      wDims = [kIn * kOut, 1, kH, kW];
      group = kIn;
      outC = kIn * kOut;
    } else {
      if (kIn !== inC) throw new Error(`${n.name}: kernel expects ${kIn} channels, input has ${inC}`);
      weight = hwioToOihw(k.data as Float32Array, kH, kW, kIn, kOut);
      wDims = [kOut, kIn, kH, kW];
      outC = kOut;
    }
    const wName = this.addFloat(derived(`${tensorName(n.inputs[1])}/${depthwise ? 'depthwise_oihw' : 'oihw'}`), wDims, weight);
    const fused = this.fusedOps(n);
    const convInputs = [this.emit('Transpose', [this.in(n, 0)], { perm: TO_NCHW }), wName];
    if (fused.bias) {
      const b = this.weight(n, 2);
      if (b.data.length !== outC) throw new Error(`${n.name}: bias has ${b.data.length} values for ${outC} channels`);
      convInputs.push(this.in(n, 2));
    }
    let y = this.emit('Conv', convInputs, {
      kernel_shape: [kH, kW],
      strides: [sH, sW],
      dilations: [dH, dW],
      pads: geom.pads,
      group,
    });
    if (fused.act) y = this.activation(y, fused.act, n, fused.alpha, true);
    this.emit('Transpose', [y], { perm: TO_NHWC }, n.name);
    this.shapes.set(n.name, [batch, geom.out[0], geom.out[1], outC]);
  }

  private pool(n: TfNode): void {
    if (attr.str(n, 'data_format', 'NHWC') !== 'NHWC') throw new Error(`${n.name}: only NHWC pooling is supported`);
    const [batch, inH, inW, c] = this.shape(n.inputs[0]);
    const ksize = attr.ints(n, 'ksize');
    const strides = attr.ints(n, 'strides');
    if (ksize[0] !== 1 || ksize[3] !== 1 || strides[0] !== 1 || strides[3] !== 1) {
      throw new Error(`${n.name}: pooling across batch or channels is not supported`);
    }
    const geom = windowGeometry(n, [inH, inW], [ksize[1], ksize[2]], [strides[1], strides[2]], [1, 1]);
    const x = this.emit('Transpose', [this.in(n, 0)], { perm: TO_NCHW });
    const attrs: Record<string, AttrValue> = { kernel_shape: [ksize[1], ksize[2]], strides: [strides[1], strides[2]], pads: geom.pads };
    // TF averages only over real pixels at SAME borders, which is ONNX's count_include_pad=0
    if (n.op === 'AvgPool') attrs.count_include_pad = 0;
    const y = this.emit(n.op === 'MaxPool' ? 'MaxPool' : 'AveragePool', [x], attrs);
    this.emit('Transpose', [y], { perm: TO_NHWC }, n.name);
    this.shapes.set(n.name, [batch, geom.out[0], geom.out[1], c]);
  }

  private matMul(n: TfNode): void {
    const transA = attr.bool(n, 'transpose_a');
    const transB = attr.bool(n, 'transpose_b');
    const a = this.shape(n.inputs[0]);
    const b = this.shape(n.inputs[1]);
    if (a.length !== 2 || b.length !== 2) throw new Error(`${n.name}: only 2-D MatMul is supported`);
    const m = transA ? a[1] : a[0];
    const k = transA ? a[0] : a[1];
    const [kb, cols] = transB ? [b[1], b[0]] : [b[0], b[1]];
    if (k !== kb) throw new Error(`${n.name}: MatMul inner dimensions ${k} and ${kb} differ`);
    const fused = this.fusedOps(n);
    const inputs = [this.in(n, 0), this.in(n, 1)];
    if (fused.bias) inputs.push(this.in(n, 2));
    let y = this.emit('Gemm', inputs, { transA: transA ? 1 : 0, transB: transB ? 1 : 0 });
    if (fused.act) y = this.activation(y, fused.act, n, fused.alpha);
    this.define(n, y, [m, cols]);
  }

  private reduce(n: TfNode): void {
    const x = this.shape(n.inputs[0]);
    const axes = this.ints(n, 1).values.map((a) => (a < 0 ? a + x.length : a));
    const keep = attr.bool(n, 'keep_dims');
    const opType = { Mean: 'ReduceMean', Sum: 'ReduceSum', Max: 'ReduceMax', Min: 'ReduceMin' }[n.op] as string;
    // opset 13 moved ReduceSum's axes to an input; the others keep the attribute until opset 18
    if (opType === 'ReduceSum') {
      this.emit(opType, [this.in(n, 0), this.addInt64(`${n.name}/axes`, axes)], { keepdims: keep ? 1 : 0 }, n.name);
    } else {
      this.emit(opType, [this.in(n, 0)], { axes, keepdims: keep ? 1 : 0 }, n.name);
    }
    const out = keep ? x.map((d, i) => (axes.includes(i) ? 1 : d)) : x.filter((_, i) => !axes.includes(i));
    this.shapes.set(n.name, out);
  }

  private pad(n: TfNode): void {
    const x = this.shape(n.inputs[0]);
    const p = this.ints(n, 1).values;
    if (p.length !== x.length * 2) throw new Error(`${n.name}: paddings do not match rank ${x.length}`);
    if (p[0] !== 0 || p[1] !== 0) throw new Error(`${n.name}: padding the batch dimension is not supported`);
    const begins = x.map((_, i) => p[2 * i]);
    const ends = x.map((_, i) => p[2 * i + 1]);
    this.emit('Pad', [this.in(n, 0), this.addInt64(`${n.name}/pads`, [...begins, ...ends])], { mode: 'constant' }, n.name);
    this.shapes.set(n.name, x.map((d, i) => (d === BATCH ? d : d + begins[i] + ends[i])));
  }

  private reshape(n: TfNode): void {
    const x = this.shape(n.inputs[0]);
    const target = [...this.ints(n, 1).values];
    const perSample = x.slice(1).reduce((a, b) => a * b, 1);
    const total = x[0] === BATCH ? undefined : x[0] * perSample;
    const known = (t: number[]) => t.reduce((a, d) => (d === -1 || d === BATCH ? a : a * d), 1);

    let onnxTarget: number[];
    let out: Shape;
    if (x[0] === BATCH) {
      // The batch must travel through the reshape untouched: the leading target entry has to
      // stand for it (a folded batch, -1, or the exporter's hard-coded 1) and the rest must
      // cover exactly one sample. ONNX's 0 copies the input's batch dimension.
      const rest = target.slice(1);
      const holes = rest.filter((d) => d === -1).length;
      if (holes === 1) rest[rest.indexOf(-1)] = perSample / known(rest);
      const leadOk = target[0] === BATCH || target[0] === -1 || target[0] === 1;
      if (!leadOk || holes > 1 || known(rest) !== perSample || !Number.isInteger(perSample / known(rest))) {
        throw new Error(`${n.name}: reshape to [${target}] does not keep the batch dimension; convert with a fixed batch`);
      }
      onnxTarget = [0, ...rest];
      out = [BATCH, ...rest];
    } else {
      const t = [...target];
      const holes = t.filter((d) => d === -1).length;
      if (holes > 1) throw new Error(`${n.name}: reshape target [${target}] has several -1 entries`);
      if (holes === 1) t[t.indexOf(-1)] = (total as number) / known(t);
      if (t.reduce((a, b) => a * b, 1) !== total) throw new Error(`${n.name}: reshape [${x}] -> [${target}] changes the size`);
      onnxTarget = t;
      out = t;
    }
    this.emit('Reshape', [this.in(n, 0), this.addInt64(`${n.name}/shape`, onnxTarget)], undefined, n.name);
    this.shapes.set(n.name, out);
  }

  private squeeze(n: TfNode): void {
    const x = this.shape(n.inputs[0]);
    let axes = attr.ints(n, 'squeeze_dims').map((a) => (a < 0 ? a + x.length : a));
    if (axes.length === 0) axes = x.flatMap((d, i) => (d === 1 ? [i] : []));
    if (axes.some((a) => x[a] !== 1)) throw new Error(`${n.name}: squeezing a dimension that is not 1`);
    this.emit('Squeeze', [this.in(n, 0), this.addInt64(`${n.name}/axes`, axes)], undefined, n.name);
    this.shapes.set(n.name, x.filter((_, i) => !axes.includes(i)));
  }

  private concat(n: TfNode): void {
    const count = n.inputs.length - 1;
    const shapes = n.inputs.slice(0, count).map((i) => this.shape(i));
    const rank = shapes[0].length;
    let axis = this.ints(n, count).values[0];
    if (axis < 0) axis += rank;
    if (axis === 0 && shapes[0][0] === BATCH) throw new Error(`${n.name}: concatenation along the batch is not supported`);
    const inputs = n.inputs.slice(0, count).map((_, i) => this.in(n, i));
    this.emit('Concat', inputs, { axis }, n.name);
    const out = [...shapes[0]];
    out[axis] = shapes.reduce((a, s) => a + s[axis], 0);
    this.shapes.set(n.name, out);
  }

  private resizeBilinear(n: TfNode): void {
    const [batch, inH, inW, c] = this.shape(n.inputs[0]);
    const [outH, outW] = this.ints(n, 1).values;
    const alignCorners = attr.bool(n, 'align_corners');
    const halfPixel = attr.bool(n, 'half_pixel_centers');
    const mode = alignCorners ? 'align_corners' : halfPixel ? 'half_pixel' : 'asymmetric';
    const scales = this.addFloat(derived(`${n.name}/scales`), [4], new Float32Array([1, 1, outH / inH, outW / inW]));
    const x = this.emit('Transpose', [this.in(n, 0)], { perm: TO_NCHW });
    const y = this.emit('Resize', [x, '', scales], { mode: 'linear', coordinate_transformation_mode: mode });
    this.emit('Transpose', [y], { perm: TO_NHWC }, n.name);
    this.shapes.set(n.name, [batch, outH, outW, c]);
  }

  private depthToSpace(n: TfNode): void {
    if (attr.str(n, 'data_format', 'NHWC') !== 'NHWC') throw new Error(`${n.name}: only NHWC DepthToSpace is supported`);
    const [batch, h, w, c] = this.shape(n.inputs[0]);
    const b = attr.int(n, 'block_size');
    // TF orders the block offsets before the output channel, which is ONNX's DCR mode
    const x = this.emit('Transpose', [this.in(n, 0)], { perm: TO_NCHW });
    const y = this.emit('DepthToSpace', [x], { blocksize: b, mode: 'DCR' });
    this.emit('Transpose', [y], { perm: TO_NHWC }, n.name);
    this.shapes.set(n.name, [batch, h * b, w * b, c / (b * b)]);
  }

  /** Evaluates shape arithmetic (Shape -> StridedSlice -> Pack) at conversion time. */
  private fold(n: TfNode): void {
    let result: FoldedInts;
    if (n.op === 'Shape') {
      const s = this.shape(n.inputs[0]);
      result = { shape: [s.length], values: [...s] };
    } else if (n.op === 'StridedSlice') {
      result = stridedSlice1d(n, this.ints(n, 0), this.ints(n, 1).values, this.ints(n, 2).values, this.ints(n, 3).values);
    } else {
      if (attr.int(n, 'axis') !== 0) throw new Error(`${n.name}: only Pack along axis 0 can be folded`);
      const parts = n.inputs.map((_, i) => this.ints(n, i));
      if (parts.some((p) => p.shape.length !== 0)) throw new Error(`${n.name}: only packing scalars can be folded`);
      result = { shape: [parts.length], values: parts.map((p) => p.values[0]) };
    }
    this.folded.set(n.name, result);
  }
}

/** Names for tensors the translation introduces; ':' cannot occur in TF node names. */
function derived(name: string): string {
  return `onnx::${name}`;
}

function tensorName(input: string): string {
  const m = /^(.*):(\d+)$/.exec(input);
  if (!m) return input;
  if (m[2] !== '0') throw new Error(`multi-output tensor ${input} is not supported`);
  return m[1];
}

function broadcast(a: Shape, b: Shape, n: TfNode): Shape {
  const rank = Math.max(a.length, b.length);
  const out: Shape = [];
  for (let i = 0; i < rank; i++) {
    const da = a[a.length - rank + i] ?? 1;
    const db = b[b.length - rank + i] ?? 1;
    if (da === db || db === 1) out.push(da);
    else if (da === 1) out.push(db);
    else throw new Error(`${n.name}: cannot broadcast [${a}] with [${b}]`);
  }
  return out;
}

/** Output size and ONNX pads ([top, left, bottom, right]) of a 2-D sliding window. */
function windowGeometry(n: TfNode, input: number[], kernel: number[], stride: number[], dilation: number[]) {
  const padding = attr.str(n, 'padding');
  const out: number[] = [];
  const before: number[] = [];
  const after: number[] = [];
  const explicit = attr.ints(n, 'explicit_paddings');
  for (let i = 0; i < 2; i++) {
    const span = (kernel[i] - 1) * dilation[i] + 1;
    if (padding === 'SAME') {
      // TF puts the odd padding pixel at the end (bottom/right)
      const o = Math.ceil(input[i] / stride[i]);
      const total = Math.max((o - 1) * stride[i] + span - input[i], 0);
      out.push(o);
      before.push(Math.floor(total / 2));
      after.push(total - Math.floor(total / 2));
    } else if (padding === 'VALID' || padding === 'EXPLICIT') {
      const [pb, pa] = padding === 'EXPLICIT' ? [explicit[2 + 2 * i], explicit[3 + 2 * i]] : [0, 0];
      out.push(Math.floor((input[i] + pb + pa - span) / stride[i]) + 1);
      before.push(pb);
      after.push(pa);
    } else {
      throw new Error(`${n.name}: unsupported padding ${padding}`);
    }
  }
  return { out, pads: [...before, ...after] };
}

function hwioToOihw(k: Float32Array, kH: number, kW: number, cin: number, cout: number): Float32Array {
  const out = new Float32Array(k.length);
  for (let h = 0; h < kH; h++)
    for (let w = 0; w < kW; w++)
      for (let i = 0; i < cin; i++)
        for (let o = 0; o < cout; o++) out[((o * cin + i) * kH + h) * kW + w] = k[((h * kW + w) * cin + i) * cout + o];
  return out;
}

/** TF depthwise output channel c*M+m comes from input channel c, matching ONNX groups of M. */
function depthwiseToOnnx(k: Float32Array, kH: number, kW: number, c: number, mult: number): Float32Array {
  const out = new Float32Array(k.length);
  for (let h = 0; h < kH; h++)
    for (let w = 0; w < kW; w++)
      for (let ch = 0; ch < c; ch++)
        for (let m = 0; m < mult; m++) out[((ch * mult + m) * kH + h) * kW + w] = k[((h * kW + w) * c + ch) * mult + m];
  return out;
}

function stridedSlice1d(n: TfNode, x: FoldedInts, begin: number[], end: number[], strides: number[]): FoldedInts {
  if (x.shape.length !== 1 || begin.length !== 1) throw new Error(`${n.name}: only 1-D StridedSlice can be folded`);
  for (const m of ['ellipsis_mask', 'new_axis_mask']) {
    if (attr.int(n, m) !== 0) throw new Error(`${n.name}: StridedSlice ${m} is not supported`);
  }
  const len = x.values.length;
  const step = strides[0];
  if (step === 0) throw new Error(`${n.name}: zero stride`);
  const clamp = (v: number) => Math.min(Math.max(v < 0 ? v + len : v, step > 0 ? 0 : -1), step > 0 ? len : len - 1);
  const b = attr.int(n, 'begin_mask') & 1 ? (step > 0 ? 0 : len - 1) : clamp(begin[0]);
  const e = attr.int(n, 'end_mask') & 1 ? (step > 0 ? len : -1) : clamp(end[0]);
  if (attr.int(n, 'shrink_axis_mask') & 1) {
    const at = begin[0] < 0 ? begin[0] + len : begin[0];
    return { shape: [], values: [x.values[at]] };
  }
  const values: number[] = [];
  for (let i = b; step > 0 ? i < e : i > e; i += step) values.push(x.values[i]);
  return { shape: [values.length], values };
}
