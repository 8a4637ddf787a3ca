/**
 * The engine's settings, each declared once: environment variable, config key
 * (which is also the addon's `EngineOptions` field name), type and range,
 * default, and a one-line doc.
 *
 * config/index.ts reads them from the environment with this table,
 * native/engine.ts hands them to the addon under the same names, and the
 * engine table of docs/configuration.md is generated from it. engine-options.test.ts fails
 * when the addon's `EngineOptions` (build/addon/index.d.cts), the engine's own
 * defaults (the addon's `engineDefaults`) or that table disagree with it.
 * Adding a setting: an entry here and a field of `EngineOptions` in
 * crates/addon/src/lib.rs and crates/engine's options; then regenerate the
 * table as the test says.
 *
 * The ranges are the service's, checked at start-up with the variable named.
 * The engine checks its own (`EngineOptions::validate` in crates/engine); the
 * addon passes values through unchecked.
 */
import path from 'node:path';
import { bytes, choice, flag, integer, names, number, set, settingEntries, text, unset, type Setting, type SettingValues } from './declare.js';

const MiB = 1024 * 1024;

// As the engine's own default (`default_inference_workers` in crates/engine, where the measurement is).
const workersFor = (cores: number) => Math.max(1, Math.min(8, cores));

/** Keyed by config key, which is also the addon's `EngineOptions` field name. In the table's order. */
export const ENGINE_OPTIONS = {
  modelDir: set({
    env: 'FACE_MODEL_DIR',
    kind: text('path', '/elsewhere/x'),
    default: ({ root }) => path.join(root, 'models'),
    shown: '`./models`',
    doc: 'manifest and converted models',
  }),
  ortLibrary: set({
    env: 'ORT_LIBRARY',
    kind: text('path', '/elsewhere/x'),
    default: ({ root }) => path.join(root, 'node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1'),
    shown: "onnxruntime-node's `libonnxruntime.so.1`",
    doc: 'ONNX Runtime shared library (point it at a GPU build on GPU hosts)',
  }),
  providers: set({
    env: 'FACE_PROVIDERS',
    kind: names(),
    default: () => ['cpu'],
    shown: '`cpu`',
    doc: 'execution providers in priority order, e.g. `tensorrt,cuda,cpu`; unavailable ones are skipped with a log line',
  }),
  tensorrtCache: set({
    env: 'FACE_TRT_CACHE_DIR',
    kind: text('path', '/elsewhere/x'),
    default: ({ dataDir }) => path.join(dataDir, 'trt-cache'),
    shown: '`$FACE_DATA_DIR/trt-cache`',
    doc: 'where TensorRT keeps the engines (and timing data) it builds, so a restart loads them instead of rebuilding each model',
  }),
  trtFp16: set({
    env: 'FACE_TRT_FP16',
    kind: flag(),
    default: true,
    doc: 'let TensorRT use half-precision kernels where it finds them faster (tensor-core GPUs); `false` keeps every model in fp32',
  }),
  fixedShapes: set({
    env: 'FACE_FIXED_SHAPES',
    kind: choice('auto', 'on', 'off'),
    default: 'auto',
    shown: '`auto`',
    doc: 'pad model inputs to fixed shapes (9 detector sizes; batches of 1, 4, 16, 64 up to `FACE_MAX_BATCH`) and run each once before the engine is ready, so TensorRT and cuDNN prepare for all of them at start-up instead of per new photo or batch size; `auto` is on exactly when `tensorrt` or `cuda` is a provider (on the CPU padding only costs time)',
  }),
  inferenceWorkers: set({
    env: 'FACE_INFERENCE_WORKERS',
    kind: integer(1),
    default: ({ cores }) => workersFor(cores),
    shown: 'cores (at most 8)',
    doc: 'threads per model stage owning ONNX sessions (on 2 cores, 2 workers × 1 thread gave 1.2× the photos/s of 1 × 2)',
  }),
  intraThreads: set({
    env: 'FACE_INTRA_THREADS',
    kind: integer(1),
    default: ({ cores }) => Math.max(1, Math.floor(cores / workersFor(cores))),
    shown: 'cores/workers',
    doc: 'ONNX Runtime threads per session',
  }),
  maxBatch: set({ env: 'FACE_MAX_BATCH', kind: integer(1), default: 32, doc: 'recogniser batch cap' }),
  batchWaitUs: set({ env: 'FACE_BATCH_WAIT_US', kind: integer(0), default: 2000, doc: 'how long a partial batch waits for more faces, in microseconds' }),
  queueCapacity: set({ env: 'FACE_QUEUE_CAPACITY', kind: integer(1), default: 256, doc: 'engine queue; full means 503' }),
  maxPixels: set({ env: 'FACE_MAX_PIXELS', kind: integer(1), default: 64_000_000, doc: 'largest image accepted (width × height)' }),
  minFace: set({
    env: 'FACE_MIN_FACE',
    kind: integer(16),
    default: 40,
    doc: "smallest face side searched, in pixels; sets the detector's working resolution",
  }),
  detectThreshold: unset({
    env: 'FACE_DETECT_THRESHOLD',
    kind: number(0.05, 0.99),
    shown: "the detector's (YuNet 0.80, BlazeFace 0.7)",
    doc: 'detector score threshold',
  }),
  recognizer: unset({
    env: 'FACE_RECOGNIZER',
    kind: text('recogniser spec', 'sface'),
    shown: 'the recorded one, else by provider and processor',
    doc: 'recogniser mode: `sface`, `sface:mirror` (the crop and its mirror image), `accurate` (`sface:mirror+dlib-resnet`, two models concatenated), or any `id[:mirror]` parts joined by `+`; a change re-embeds stored faces. Unset: the one the deployment recorded, else `accurate` with a GPU provider or an AVX-512 processor and `sface:mirror` without (logged at start as `recogniser chosen`)',
  }),
  detector: unset({
    env: 'FACE_DETECTOR',
    kind: text('model id', 'blazeface-back'),
    shown: 'manifest default (`yunet`)',
    doc: 'detector model id (`blazeface-back` is the previous one)',
  }),
  maxDecodeBytes: set({
    env: 'FACE_MAX_DECODE_BYTES',
    kind: bytes(1),
    default: 512 * MiB,
    shown: '512 MiB',
    doc: 'most memory decoding one image may need, estimated from its header; more is 413 `IMAGE_TOO_LARGE`',
  }),
  maxAspectRatio: set({
    env: 'FACE_MAX_ASPECT_RATIO',
    kind: integer(1),
    default: 20,
    doc: 'longer over shorter side beyond which an image is refused (400 `IMAGE_ASPECT_RATIO`) before decoding',
  }),
  heavyQueueMs: set({
    env: 'FACE_HEAVY_QUEUE_MS',
    kind: integer(0),
    default: 10_000,
    doc: 'longest estimated wait (ms) for a large photo (above 500 ms of a core) behind the large photos ahead of it; beyond it 503 `OVERLOADED`',
  }),
  pipelineThreads: set({
    env: 'FACE_PIPELINE_THREADS',
    kind: integer(0),
    default: 0,
    shown: '0 (one per core)',
    doc: "threads decoding photos, running the detector's passes and cropping faces; each holds one photo's faces while they are embedded, so a GPU host may want more than its cores for batches to fill",
  }),
  heavyThreads: set({
    env: 'FACE_HEAVY_THREADS',
    kind: integer(0),
    default: 0,
    shown: '0 (half the pipeline threads, at least 1)',
    doc: 'pipeline threads that may work on huge photos at once; the rest serve small photos first',
  }),
};

/**
 * `EngineOptions` fields that no setting feeds: callers set them per engine
 * (bench/engine/attributes.ts compares age and gender models).
 */
export const NAPI_ONLY_FIELDS = ['ageModel', 'genderModel'] as const;
export type NapiOnlyField = (typeof NAPI_ONLY_FIELDS)[number];

export type EngineOptionKey = keyof typeof ENGINE_OPTIONS;

/** The engine's part of `Config`: a value for every setting but those left unset. */
export type EngineConfig = SettingValues<typeof ENGINE_OPTIONS>;

/** The settings as [config key, declaration] pairs, in declaration order. */
export const engineOptionEntries = () => settingEntries(ENGINE_OPTIONS).map(([[key], s]) => [key, s]) as [EngineOptionKey, Setting<unknown>][];

/** Only the engine's settings out of a whole config, unset ones left out. */
export function pickEngineConfig(config: EngineConfig): EngineConfig {
  const out: Record<string, unknown> = {};
  for (const [key] of engineOptionEntries()) if (config[key] !== undefined) out[key] = config[key];
  return out as EngineConfig;
}
