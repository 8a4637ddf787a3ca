// Converts every model listed in models/manifest.json from its pinned TF.js graph to
// ONNX under models/onnx/. Run by `npm run models`; safe to re-run.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadTfjsGraph } from './convert/tfjs-graph.js';
import { CONVERTER_VERSION, convertGraph } from './convert/to-onnx.js';

export interface ManifestModel {
  id: string;
  role: string;
  source: {
    package: string;
    version: string;
    license: string;
    graph: string;
    graphSha256: string;
    weights: { path: string; sha256: string }[];
  };
  onnx: string;
  input: {
    name: string;
    height: number;
    width: number;
    channels: number;
    layout: 'NHWC';
    color: 'rgb' | 'gray';
    /** Model input value = pixel * scale + offset. */
    scale: number;
    offset: number;
    dynamicBatch: boolean;
  };
  outputs: Record<string, string>;
}

export interface Manifest {
  version: number;
  models: ManifestModel[];
}

export function findProjectRoot(from: string): string {
  let dir = resolve(from);
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`no package.json above ${from}`);
    dir = parent;
  }
}

export function readManifest(root: string): Manifest {
  return JSON.parse(readFileSync(join(root, 'models', 'manifest.json'), 'utf8')) as Manifest;
}

export function sourceDir(root: string, model: ManifestModel): string {
  return join(root, 'node_modules', model.source.package);
}

function sha256(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

/** Fails unless the installed source files are byte-identical to the pinned ones. */
export function verifySources(root: string, model: ManifestModel): void {
  const pkgDir = sourceDir(root, model);
  const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')) as { version: string };
  if (pkg.version !== model.source.version) {
    throw new Error(`${model.id}: ${model.source.package} is ${pkg.version}, manifest pins ${model.source.version}`);
  }
  const files = [{ path: model.source.graph, sha256: model.source.graphSha256 }, ...model.source.weights];
  for (const f of files) {
    const actual = sha256(join(pkgDir, f.path));
    if (actual !== f.sha256) throw new Error(`${model.id}: sha256 of ${f.path} is ${actual}, manifest expects ${f.sha256}`);
  }
}

/** Converts one manifest model in memory. */
export function convertManifestModel(root: string, model: ManifestModel) {
  const graph = loadTfjsGraph(join(sourceDir(root, model), model.source.graph));
  const result = convertGraph(graph, {
    graphName: model.id,
    dynamicBatch: model.input.dynamicBatch,
    outputs: Object.values(model.outputs),
    metadata: {
      source: `${model.source.package}@${model.source.version}/${model.source.graph}`,
      license: model.source.license,
      converter_version: String(CONVERTER_VERSION),
    },
  });
  const input = result.inputs[0];
  const expected = [model.input.height, model.input.width, model.input.channels];
  if (result.inputs.length !== 1 || input.name !== model.input.name || input.dims.slice(1).join() !== expected.join()) {
    throw new Error(`${model.id}: converted input ${JSON.stringify(result.inputs)} does not match the manifest`);
  }
  return result;
}

/** What a cached conversion was made from; any change forces a rebuild. */
function stamp(model: ManifestModel): string {
  const lines = [`converter ${CONVERTER_VERSION}`, `graph ${model.source.graphSha256}`];
  for (const w of model.source.weights) lines.push(`weights ${w.sha256}`);
  lines.push(`dynamicBatch ${model.input.dynamicBatch}`, `outputs ${Object.values(model.outputs).join(',')}`);
  return `${lines.join('\n')}\n`;
}

function writeAtomic(path: string, data: Uint8Array | string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    writeFileSync(tmp, data);
    renameSync(tmp, path);
  } finally {
    rmSync(tmp, { force: true });
  }
}

function prepare(root: string): void {
  const manifest = readManifest(root);
  if (manifest.version !== 1) throw new Error(`unsupported manifest version ${manifest.version}`);
  const modelsDir = join(root, 'models');
  mkdirSync(join(modelsDir, 'onnx'), { recursive: true });
  for (const model of manifest.models) {
    const started = performance.now();
    verifySources(root, model);
    const out = join(modelsDir, model.onnx);
    const sidecar = `${out}.sha256`;
    const want = stamp(model);
    if (existsSync(out) && existsSync(sidecar) && readFileSync(sidecar, 'utf8') === want) {
      console.log(JSON.stringify({ id: model.id, cached: true, ms: Math.round(performance.now() - started) }));
      continue;
    }
    const result = convertManifestModel(root, model);
    writeAtomic(out, result.bytes);
    writeAtomic(sidecar, want);
    const ops = Object.values(result.ops).reduce((a, b) => a + b, 0);
    console.log(
      JSON.stringify({ id: model.id, ops, params: result.params, bytes: result.bytes.byteLength, ms: Math.round(performance.now() - started) }),
    );
  }
}

const invokedDirectly = process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  try {
    prepare(findProjectRoot(dirname(fileURLToPath(import.meta.url))));
  } catch (err) {
    console.error(`models: ${(err as Error).message}`);
    process.exit(1);
  }
}
