// Converts dlib's face-recognition ResNet (dlib_face_recognition_resnet_model_v1.dat, the
// `anet_type` of dlib's examples/dnn_face_recognition_ex.cpp and of the Python binding's
// face_recognition_model_v1) from dlib's own serialisation into an ONNX graph.
//
// dlib writes a network the way its templates nest it, outermost first: the loss layer's
// version and details, then for every layer from the outermost (fc) down to the innermost
// (the first con) its add_layer/add_tag_layer/add_skip_layer version number, then the input
// layer, and then, unwinding from the innermost layer outwards, each layer's details (a name
// tag such as "con_4", its settings and parameter tensor) followed by the add_layer's own
// training state (three bools and a few tensors, empty in a saved net). So the details come
// in forward order. This parser walks that known structure step by step, checks every name
// tag, size, stride and padding against what anet_type declares, and refuses anything else
// with the layer and byte offset where it went wrong; no offset is hard-coded.
//
// Encodings (dlib/serialize.h): an integer is a control byte (low 4 bits: byte count,
// 0x80: negative) then that many little-endian magnitude bytes; a bool is the ASCII byte
// '1' or '0'; a string is its length (integer) then its bytes; a float or double is two
// integers, mantissa (int64) then exponent (int16), value = mantissa * 2^exponent
// (exponent 32000/32001/32002: +inf/-inf/NaN). A tensor (dlib/cuda/tensor.h) is version 2,
// num_samples, k, nr, nc, then its values as raw little-endian float32; an alias_tensor
// (a view's shape) is version 1 and the same four sizes without data.
//
// Semantics that matter (read from dlib/dnn/layers.h and dlib/cuda/cpu_dlib.cpp):
//  - con_ and the pools pad by size/2 on every side when the stride is 1 and by 0
//    otherwise (template defaults; the stored padding is checked against them), and the
//    output size is 1 + (in + 2*pad - size) / stride, rounded down: ONNX's floor mode;
//  - con_ filters are stored [num_filters, k, nr, nc] (ONNX's OIHW), then one bias per
//    filter, and are applied as a cross-correlation, as ONNX Conv does;
//  - affine_ in CONV_MODE is out = in * gamma[k] + beta[k], gamma then beta in `params`;
//    folded into the preceding con_ (W * gamma, b * gamma + beta) unless asked not to;
//  - avg_pool_ averages only the window's in-bounds pixels (count_include_pad 0), max_pool_
//    ignores the padding; avg_pool_everything is avg_pool_<0,0,1,1>: a global average;
//  - add_prev_ sums two tensors of possibly different sizes into one of the larger size in
//    each dimension, index 0 aligned, the missing part of either taken as zero
//    (tt::add(dest, src1, src2)): so the smaller one is zero-padded at the end (channels,
//    bottom rows, right columns) with an ONNX Pad before the Add. In this network the
//    downsampling blocks add 32->64, 64->128 and 128->256 channels this way, and at 8x8 ->
//    3x3 (block) vs 4x4 (avg_pool), and 4x4 -> 1x1 vs 2x2, the block's output is padded
//    spatially;
//  - fc_ weights are stored [num_inputs, num_outputs] and applied as x * W (a MatMul on the
//    flattened [k, nr, nc] input); fc_no_bias stores no bias;
//  - input_rgb_image_sized<150> feeds (pixel - avg[channel]) / 256 in R, G, B planes; the
//    ONNX graph takes that normalised tensor as its input (the engine applies the means and
//    the 1/256 scale from the manifest), and the means are returned for checking;
//  - loss_metric_ stores its margin and distance threshold and computes nothing at
//    inference: the descriptor is the fc layer's raw output.
import { encodeModel, floatTensor, int64Tensor, DataType, type AttrValue, type Dim, type OnnxModel, type OnnxNode, type OnnxTensor, type OnnxValueInfo } from './onnx.js';
import type { ConvertResult } from './to-onnx.js';

/** Bump whenever the emitted ONNX can change, so cached conversions are redone. */
export const DLIB_DNN_VERSION = 1;

export class DlibFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DlibFormatError';
  }
}

// ---------------------------------------------------------------------------------------
// The network as anet_type declares it, in forward order (input side first).

