/**
 * The only door to the native addon (build/addon/index.cjs, see
 * docs/engine-contract.md).
 *
 * Everything else in the service talks to the `Engine` interface below, which
 * keeps the addon's shapes in one place and turns its error codes into HTTP
 * errors once. Tests hand `startServer` their own `Engine`; production code
 * always loads the real addon.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { findProjectRoot, type Config } from '../config.js';
import { HttpError, INTERNAL_REASON } from '../http/errors.js';

export interface EngineOptions {
  modelDir: string;
  ortLibrary: string;
  providers: string[];
  intraThreads: number;
  inferenceWorkers: number;
  maxBatch: number;
  batchWaitUs: number;
  queueCapacity: number;
  maxPixels: number;
  recognizer?: string;
  detector?: string;
  /** Manifest id of the age model; unset: the manifest's `age`, else `ageGender`, else the recogniser's head. */
  ageModel?: string;
  /** Manifest id of the gender model; unset: the manifest's `gender`, else `ageGender`, else the recogniser's head. */
  genderModel?: string;
  detectThreshold?: number;
  /** Smallest face side in pixels the detector searches for. */
  minFace?: number;
}

export interface AnalyzeOptions {
  embed: boolean;
  age: boolean;
  gender: boolean;
  emotions: boolean;
  /** Caller-given [x1,y1,x2,y2] boxes: one face per box, in order, instead of detection. */
  boxes?: number[][];
  /** Also return a JPEG crop of each face (box plus margin), its longer side at most this many pixels. */
  thumbnail?: number;
}

export interface FaceResult {
  x1: number;
  y1: number;
  x2: number;
  y2: number;
  score: number;
  /** 0..1: detector score × size factor × frontality (0 without landmarks). */
  quality: number;
  /** Flat [x, y, …] keypoints in the detector's order (YuNet: right eye, left eye, nose tip, right and left mouth corner). */
  landmarks: number[];
  age?: number;
  gender?: 'male' | 'female';
  emotions?: string[];
  /** JPEG bytes, when a thumbnail was asked for. */
  thumbnail?: Buffer;
}

export interface Analysis {
  width: number;
  height: number;
  /** Biggest first; with caller boxes, in the given order. */
  faces: FaceResult[];
  /** faces.length × dim, row-major, L2-normalised; empty unless embed was asked for. */
  embeddings: Float32Array;
  dim: number;
}

export interface EngineInfo {
  providers: string[];
  simd: string;
  recognizer: string;
  detector: string;
  dim: number;
  models: { id: string; onnx: string }[];
}

export interface Engine {
  analyze(image: Buffer, opts: AnalyzeOptions): Promise<Analysis>;
  /** Cosine similarity of every row of `a` against every row of `b`: a.rows × b.rows, row-major. */
  similarity(a: Float32Array, b: Float32Array, dim: number): Promise<Float32Array>;
  info(): EngineInfo;
  close(): void;
}

interface NativeEngine {
  analyze(image: Buffer, opts: AnalyzeOptions): Promise<Analysis>;
  similarity(a: Float32Array, b: Float32Array, dim: number): Promise<Float32Array>;
  info(): EngineInfo;
  close(): void;
}

interface NativeBinding {
  FaceEngine: { open(opts: EngineOptions): Promise<NativeEngine> };
}

/** Error codes the addon puts on its rejections, with how each reaches the client. */
const NATIVE_ERRORS: Record<string, { status: number; error: string; reason: string }> = {
  IMAGE_UNSUPPORTED: { status: 415, error: 'IMAGE_UNSUPPORTED', reason: 'Image format not supported; send JPEG, PNG or WebP' },
  IMAGE_CORRUPT: { status: 400, error: 'IMAGE_CORRUPT', reason: 'Image could not be decoded' },
  IMAGE_TOO_LARGE: { status: 413, error: 'IMAGE_TOO_LARGE', reason: 'Image has too many pixels' },
  BAD_PARAM: { status: 400, error: 'BAD_PARAM', reason: 'Invalid parameter' },
  OVERLOADED: { status: 503, error: 'SERVICE_UNAVAILABLE', reason: 'Inference queue is full, retry shortly' },
};

