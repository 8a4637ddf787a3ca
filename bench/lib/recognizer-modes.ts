/**
 * Recogniser modes for the benchmarks (`bench/engine/accuracy.ts --modes`): what the engine's
 * `recognizer` option takes, resolved the way the engine resolves it, and what a face costs
 * to store under each.
 *
 * A mode is a spec, `id[:mirror]` parts joined by `+` (`sface`, `sface:mirror`,
 * `sface:mirror+dlib-resnet`), or a name the manifest's `recognizerModes` gives such a spec
 * (`accurate`). The engine reports the spec written out in full (`engine.info().recognizer`),
 * which is also the key of CALIBRATIONS in src/services/calibration.ts.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { resolveRecognizerSpec, type Manifest } from '../../models/prepare.js';

export interface RecognizerMode {
  /** As asked for (`accurate`). */
  mode: string;
  /** The spec in full (`sface:mirror+dlib-resnet`). */
  spec: string;
  /** The manifest model ids of the spec, in order (`sface`, `dlib-resnet`). */
  models: string[];
  /** Why the engine cannot open it here: a model missing from the manifest, or its ONNX file not converted. */
  unavailable?: string;
}

function readManifest(modelDir: string): Manifest {
  return JSON.parse(readFileSync(path.join(modelDir, 'manifest.json'), 'utf8')) as Manifest;
}

/** Resolves a mode through models/manifest.json's `recognizerModes`, and says whether its models are there. */
export function resolveRecognizerMode(modelDir: string, mode: string): RecognizerMode {
  const manifest = readManifest(modelDir);
  const { spec, models } = resolveRecognizerSpec(manifest, mode);
  const problems: string[] = [];
  for (const id of models) {
    const m = manifest.models.find((x) => x.id === id);
    if (!m) problems.push(`${id} is not a model in ${modelDir}/manifest.json${spec === mode && !mode.includes('+') && !mode.includes(':') ? ' nor a name in its recognizerModes' : ''}`);
    else if (!existsSync(path.join(modelDir, m.onnx))) problems.push(`${path.join(modelDir, m.onnx)} is missing${m.optional ? ' (an optional model: npm run models -- --all)' : ''}`);
  }
  return { mode, spec, models, ...(problems.length ? { unavailable: problems.join('; ') } : {}) };
}

/** Bytes of one stored face in PostgreSQL: the float32 embedding column. */
export function databaseBytesPerFace(dim: number): number {
  return dim * 4;
}

/**
 * Bytes of one face in the scan index: 4-bit product codes of dim/4 sub-spaces (dim/8 bytes),
 * the f16 vector the re-rank reads (dim * 2), and the 8-byte id.
 */
export function scanIndexBytesPerFace(dim: number): number {
  return dim / 8 + dim * 2 + 8;
}

/** A spec as part of a cache file name: `sface:mirror+dlib-resnet` → `sface~mirror+dlib-resnet`. */
export function specFileName(spec: string): string {
  return spec.replace(/:/g, '~').replace(/[^A-Za-z0-9+~._-]/g, '_');
}