type StepSpec =
  | { kind: 'con'; filters: number; size: number; stride: number }
  | { kind: 'affine' }
  | { kind: 'relu' }
  | { kind: 'max_pool' | 'avg_pool'; size: number; stride: number } // size 0: the whole input
  | { kind: 'add_prev'; tag: number }
  | { kind: 'fc_no_bias'; outputs: number }
  | { kind: 'tag'; id: number }
  | { kind: 'skip'; id: number };

interface Step {
  /** Where the step sits, for error messages and node names. */
  label: string;
  spec: StepSpec;
}

interface NetSpec {
  inputSize: number;
  steps: Step[];
}

/**
 * dlib's anet_type:
 *   block<N,BN,stride,SUBNET>  = BN<con<N,3,3,1,1,relu<BN<con<N,3,3,stride,stride,SUBNET>>>>>
 *   residual<..>      = add_prev1<block<N,BN,1,tag1<SUBNET>>>
 *   residual_down<..> = add_prev2<avg_pool<2,2,2,2,skip1<tag2<block<N,BN,2,tag1<SUBNET>>>>>>
 *   ares<N> = relu<residual<block,N,affine>>, ares_down<N> = relu<residual_down<block,N,affine>>
 *   loss_metric<fc_no_bias<128,avg_pool_everything<alevel0<alevel1<alevel2<alevel3<alevel4<
 *     max_pool<3,3,2,2,relu<affine<con<32,7,7,2,2,input_rgb_image_sized<150>>>>>>>>>>>>>
 */
function faceResnetV1(): NetSpec {
  const steps: Step[] = [];
  const push = (label: string, spec: StepSpec) => steps.push({ label, spec });
  const block = (at: string, n: number, stride: number) => {
    push(`${at} con1`, { kind: 'con', filters: n, size: 3, stride });
    push(`${at} affine1`, { kind: 'affine' });
    push(`${at} relu1`, { kind: 'relu' });
    push(`${at} con2`, { kind: 'con', filters: n, size: 3, stride: 1 });
    push(`${at} affine2`, { kind: 'affine' });
  };
  const ares = (at: string, n: number) => {
    at = `${at} ares<${n}>`;
    push(`${at} tag1`, { kind: 'tag', id: 1 });
    block(at, n, 1);
    push(`${at} add_prev1`, { kind: 'add_prev', tag: 1 });
    push(`${at} relu`, { kind: 'relu' });
  };
  const aresDown = (at: string, n: number) => {
    at = `${at} ares_down<${n}>`;
    push(`${at} tag1`, { kind: 'tag', id: 1 });
    block(at, n, 2);
    push(`${at} tag2`, { kind: 'tag', id: 2 });
    push(`${at} skip1`, { kind: 'skip', id: 1 });
    push(`${at} avg_pool`, { kind: 'avg_pool', size: 2, stride: 2 });
    push(`${at} add_prev2`, { kind: 'add_prev', tag: 2 });
    push(`${at} relu`, { kind: 'relu' });
  };
  push('stem con', { kind: 'con', filters: 32, size: 7, stride: 2 });
  push('stem affine', { kind: 'affine' });
  push('stem relu', { kind: 'relu' });
  push('stem max_pool', { kind: 'max_pool', size: 3, stride: 2 });
  // Innermost template first: alevel4 sits on the max_pool, alevel0 under the pooling.
  for (let i = 1; i <= 3; i++) ares(`alevel4.${i}`, 32);
  aresDown('alevel3.1', 64);
  for (let i = 2; i <= 4; i++) ares(`alevel3.${i}`, 64);
  aresDown('alevel2.1', 128);
  for (let i = 2; i <= 3; i++) ares(`alevel2.${i}`, 128);
  aresDown('alevel1.1', 256);
  for (let i = 2; i <= 3; i++) ares(`alevel1.${i}`, 256);
  aresDown('alevel0.1', 256);
  push('avg_pool_everything', { kind: 'avg_pool', size: 0, stride: 1 });
  push('fc_no_bias', { kind: 'fc_no_bias', outputs: 128 });
  return { inputSize: 150, steps };
}

// ---------------------------------------------------------------------------------------
// Parsed layers.

interface ConLayer {
  kind: 'con';
  filters: number;
  channels: number;
  size: number;
  stride: number;
  padding: number;
  /** [filters, channels, size, size]. */
  weights: Float32Array;
  bias?: Float32Array;
  /** con_6 may fuse a ReLU after the bias. */
  relu: boolean;
}