/**
 * Maps a rejection from the addon to an HttpError. Client-caused errors keep
 * the addon's message (it names the problem, e.g. which box is bad); MODEL,
 * INTERNAL and anything unexpected become a generic 500 with the original as
 * the cause, which the error handler logs.
 */
export function mapEngineError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  const code = (err as { code?: unknown } | null)?.code;
  const known = typeof code === 'string' ? NATIVE_ERRORS[code] : undefined;
  if (!known) return new HttpError(500, 'INTERNAL', INTERNAL_REASON, { cause: err });
  const message = (err as Error).message;
  const reason = message && message !== code ? `${known.reason}: ${message}` : known.reason;
  const headers = known.status === 503 ? { 'Retry-After': '1' } : undefined;
  return new HttpError(known.status, known.error, reason, { headers, cause: err });
}

/** Resolves build/addon/index.cjs from the project root, so src/ and dist/src/ find the same file. */
export function addonPath(root: string = findProjectRoot()): string {
  return path.join(root, 'build', 'addon', 'index.cjs');
}

/**
 * Loads the addon. Each wrapper in src/native/ names the part of the binding
 * it uses as `T`; the module is loaded once per process whoever asks first.
 */
export function loadAddon<T>(file: string = addonPath()): T {
  if (!existsSync(file)) {
    throw new Error(`native addon not built: ${file} is missing (run npm run build:addon)`);
  }
  const require = createRequire(import.meta.url);
  return require(file) as T;
}

class NativeEngineWrapper implements Engine {
  private closed = false;

  constructor(private readonly native: NativeEngine) {}

  async analyze(image: Buffer, opts: AnalyzeOptions): Promise<Analysis> {
    this.assertOpen();
    try {
      return await this.native.analyze(image, {
        embed: opts.embed,
        age: opts.age,
        gender: opts.gender,
        emotions: opts.emotions,
        ...(opts.boxes ? { boxes: opts.boxes } : {}),
        ...(opts.thumbnail !== undefined ? { thumbnail: opts.thumbnail } : {}),
      });
    } catch (err) {
      throw mapEngineError(err);
    }
  }

  async similarity(a: Float32Array, b: Float32Array, dim: number): Promise<Float32Array> {
    this.assertOpen();
    if (a.length === 0 || b.length === 0) return new Float32Array(0);
    try {
      return await this.native.similarity(a, b, dim);
    } catch (err) {
      throw mapEngineError(err);
    }
  }

  info(): EngineInfo {
    return this.native.info();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.native.close();
  }

  private assertOpen(): void {
    if (this.closed) throw new HttpError(503, 'SERVICE_UNAVAILABLE', 'Engine is shut down', { headers: { 'Retry-After': '1' } });
  }
}

/** Engine options as the service configures them; callers may override single fields (benchmarks, calibration). */
export function engineOptionsFrom(config: Config, overrides: Partial<EngineOptions> = {}): EngineOptions {
  return {
    modelDir: config.modelDir,
    ortLibrary: config.ortLibrary,
    providers: config.providers,
    intraThreads: config.intraThreads,
    inferenceWorkers: config.inferenceWorkers,
    maxBatch: config.maxBatch,
    batchWaitUs: config.batchWaitUs,
    queueCapacity: config.queueCapacity,
    maxPixels: config.maxPixels,
    minFace: config.minFace,
    ...(config.recognizer ? { recognizer: config.recognizer } : {}),
    ...(config.detector ? { detector: config.detector } : {}),
    ...(config.detectThreshold !== undefined ? { detectThreshold: config.detectThreshold } : {}),
    ...overrides,
  };
}

/** Loads the addon and opens the engine: models are loaded and sessions built before this resolves. */
export async function openEngine(opts: EngineOptions, file: string = addonPath()): Promise<Engine> {
  const binding = loadAddon<NativeBinding>(file);
  const native = await binding.FaceEngine.open(opts);
  return new NativeEngineWrapper(native);
}
