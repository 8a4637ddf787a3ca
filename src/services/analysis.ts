/**
 * Photo → faces, the first steps of every photo path: loading a photo
 * parameter, running the engine on it, and choosing faces the way
 * `mf_selector` asks. Errors raised here already name the request parameter
 * they are about.
 */
import { DomainError, type ErrorCode } from '../errors.js';
import type { AnalyzeOptions, Analysis, Engine, FaceResult } from '../native/engine.js';
import type { PhotoInput, PhotoSource } from './photo-source.js';
import type { Calibration } from './calibration.js';

/** The engine as the photo paths take it; the routes hand it over and never call it. */
export type { Engine } from '../native/engine.js';

export type Box = [number, number, number, number];

export interface BoxObject {
  x1: number;
  y1: number;
  x2: number;
  y2: number;
}

export type MultiFaceSelector = 'reject' | 'biggest' | 'all';

/** Key order x1, y1, x2, y2 everywhere a box is returned: corner one, then corner two. */
export function boxOf(f: { x1: number; y1: number; x2: number; y2: number }): BoxObject {
  return { x1: f.x1, y1: f.y1, x2: f.x2, y2: f.y2 };
}

/**
 * A face's box as an answer shows it, flagged `aligned: false` where it is a caller's box in which
 * the detector found no face: that face was cropped upright, not aligned, and embeds less reliably.
 */
export function answeredBox(f: { x1: number; y1: number; x2: number; y2: number; aligned: boolean }): BoxObject & { aligned?: false } {
  return f.aligned ? boxOf(f) : { ...boxOf(f), aligned: false };
}

/** Engine failures that say nothing about the photo (the service's state, the request's fate): they name no parameter. */
const NOT_THE_PHOTO = new Set<ErrorCode>(['INTERNAL', 'SERVICE_UNAVAILABLE', 'OVERLOADED', 'SHARDS_UNAVAILABLE', 'DEADLINE_EXCEEDED', 'CLIENT_CLOSED']);

/**
 * What loading and analysing a photo parameter can raise, for routes that
 * take one to declare: a URL that cannot be fetched or is too big
 * (photo-source.ts), an image the engine cannot read or refuses, and a full
 * engine queue. A bad URL or box is BAD_PARAM, which the route registry
 * documents for every route.
 */
export const PHOTO_ERRORS = [
  'PHOTO_FETCH_FAILED',
  'PAYLOAD_TOO_LARGE',
  'IMAGE_CORRUPT',
  'IMAGE_TOO_LARGE',
  'IMAGE_ASPECT_RATIO',
  'IMAGE_UNSUPPORTED',
  'OVERLOADED',
] as const satisfies readonly ErrorCode[];

export interface PhotoRequest {
  photo: PhotoInput;
  /** Request parameter naming the photo, for error messages (`photo`, `photo1`). */
  param: string;
  /** Caller-given boxes replacing detection, and the parameter that carried them. */
  boxes?: Box[];
  boxesParam?: string;
}

export class PhotoAnalysis {
  /** `calibration`: the loaded recogniser's, what its similarities mean as confidences (calibrationOf). */
  constructor(
    private readonly engine: Engine,
    private readonly photos: PhotoSource,
    readonly calibration: Calibration,
  ) {}

  async analyze(req: PhotoRequest, opts: Omit<AnalyzeOptions, 'boxes' | 'signal'>, signal?: AbortSignal): Promise<Analysis> {
    return this.analyzeBytes(await this.load(req, signal), req, opts, signal);
  }

  /** The photo's bytes (uploaded, or fetched from its URL). */
  async load(req: PhotoRequest, signal?: AbortSignal): Promise<Buffer> {
    const bytes = await this.photos.load(req.photo, req.param, signal);
    signal?.throwIfAborted();
    return bytes;
  }