interface AffineLayer {
  kind: 'affine';
  /** 0: CONV_MODE (one gamma/beta per channel), 1: FC_MODE (one per element). */
  mode: number;
  /** gamma's [k, nr, nc]. */
  dims: [number, number, number];
  gamma: Float32Array;
  beta: Float32Array;
  disabled: boolean;
}

interface PoolLayer {
  kind: 'max_pool' | 'avg_pool';
  /** 0: the whole input. */
  size: number;
  stride: number;
  padding: number;
}

interface FcLayer {
  kind: 'fc_no_bias';
  inputs: number;
  outputs: number;
  /** [inputs, outputs], row-major. */
  weights: Float32Array;
}

type ParsedLayer =
  | ConLayer
  | AffineLayer
  | PoolLayer
  | FcLayer
  | { kind: 'relu'; disabled: boolean }
  | { kind: 'add_prev'; tag: number }
  | { kind: 'tag'; id: number }
  | { kind: 'skip'; id: number };

export interface DlibNet {
  /** input_rgb_image_sized's stored means, R, G, B (float32 values). */
  mean: [number, number, number];
  inputSize: { height: number; width: number };
  loss: { tag: string; margin: number; distanceThreshold: number };
  layers: { label: string; layer: ParsedLayer }[];
}

// ---------------------------------------------------------------------------------------
// dlib's serialisation primitives.

class Reader {
  private readonly view: DataView;
  pos = 0;
  where = 'start of file';

  constructor(private readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  get remaining(): number {
    return this.bytes.byteLength - this.pos;
  }

  fail(message: string, at = this.pos): never {
    throw new DlibFormatError(`not dlib's face-recognition ResNet v1: ${this.where}, byte ${at}: ${message}`);
  }

  private byte(what: string): number {
    if (this.pos >= this.bytes.byteLength) this.fail(`file ends while reading ${what} (truncated?)`);
    return this.bytes[this.pos++];
  }

  /** A dlib integer of at most `maxBytes` magnitude bytes (the C++ type's size). */
  private integer(what: string, maxBytes: number, signed: boolean): number {
    const at = this.pos;
    const control = this.byte(what);
    // dlib's unpack_int: signed types keep the low 4 bits as the size and 0x80 as the sign;
    // unsigned ones mask with 0x8F, so a sign bit makes the size invalid.
    const size = signed ? control & 0x0f : control & 0x8f;
    if (size === 0 || size > maxBytes) this.fail(`${what}: bad integer control byte 0x${control.toString(16)}`, at);
    if (this.remaining < size) this.fail(`file ends while reading ${what} (truncated?)`);
    let value = 0n;
    for (let i = size - 1; i >= 0; i--) value = (value << 8n) | BigInt(this.bytes[this.pos + i]);
    this.pos += size;
    if (signed && control & 0x80) value = -value;
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) this.fail(`${what}: ${value} is out of range`, at);
    return Number(value);
  }

  int(what: string): number {
    return this.integer(what, 4, true);
  }

  long(what: string): number {
    return this.integer(what, 8, true);
  }

  unsigned(what: string, maxBytes = 8): number {
    return this.integer(what, maxBytes, false);
  }

  /** A float or double in dlib's float_details form (mantissa, exponent). */
  real(what: string): number {
    const at = this.pos;
    if (this.remaining > 0 && (this.bytes[this.pos] & 0x70) !== 0) this.fail(`${what}: old ASCII float encoding, not supported`);
    const mantissa = this.long(`${what} (mantissa)`);
    const exponent = this.integer(`${what} (exponent)`, 2, true);
    if (exponent === 32000) return Infinity;
    if (exponent === 32001) return -Infinity;
    if (exponent === 32002) return NaN;
    if (exponent > 32002) this.fail(`${what}: bad exponent ${exponent}`, at);
    return mantissa * 2 ** exponent;
  }

  float32(what: string): number {
    return Math.fround(this.real(what));
  }

  bool(what: string): boolean {
    const at = this.pos;
    const b = this.byte(what);
    if (b === 0x31) return true;
    if (b === 0x30) return false;
    return this.fail(`${what}: expected '0' or '1', found byte 0x${b.toString(16)}`, at);
  }

