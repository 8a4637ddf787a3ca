/**
 * The only door to the native addon (build/addon/index.cjs, see
 * docs/engine-contract.md).
 *
 * Everything else in the service talks to the `Engine` interface below. The
 * shapes are the addon's generated types (build/addon/index.d.cts, written by
 * `napi build`); its error codes become DomainErrors here, once. Tests hand
 * `startServer` their own `Engine`; production code always loads the real
 * addon.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type * as Addon from '../../build/addon/index.cjs';
import { pickEngineConfig, type EngineConfig, type NapiOnlyField } from '../config/engine-options.js';
import { findProjectRoot, type Config } from '../config/index.js';
import { DomainError, unavailable, type ErrorCode } from '../errors.js';

export type { Analysis, EngineInfo, EngineOptions, EngineStats, FaceResult } from '../../build/addon/index.cjs';
type Analysis = Addon.Analysis;
type EngineInfo = Addon.EngineInfo;
type EngineOptions = Addon.EngineOptions;
type EngineStats = Addon.EngineStats;

export interface AnalyzeOptions extends Addon.AnalyzeOptions {
  /**
   * Withdraws the request (client gone, deadline passed): the promise rejects
   * at once and the engine drops the work from its queue, or stops it at its
   * next stage.
   */
  signal?: AbortSignal;
}

export interface Engine {
  analyze(image: Buffer, opts: AnalyzeOptions): Promise<Analysis>;
  /** Cosine similarity of every row of `a` against every row of `b`: a.rows × b.rows, row-major. */
  similarity(a: Float32Array, b: Float32Array, dim: number): Promise<Float32Array>;
  info(): EngineInfo;
  /** Queue depths now, and the model runs since the last call (each run is reported once). Throws once closed. */
  stats(): EngineStats;
  close(): void;
}

/** Codes the addon puts on rejections that the client caused or may retry; the rest are internal. */
const CLIENT_CODES = new Set<ErrorCode>(['IMAGE_UNSUPPORTED', 'IMAGE_CORRUPT', 'IMAGE_TOO_LARGE', 'IMAGE_ASPECT_RATIO', 'BAD_PARAM', 'OVERLOADED']);

/** The addon's messages are lower-case clauses ("image could not be decoded: …"); a reason is a sentence. */
const sentence = (message: string) => message.charAt(0).toUpperCase() + message.slice(1);

/**
 * Maps a rejection from the addon (engine or search index) to a DomainError.
 * Client-caused errors keep the addon's message, which names the problem once
 * (e.g. which box is bad); INDEX_UNAVAILABLE (a shard loading, failed or
 * behind) is a 503 to retry shortly; MODEL, INTERNAL and anything unexpected
 * become INTERNAL with the original as the cause, which the error handler logs.
 */
export function mapEngineError(err: unknown): DomainError {
  if (err instanceof DomainError) return err;
  const code = (err as { code?: unknown } | null)?.code;
  if (code === 'INDEX_UNAVAILABLE') return unavailable('Search index unavailable', 1, err);
  if (typeof code === 'string' && CLIENT_CODES.has(code as ErrorCode)) {
    const message = err instanceof Error && err.message ? sentence(err.message) : code;
    return new DomainError(code as ErrorCode, message, { cause: err, ...(code === 'OVERLOADED' ? { retryAfterS: 1 } : {}) });
  }
  return new DomainError('INTERNAL', 'Internal server error', { cause: err });
}

/** Why a request was withdrawn, as the error its caller gets: the abort reason when it is one of ours. */
export function abortError(signal: AbortSignal): DomainError {
  const reason: unknown = signal.reason;
  if (reason instanceof DomainError) return reason;
  if (reason instanceof Error && reason.name === 'TimeoutError') {
    return new DomainError('SERVICE_UNAVAILABLE', 'The photo could not be analysed before the request deadline', { retryAfterS: 1, cause: reason });
  }
  return new DomainError('CLIENT_CLOSED', 'The request was withdrawn before the photo was analysed', { cause: reason });
}