  /**
   * Runs the engine on bytes already loaded by `load` (for callers that keep the photo, e.g. to
   * store it). `signal` (client gone, deadline passed) takes the work out of the engine's queue.
   */
  async analyzeBytes(bytes: Buffer, req: PhotoRequest, opts: Omit<AnalyzeOptions, 'boxes' | 'signal'>, signal?: AbortSignal): Promise<Analysis> {
    try {
      return await this.engine.analyze(bytes, { ...opts, ...(req.boxes ? { boxes: req.boxes } : {}), ...(signal ? { signal } : {}) });
    } catch (err) {
      if (!(err instanceof DomainError) || NOT_THE_PHOTO.has(err.code)) throw err;
      // A bad box is the box parameter's fault; anything else about the image is the photo's.
      throw err.withParam(err.code === 'BAD_PARAM' && req.boxes && req.boxesParam ? req.boxesParam : req.param);
    }
  }

  similarity(a: Float32Array, b: Float32Array, dim: number): Promise<Float32Array> {
    return this.engine.similarity(a, b, dim);
  }
}

/**
 * Faces whose area is within this share of the largest one's are as good as the same size,
 * and `biggest` takes the one nearest the centre of the photo (subjectOf). bench:subject
 * measured it on LFW, whose news photos centre the person photographed.
 */
export const SUBJECT_AREA_MARGIN = 0.1;

/**
 * The face a photo is of, which `biggest` means: the biggest face, unless others come within
 * `margin` of its area; then, of those, the one nearest the centre. (Preferring the better
 * detection quality among them first was measured and missed the subject more often.)
 * Faces arrive biggest first.
 */
export function subjectOf(analysis: Pick<Analysis, 'faces' | 'width' | 'height'>, margin = SUBJECT_AREA_MARGIN): number {
  const { faces, width, height } = analysis;
  const area = (f: FaceResult) => (f.x2 - f.x1) * (f.y2 - f.y1);
  const offCentre = (f: FaceResult) => Math.hypot((f.x1 + f.x2) / 2 - width / 2, (f.y1 + f.y2) / 2 - height / 2);
  let best = 0;
  for (let i = 1; i < faces.length && area(faces[i]) >= (1 - margin) * area(faces[0]); i++) {
    if (offCentre(faces[i]) < offCentre(faces[best])) best = i;
  }
  return best;
}

/**
 * Indices of the faces to use under `selector`: `biggest` is the photo's subject (subjectOf).
 * Without caller boxes, no face at all is 422 NO_FACE and `reject` with several is 400
 * TOO_MANY_FACES listing them.
 */
export function selectFaces(analysis: Pick<Analysis, 'faces' | 'width' | 'height'>, selector: MultiFaceSelector, param: string, callerBoxes: boolean): number[] {
  const { faces } = analysis;
  if (callerBoxes) return faces.map((_, i) => i);
  if (faces.length === 0) {
    throw new DomainError('NO_FACE', `No face found on ${param}`, { param });
  }
  if (selector === 'reject' && faces.length > 1) {
    throw new DomainError('TOO_MANY_FACES', `Too many faces: ${faces.length}`, { param, details: { faces: faces.map(boxOf) } });
  }
  if (selector === 'biggest') return [subjectOf(analysis)];
  return faces.map((_, i) => i);
}

/**
 * Enrolment's quality gate: a detected face below `minQuality` (0 turns the
 * gate off) is 422 LOW_QUALITY naming its box and quality, since storing it
 * would seed false matches. Caller boxes are the caller's decision and pass.
 */
export function requireQuality(faces: FaceResult[], indices: number[], minQuality: number, param: string, callerBoxes: boolean): void {
  if (callerBoxes || minQuality <= 0) return;
  const poor = indices.filter((i) => faces[i].quality < minQuality);
  if (poor.length === 0) return;
  throw new DomainError('LOW_QUALITY', `Face quality below ${minQuality} on ${param}`, {
    param,
    details: { faces: poor.map((i) => ({ ...boxOf(faces[i]), quality: Math.round(faces[i].quality * 1e4) / 1e4 })) },
  });
}

/** The embedding rows of the chosen faces, packed. */
export function pickRows(analysis: Analysis, indices: number[]): Float32Array {
  const { dim, embeddings } = analysis;
  if (indices.length === analysis.faces.length) return embeddings;
  const out = new Float32Array(indices.length * dim);
  indices.forEach((row, k) => out.set(embeddings.subarray(row * dim, (row + 1) * dim), k * dim));
  return out;
}