  /** A layer's name tag, which must be one of `expected`. */
  tag(expected: readonly string[]): string {
    const at = this.pos;
    const length = this.unsigned('a name tag length');
    const want = expected.map((e) => `'${e}'`).join(' or ');
    if (length > 64) this.fail(`expected the name tag ${want}, found no name (a string length of ${length})`, at);
    if (length > this.remaining) this.fail(`file ends inside a name tag of ${length} bytes (truncated?)`, at);
    const tag = new TextDecoder('latin1').decode(this.bytes.subarray(this.pos, this.pos + length));
    this.pos += length;
    if (!expected.includes(tag)) this.fail(`expected the name tag ${want}, found '${tag.replace(/[^\x20-\x7e]/g, '?')}'`, at);
    return tag;
  }

  version(what: string, min: number, max: number): number {
    const at = this.pos;
    const v = this.int(`${what} version`);
    if (v < min || v > max) this.fail(`${what} version ${v}, expected ${min === max ? min : `${min} to ${max}`}`, at);
    return v;
  }

  private dims(what: string): [number, number, number, number] {
    const d = [this.long(`${what} num_samples`), this.long(`${what} k`), this.long(`${what} nr`), this.long(`${what} nc`)] as [number, number, number, number];
    if (d.some((x) => x < 0)) this.fail(`${what}: negative size [${d}]`);
    return d;
  }

  /** A resizable_tensor: its shape and float32 values. */
  tensor(what: string): { dims: [number, number, number, number]; values: Float32Array } {
    this.version(`${what} tensor`, 2, 2);
    const dims = this.dims(what);
    const count = dims.reduce((a, b) => a * b, 1);
    if (count * 4 > this.remaining) this.fail(`${what}: a tensor of ${count} floats needs ${count * 4} bytes, ${this.remaining} left (truncated?)`);
    const values = new Float32Array(count);
    for (let i = 0; i < count; i++) values[i] = this.view.getFloat32(this.pos + i * 4, true);
    this.pos += count * 4;
    return { dims, values };
  }

  /** An alias_tensor: a shape only. */
  alias(what: string): [number, number, number, number] {
    this.version(`${what} alias_tensor`, 1, 1);
    return this.dims(what);
  }
}