/** Resolves build/addon/index.cjs from the project root, so src/ and dist/src/ find the same file. */
export function addonPath(root: string = findProjectRoot()): string {
  return path.join(root, 'build', 'addon', 'index.cjs');
}

/**
 * Points this process's temporary folder (TMPDIR, which os.tmpdir(), the addon and child
 * processes read) at `<dataDir>/tmp`, made if missing; call it before the addon loads. ONNX
 * Runtime writes an empty mat-debug-<pid>.log and a .ses file into TMPDIR whenever a process
 * opens it and never removes them: kept in the data folder, nothing the service runs leaves
 * files outside it. Returns the folder.
 */
export function keepTemporaryFilesIn(dataDir: string): string {
  const dir = path.resolve(dataDir, 'tmp');
  mkdirSync(dir, { recursive: true });
  process.env.TMPDIR = dir;
  return dir;
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

  constructor(
    private readonly binding: typeof Addon,
    private readonly native: Addon.FaceEngine,
  ) {}

  async analyze(image: Buffer, opts: AnalyzeOptions): Promise<Analysis> {
    this.assertOpen();
    const { signal } = opts;
    if (signal?.aborted) throw abortError(signal);
    const cancel = new this.binding.CancelToken();
    const onAbort = () => cancel.cancel();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await this.native.analyze(
        image,
        {
          embed: opts.embed,
          age: opts.age,
          gender: opts.gender,
          emotions: opts.emotions,
          ...(opts.boxes ? { boxes: opts.boxes } : {}),
          ...(opts.thumbnail !== undefined ? { thumbnail: opts.thumbnail } : {}),
        },
        cancel,
      );
    } catch (err) {
      if (signal?.aborted) throw abortError(signal);
      throw mapEngineError(err);
    } finally {
      signal?.removeEventListener('abort', onAbort);
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

  stats(): EngineStats {
    this.assertOpen();
    return this.native.stats();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.native.close();
  }

  private assertOpen(): void {
    if (this.closed) throw new DomainError('SERVICE_UNAVAILABLE', 'Engine is shut down', { retryAfterS: 1 });
  }
}

/**
 * The settings of config/engine-options.ts are the addon's fields under the same names, but
 * for the ones callers set themselves: checked here at compile time, and against the built
 * index.d.cts and docs/configuration.md by config/engine-options.test.ts.
 */
type Assert<T extends true> = T;
type SameKeys<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type _SettingsAreFields = Assert<SameKeys<keyof EngineConfig, Exclude<keyof EngineOptions, NapiOnlyField>>>;
type _SettingsFitFields = Assert<EngineConfig extends Omit<EngineOptions, NapiOnlyField> ? true : false>;

/** Engine options as the service configures them; callers may override single fields (benchmarks, calibration). */
export function engineOptionsFrom(config: Config, overrides: Partial<EngineOptions> = {}): EngineOptions {
  return { ...pickEngineConfig(config), ...overrides };
}

/** The warm-up model by model, in the order of `info.models`: its shapes and what they took together; models that ran none are left out. */
export function warmupByModel(info: EngineInfo): { model: string; shapes: number; ms: number }[] {
  return info.models.flatMap(({ id }) => {
    const runs = info.warmup.filter((w) => w.model === id);
    return runs.length ? [{ model: id, shapes: runs.length, ms: runs.reduce((n, w) => n + w.ms, 0) }] : [];
  });
}

/** Loads the addon and opens the engine: models are loaded and sessions built before this resolves. */
export async function openEngine(opts: EngineOptions, file: string = addonPath()): Promise<Engine> {
  const binding = loadAddon<typeof Addon>(file);
  const native = await binding.FaceEngine.open(opts);
  return new NativeEngineWrapper(binding, native);
}