function sameDims(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** dlib's default padding for con_, max_pool_ and avg_pool_: size/2 at stride 1, else 0. */
function defaultPadding(size: number, stride: number): number {
  return stride !== 1 ? 0 : Math.floor(size / 2);
}

// ---------------------------------------------------------------------------------------
// Parsing.

/** Parses a serialised anet_type, checking it against the declared structure. */
export function parseDlibFaceResnet(bytes: Uint8Array): DlibNet {
  const spec = faceResnetV1();
  const r = new Reader(bytes);

  // add_loss_layer: version 1, the loss details, then the network.
  r.where = 'the loss layer (loss_metric)';
  r.version('add_loss_layer', 1, 1);
  const lossTag = r.tag(['loss_metric_2', 'loss_metric_']);
  const loss =
    lossTag === 'loss_metric_2'
      ? { tag: lossTag, margin: r.float32('margin'), distanceThreshold: r.float32('distance threshold') }
      : { tag: lossTag, margin: 0.1, distanceThreshold: 0.75 };

  // Every layer's version number, outermost first. add_layer is version 1 or 2 (2 adds
  // params_grad); the one directly on the input layer has its own format, version 2 or 3
  // (3 adds _sample_expansion_factor). Tags and skips are version 1.
  const versions: number[] = new Array(spec.steps.length);
  for (let i = spec.steps.length - 1; i >= 0; i--) {
    const step = spec.steps[i];
    r.where = `${step.label} (layer ${i + 1} of ${spec.steps.length}, outermost first: its header)`;
    if (step.spec.kind === 'tag') versions[i] = r.version('add_tag_layer', 1, 1);
    else if (step.spec.kind === 'skip') versions[i] = r.version('add_skip_layer', 1, 1);
    else if (i === 0) versions[i] = r.version('add_layer on the input layer', 2, 3);
    else versions[i] = r.version('add_layer', 1, 2);
  }

  r.where = 'the input layer (input_rgb_image_sized)';
  r.tag(['input_rgb_image_sized']);
  const mean: [number, number, number] = [r.float32('avg_red'), r.float32('avg_green'), r.float32('avg_blue')];
  const height = r.unsigned('nr');
  const width = r.unsigned('nc');
  if (height !== spec.inputSize || width !== spec.inputSize) r.fail(`input size ${height}x${width}, expected ${spec.inputSize}x${spec.inputSize}`);

  // Layer details in forward order, each followed by its add_layer's training state.
  const layers: DlibNet['layers'] = [];
  for (let i = 0; i < spec.steps.length; i++) {
    const step = spec.steps[i];
    r.where = `${step.label} (layer ${i + 1} of ${spec.steps.length})`;
    const s = step.spec;
    if (s.kind === 'tag' || s.kind === 'skip') {
      layers.push({ label: step.label, layer: s });
      continue;
    }
    layers.push({ label: step.label, layer: readDetails(r, s) });
    r.where = `${step.label} (layer ${i + 1} of ${spec.steps.length}): add_layer state`;
    r.bool('this_layer_setup_called');
    r.bool('gradient_input_is_stale');
    r.bool('get_output_and_gradient_input_disabled');
    r.tensor('x_grad');
    r.tensor('cached_output');
    if (i === 0) {
      r.tensor('grad_final');
      if (versions[i] >= 3) r.unsigned('sample_expansion_factor', 4);
    } else if (versions[i] === 2) {
      r.tensor('params_grad');
    }
  }
  r.where = 'the end of the network';
  if (r.remaining !== 0) r.fail(`${r.remaining} bytes follow the network`);
  return { mean, inputSize: { height, width }, loss, layers };
}

function readDetails(r: Reader, s: Exclude<StepSpec, { kind: 'tag' | 'skip' }>): ParsedLayer {
  switch (s.kind) {
    case 'con': {
      const tag = r.tag(['con_4', 'con_5', 'con_6']);
      const params = r.tensor('params');
      const filters = r.long('num_filters');
      const nr = r.long('nr');
      const nc = r.long('nc');
      const strideY = r.int('stride_y');
      const strideX = r.int('stride_x');
      const paddingY = r.int('padding_y');
      const paddingX = r.int('padding_x');
      const filterDims = r.alias('filters');
      const biasDims = r.alias('biases');
      for (const m of ['learning_rate_multiplier', 'weight_decay_multiplier', 'bias_learning_rate_multiplier', 'bias_weight_decay_multiplier']) r.real(m);
      const useBias = tag === 'con_4' ? true : r.bool('use_bias');
      const useRelu = tag === 'con_6' ? r.bool('use_relu') : false;
      const padding = defaultPadding(s.size, s.stride);
      const declared = `con<${s.filters},${s.size},${s.size},${s.stride},${s.stride}> (padding ${padding})`;
      if (filters !== s.filters || nr !== s.size || nc !== s.size || strideY !== s.stride || strideX !== s.stride || paddingY !== padding || paddingX !== padding) {
        r.fail(`stored con<${filters},${nr},${nc},${strideY},${strideX}> (padding ${paddingY},${paddingX}), declared ${declared}`);
      }
      const channels = filterDims[1];
      if (!sameDims(filterDims, [filters, channels, nr, nc])) r.fail(`filters shape [${filterDims}] does not fit ${declared}`);
      if (useBias && !sameDims(biasDims, [1, filters, 1, 1])) r.fail(`biases shape [${biasDims}] does not fit ${filters} filters`);
      const weightCount = filters * channels * nr * nc;
      if (params.values.length !== weightCount + (useBias ? filters : 0)) {
        r.fail(`params hold ${params.values.length} values, ${declared} on ${channels} channels needs ${weightCount + (useBias ? filters : 0)}`);
      }
      return {
        kind: 'con',
        filters,
        channels,
        size: s.size,
        stride: s.stride,
        padding,
        weights: params.values.subarray(0, weightCount),
        bias: useBias ? params.values.subarray(weightCount) : undefined,
        relu: useRelu,
      };
    }
    case 'affine': {
      const at = r.pos;
      const tag = r.tag(['affine_', 'affine_2', 'bn_con2', 'bn_fc2']);
      if (tag.startsWith('bn_')) r.fail(`a batch-normalisation layer (${tag}) where anet_type has affine_: dlib converts it on loading, this converter does not`, at);
      const params = r.tensor('params');
      const gamma = r.alias('gamma');
      const beta = r.alias('beta');
      const mode = r.int('mode');
      const disabled = tag === 'affine_2' ? r.bool('disabled') : false;
      if (disabled) return { kind: 'affine', mode, dims: [0, 0, 0], gamma: new Float32Array(), beta: new Float32Array(), disabled };
      if (mode !== 0 && mode !== 1) r.fail(`affine mode ${mode}, expected 0 (CONV_MODE) or 1 (FC_MODE)`);
      if (!sameDims(gamma, beta) || gamma[0] !== 1 || (mode === 0 && (gamma[2] !== 1 || gamma[3] !== 1))) r.fail(`gamma [${gamma}] and beta [${beta}] do not fit affine mode ${mode}`);
      const n = gamma[1] * gamma[2] * gamma[3];
      if (params.values.length !== 2 * n) r.fail(`params hold ${params.values.length} values, gamma and beta need ${2 * n}`);
      return { kind: 'affine', mode, dims: [gamma[1], gamma[2], gamma[3]], gamma: params.values.subarray(0, n), beta: params.values.subarray(n), disabled };
    }
    case 'relu': {
      const tag = r.tag(['relu_', 'relu_2']);
      return { kind: 'relu', disabled: tag === 'relu_2' ? r.bool('disabled') : false };
    }
    case 'max_pool':
    case 'avg_pool': {
      r.tag([`${s.kind}_2`]);
      const nr = r.long('nr');
      const nc = r.long('nc');
      const strideY = r.int('stride_y');
      const strideX = r.int('stride_x');
      const paddingY = r.int('padding_y');
      const paddingX = r.int('padding_x');
      const padding = defaultPadding(s.size, s.stride);
      if (nr !== s.size || nc !== s.size || strideY !== s.stride || strideX !== s.stride || paddingY !== padding || paddingX !== padding) {
        r.fail(`stored ${s.kind}<${nr},${nc},${strideY},${strideX}> (padding ${paddingY},${paddingX}), declared ${s.kind}<${s.size},${s.size},${s.stride},${s.stride}> (padding ${padding})`);
      }
      return { kind: s.kind, size: s.size, stride: s.stride, padding };
    }
    case 'add_prev':
      // The tag's id is a template argument: nothing of it is stored.
      r.tag(['add_prev_']);
      return { kind: 'add_prev', tag: s.tag };
    case 'fc_no_bias': {
      const tag = r.tag(['fc_2', 'fc_3']);
      const outputs = r.unsigned('num_outputs');
      const inputs = r.unsigned('num_inputs');
      const params = r.tensor('params');
      const weights = r.alias('weights');
      r.alias('biases');
      const biasMode = r.int('bias_mode');
      for (const m of ['learning_rate_multiplier', 'weight_decay_multiplier', 'bias_learning_rate_multiplier', 'bias_weight_decay_multiplier']) r.real(m);
      if (tag === 'fc_3') r.bool('use_bias');
      if (biasMode !== 1) r.fail(`fc bias mode ${biasMode}, anet_type declares fc_no_bias (1)`);
      if (outputs !== s.outputs) r.fail(`fc has ${outputs} outputs, anet_type declares ${s.outputs}`);
      if (!sameDims(weights, [inputs, outputs, 1, 1]) || params.values.length !== inputs * outputs) {
        r.fail(`fc weights [${weights}] with ${params.values.length} values do not fit ${inputs} inputs x ${outputs} outputs`);
      }
      return { kind: 'fc_no_bias', inputs, outputs, weights: params.values };
    }
  }
}

// ---------------------------------------------------------------------------------------
// The ONNX graph.

export interface DlibConvertOptions {
  graphName: string;
  /** Name of the graph input (float32 [batch, 3, H, W], already normalised). */
  inputName: string;
  /** Name of the descriptor output (float32 [batch, 128]). */
  outputName: string;
  /** The batch axis: a symbolic name such as "batch", or a fixed size. */
  batchDim: Dim;
  /** Fold each affine_ into the con_ before it (default true); false emits Mul and Add. */
  foldAffine?: boolean;
  metadata?: Record<string, string>;
}

export interface DlibConvertResult extends ConvertResult {
  net: Pick<DlibNet, 'mean' | 'inputSize' | 'loss'>;
}

interface Value {
  name: string;
  c: number;
  h: number;
  w: number;
}

export function convertDlibFaceResnet(bytes: Uint8Array, options: DlibConvertOptions): DlibConvertResult {
  const net = parseDlibFaceResnet(bytes);
  const fold = options.foldAffine ?? true;
  const nodes: OnnxNode[] = [];
  const initializers: OnnxTensor[] = [];
  const tags = new Map<number, Value>();
  const nodeName = (label: string) => label.replace(/[<>]/g, '').replace(/[^A-Za-z0-9.]+/g, '_');
  const emit = (opType: string, label: string, inputs: string[], attrs?: Record<string, AttrValue>, output?: string): string => {
    const name = nodeName(label);
    const out = output ?? name;
    nodes.push({ opType, name, inputs, outputs: [out], attrs });
    return out;
  };
  const constant = (name: string, dims: number[], data: Float32Array): string => {
    initializers.push(floatTensor(name, dims, data));
    return name;
  };
  const fail = (label: string, message: string): never => {
    throw new DlibFormatError(`not dlib's face-recognition ResNet v1: ${label}: ${message}`);
  };

  let cur: Value = { name: options.inputName, c: 3, h: net.inputSize.height, w: net.inputSize.width };
  let output: Value | undefined;
  const layers = net.layers;
  for (let i = 0; i < layers.length; i++) {
    const { label, layer } = layers[i];
    const name = nodeName(label);
    switch (layer.kind) {
      case 'con': {
        if (layer.channels !== cur.c) fail(label, `filters for ${layer.channels} channels on a ${cur.c}-channel input`);
        const { filters, channels, size, stride, padding } = layer;
        const outH = Math.floor((cur.h + 2 * padding - size) / stride) + 1;
        const outW = Math.floor((cur.w + 2 * padding - size) / stride) + 1;
        if (outH < 1 || outW < 1) fail(label, `a ${size}x${size} filter does not fit a ${cur.h}x${cur.w} input`);
        let weights = layer.weights;
        let bias = layer.bias ?? new Float32Array(filters);
        const next = layers[i + 1]?.layer;
        let label2 = label;
        if (fold && !layer.relu && next?.kind === 'affine' && !next.disabled && next.mode === 0) {
          if (next.dims[0] !== filters) fail(layers[i + 1].label, `${next.dims[0]} channels after a con_ of ${filters} filters`);
          // out = (conv(x, W) + b) * g + beta = conv(x, W * g) + (b * g + beta), per filter.
          const per = channels * size * size;
          const w2 = new Float32Array(weights.length);
          const b2 = new Float32Array(filters);
          for (let o = 0; o < filters; o++) {
            const g = next.gamma[o];
            for (let j = o * per; j < (o + 1) * per; j++) w2[j] = weights[j] * g;
            b2[o] = bias[o] * g + next.beta[o];
          }
          weights = w2;
          bias = b2;
          label2 = `${label}+affine`;
          i++;
        }
        const out = emit(
          'Conv',
          label2,
          [cur.name, constant(`${name}/W`, [filters, channels, size, size], weights), constant(`${name}/B`, [filters], bias)],
          { kernel_shape: [size, size], strides: [stride, stride], pads: [padding, padding, padding, padding] },
        );
        cur = { name: out, c: filters, h: outH, w: outW };
        if (layer.relu) cur = { ...cur, name: emit('Relu', `${label} relu`, [cur.name]) };
        break;
      }
      case 'affine': {
        if (layer.disabled) break;
        const [k, nr, nc] = layer.dims;
        const perElement = layer.mode === 1;
        if (k !== cur.c || (perElement && (nr !== cur.h || nc !== cur.w))) fail(label, `gamma [${layer.dims}] on a [${cur.c}, ${cur.h}, ${cur.w}] tensor`);
        const dims = perElement ? [1, k, nr, nc] : [1, k, 1, 1];
        const scaled = emit('Mul', `${label} gamma`, [cur.name, constant(`${name}/gamma`, dims, layer.gamma)]);
        cur = { ...cur, name: emit('Add', `${label} beta`, [scaled, constant(`${name}/beta`, dims, layer.beta)]) };
        break;
      }
      case 'relu':
        if (!layer.disabled) cur = { ...cur, name: emit('Relu', label, [cur.name]) };
        break;
      case 'max_pool':
      case 'avg_pool': {
        const { size, stride, padding } = layer;
        const kh = size || cur.h;
        const kw = size || cur.w;
        if (kh > cur.h + 2 * padding || kw > cur.w + 2 * padding) fail(label, `a ${kh}x${kw} window does not fit a ${cur.h}x${cur.w} input`);
        const outH = Math.floor((cur.h + 2 * padding - kh) / stride) + 1;
        const outW = Math.floor((cur.w + 2 * padding - kw) / stride) + 1;
        let out: string;
        if (size === 0 && padding === 0) {
          out = emit(layer.kind === 'avg_pool' ? 'GlobalAveragePool' : 'GlobalMaxPool', label, [cur.name]);
        } else {
          // count_include_pad stays 0: dlib averages only the in-bounds part of a window.
          out = emit(layer.kind === 'avg_pool' ? 'AveragePool' : 'MaxPool', label, [cur.name], {
            kernel_shape: [kh, kw],
            strides: [stride, stride],
            pads: [padding, padding, padding, padding],
          });
        }
        cur = { name: out, c: cur.c, h: outH, w: outW };
        break;
      }
      case 'tag':
        tags.set(layer.id, cur);
        break;
      case 'skip': {
        const tagged = tags.get(layer.id);
        if (!tagged) fail(label, `skip to tag${layer.id}, which no layer below sets`);
        cur = tagged!;
        break;
      }
      case 'add_prev': {
        const other = tags.get(layer.tag);
        if (!other) fail(label, `add_prev to tag${layer.tag}, which no layer below sets`);
        // tt::add(dest, src1, src2): dest takes the larger size in each dimension and each
        // source contributes where it has elements (index 0 aligned): zero-pad at the end.
        const c = Math.max(cur.c, other!.c);
        const h = Math.max(cur.h, other!.h);
        const w = Math.max(cur.w, other!.w);
        const padded = (v: Value, which: string): string => {
          if (v.c === c && v.h === h && v.w === w) return v.name;
          const pads = int64Tensor(`${name}/pads_${which}`, [8], [0, 0, 0, 0, 0, c - v.c, h - v.h, w - v.w]);
          initializers.push(pads);
          return emit('Pad', `${label} pad_${which}`, [v.name, pads.name], { mode: 'constant' });
        };
        cur = { name: emit('Add', label, [padded(cur, 'input'), padded(other!, 'tagged')]), c, h, w };
        break;
      }
      case 'fc_no_bias': {
        if (i !== layers.length - 1) fail(label, 'fc is not the last layer');
        if (layer.inputs !== cur.c * cur.h * cur.w) fail(label, `${layer.inputs} inputs on a [${cur.c}, ${cur.h}, ${cur.w}] tensor`);
        // dlib flattens [k, nr, nc] row-major, as Flatten does NCHW.
        const flat = emit('Flatten', `${label} flatten`, [cur.name], { axis: 1 });
        const out = emit('MatMul', label, [flat, constant(`${name}/W`, [layer.inputs, layer.outputs], layer.weights)], undefined, options.outputName);
        output = { name: out, c: layer.outputs, h: 1, w: 1 };
        break;
      }
    }
  }
  if (!output) throw new DlibFormatError("not dlib's face-recognition ResNet v1: no fc layer at the top");

  const inputs: OnnxValueInfo[] = [{ name: options.inputName, elemType: DataType.FLOAT, dims: [options.batchDim, 3, net.inputSize.height, net.inputSize.width] }];
  const outputs: OnnxValueInfo[] = [{ name: options.outputName, elemType: DataType.FLOAT, dims: [options.batchDim, output.c] }];
  const model: OnnxModel = {
    graph: { name: options.graphName, nodes, initializers, inputs, outputs },
    producerName: 'face-service-dlib-dnn-converter',
    producerVersion: String(DLIB_DNN_VERSION),
    metadata: options.metadata,
  };
  const ops: Record<string, number> = {};
  for (const n of nodes) ops[n.opType] = (ops[n.opType] ?? 0) + 1;
  let params = 0;
  for (const t of initializers) if (t.dataType === DataType.FLOAT) params += t.dims.reduce((a, b) => a * b, 1);
  return { model, bytes: encodeModel(model), inputs, outputs, ops, params, net: { mean: net.mean, inputSize: net.inputSize, loss: net.loss } };
}
