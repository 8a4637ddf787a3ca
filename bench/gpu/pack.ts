/**
 * `npm run gpu:pack`: everything one GPU run needs, for a GPU host that reaches no registry
 * and has no Node, in parts small enough to carry one per transfer (docs/engine.md, "Running on
 * a GPU test host"):
 *
 * - the engine's GPU bench (crates/gpu-bench), a release binary, stripped;
 * - ONNX Runtime's GPU build: the shared libraries of the onnxruntime-gpu wheel pinned by
 *   sha256 in container/gpu-requirements.txt (its CUDA, TensorRT and shared providers);
 * - the models the bench's modes load, float32, and the same stored in float16
 *   (bench/engine/fp16-models.py): the CUDA provider has no fp16 switch of its own;
 * - the demo photos and the labelled dev set (../shared/testdata/faces, when present);
 * - plan.json (the service's engine settings for a 16-core GPU host, the calibration's
 *   `medium` cosines) and run.sh, which finds the CUDA 13 libraries on the host.
 *
 * The pack is one xz-compressed tar, split into parts of at most --part-mib MiB, with
 * SHA256SUMS (each part and the whole) and NEEDS (the libraries the host must have), in
 * .gpu-pack/parts. bench/gpu/receive.sh takes them on the host.
 *
 *   npm run gpu:pack -- [--part-mib 58] [--testdata DIR]
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, createReadStream, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import { pickEngineConfig } from '../../src/config/engine-options.js';
import { defaultModelIds, readManifest, resolveRecognizerSpec } from '../../models/prepare.js';
import { optionArg } from '../lib/args.js';
import { buildGpuBench, GPU_BENCH_MODES, gpuPlan } from '../../test/harness/gpu-plan.js';

const PACK = 'face-gpu-pack';
/** Cores of the GPU host the plan's settings are computed for. */
const HOST_CORES = 16;
/**
 * Inference workers on the GPU host. The service's default, one per core up to 8, builds that
 * many sessions per model on one GPU and warms each at every shape; two overlap one worker's
 * host-side work with the other's GPU run, and keep the warm-up inside the host's time.
 */
const HOST_WORKERS = 2;
/** The wheel's members the run needs; its Python bindings are left out. */
const ORT_LIBRARIES = ['libonnxruntime.so.1.31.1', 'libonnxruntime_providers_shared.so', 'libonnxruntime_providers_cuda.so', 'libonnxruntime_providers_tensorrt.so'];
/** Libraries every Linux host has: not listed in NEEDS. */
const SYSTEM = /^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux-x86-64)\.so/;

const sh = (cmd: string, args: string[], cwd?: string) => execFileSync(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'inherit'] }).toString();

async function sha256(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** The onnxruntime-gpu wheel pinned in container/gpu-requirements.txt, downloaded once into `cache`. */
async function ortWheel(root: string, cache: string): Promise<string> {
  const pin = readFileSync(path.join(root, 'container/gpu-requirements.txt'), 'utf8')
    .split('\n')
    .find((l) => l.startsWith('onnxruntime-gpu=='));
  const m = pin?.match(/^onnxruntime-gpu==(\S+) --hash=sha256:([0-9a-f]{64})/);
  if (!m) throw new Error('container/gpu-requirements.txt pins no onnxruntime-gpu wheel');
  const [, version, hash] = m;
  mkdirSync(cache, { recursive: true });
  const find = () => readdirSync(cache).find((f) => f.startsWith(`onnxruntime_gpu-${version}-`) && f.endsWith('.whl'));
  if (!find()) {
    const req = path.join(cache, 'requirements.txt');
    writeFileSync(req, `${pin}\n`);
    // The wheel's shared libraries are the same for every CPython; the pin is the cp311 one.
    sh('python3', ['-m', 'pip', 'download', '--quiet', '--no-deps', '--only-binary=:all:', '--require-hashes', '--python-version', '3.11', '--platform', 'manylinux_2_28_x86_64', '-d', cache, '-r', req]);
  }
  const wheel = path.join(cache, find()!);
  const got = await sha256(wheel);
  if (got !== hash) throw new Error(`${wheel}: sha256 ${got}, pinned ${hash}`);
  return wheel;
}

function extractMembers(wheel: string, members: string[], dest: string): void {
  const script = 'import sys, zipfile, shutil, os\nz = zipfile.ZipFile(sys.argv[1])\nfor m in sys.argv[3:]:\n    with z.open("onnxruntime/capi/" + m) as src, open(os.path.join(sys.argv[2], m), "wb") as dst:\n        shutil.copyfileobj(src, dst)';
  sh('python3', ['-c', script, wheel, dest, ...members]);
}

/** Shared libraries `files` need that neither the pack nor every Linux host has. */
function neededLibraries(files: string[], packed: string[]): string[] {
  const needs = new Set<string>();
  for (const f of files) {
    for (const line of sh('readelf', ['-d', f]).split('\n')) {
      const m = line.match(/\(NEEDED\)\s+Shared library: \[(.+)\]/);
      if (m && !SYSTEM.test(m[1]) && !packed.includes(m[1])) needs.add(m[1]);
    }
  }
  return [...needs].sort();
}

function copyInto(dir: string, files: string[], from: string): void {
  for (const f of files) {
    mkdirSync(path.join(dir, path.dirname(f)), { recursive: true });
    copyFileSync(path.join(from, f), path.join(dir, f));
  }
}

async function main(): Promise<void> {
  const root = findProjectRoot();
  const out = path.join(root, '.gpu-pack');
  const partMiB = Number(optionArg('part-mib') ?? 58);
  const devDir = optionArg('testdata') ?? path.resolve(root, '../shared/testdata/faces');
  const stage = path.join(out, 'stage', PACK);
  const parts = path.join(out, 'parts');
  rmSync(path.join(out, 'stage'), { recursive: true, force: true });
  rmSync(parts, { recursive: true, force: true });
  mkdirSync(stage, { recursive: true });
  mkdirSync(parts, { recursive: true });
  const took: string[] = [];
  let t = performance.now();
  const step = (what: string) => {
    took.push(`${what} ${((performance.now() - t) / 1000).toFixed(1)} s`);
    console.log(`${what}: ${((performance.now() - t) / 1000).toFixed(1)} s`);
    t = performance.now();
  };

  mkdirSync(path.join(stage, 'bin'));
  copyFileSync(buildGpuBench(root), path.join(stage, 'bin/face-gpu-bench'));
  sh('strip', [path.join(stage, 'bin/face-gpu-bench')]);
  step('bench binary');

  const lib = path.join(stage, 'lib');
  mkdirSync(lib);
  const wheel = await ortWheel(root, path.join(out, 'wheels'));
  extractMembers(wheel, ORT_LIBRARIES, lib);
  const needs = neededLibraries(ORT_LIBRARIES.map((l) => path.join(lib, l)), ORT_LIBRARIES);
  step('ONNX Runtime GPU libraries');

  const manifest = readManifest(root);
  const ids = new Set([...defaultModelIds(manifest).map((m) => m.id), ...GPU_BENCH_MODES.flatMap((mode) => resolveRecognizerSpec(manifest, mode).models)]);
  const models = path.join(stage, 'models');
  copyInto(models, ['manifest.json', ...manifest.models.filter((m) => ids.has(m.id)).map((m) => m.onnx)], path.join(root, 'models'));
  const python = path.join(root, 'bench/.venv/bin/python');
  if (!existsSync(python)) throw new Error('no bench/.venv: python3 -m venv bench/.venv && bench/.venv/bin/pip install -r bench/peers/requirements.txt');
  sh(python, [path.join(root, 'bench/engine/fp16-models.py'), '--models', models, '--out', path.join(stage, 'models-fp16')]);
  step(`models (${[...ids].join(', ')}), float32 and float16`);

  const demo = path.join(root, 'node_modules/@vladmandic/face-api/demo');
  copyInto(path.join(stage, 'photos/demo'), [1, 2, 3, 4, 5, 6].map((i) => `sample${i}.jpg`), demo);
  const haveDev = existsSync(path.join(devDir, 'labels.json'));
  if (haveDev) {
    const labels = JSON.parse(readFileSync(path.join(devDir, 'labels.json'), 'utf8')) as { file: string }[];
    copyInto(path.join(stage, 'photos/faces'), ['labels.json', ...labels.map((l) => l.file)], devDir);
  } else console.warn(`no labelled dev set at ${devDir}: the pack's run skips fp16 against fp32`);
  step('photos');

  const engine = {
    ...pickEngineConfig(loadConfig({}, { root, cores: HOST_CORES })),
    modelDir: 'models',
    ortLibrary: 'lib/libonnxruntime.so.1.31.1',
    providers: ['cuda', 'cpu'],
    tensorrtCache: '/var/tmp/face-trt-cache',
    inferenceWorkers: HOST_WORKERS,
    intraThreads: 1,
  };
  const plan = gpuPlan(engine, { demoPhotos: 'photos/demo', devSet: haveDev ? 'photos/faces' : null, fp16Models: 'models-fp16' });
  writeFileSync(path.join(stage, 'plan.json'), JSON.stringify(plan, null, 2));
  copyFileSync(path.join(root, 'bench/gpu/run.sh'), path.join(stage, 'run.sh'));
  chmodSync(path.join(stage, 'run.sh'), 0o755);
  writeFileSync(path.join(stage, 'NEEDS'), `${needs.join('\n')}\n`);

  // One xz stream; the host unpacks it with xz, or Python's lzma where xz is absent.
  const archive = path.join(out, 'pack.tar.xz');
  execFileSync('sh', ['-c', `tar -C "${path.dirname(stage)}" -cf - ${PACK} | xz -9 -T0 > "${archive}"`], { stdio: 'inherit' });
  sh('split', ['-b', `${partMiB}m`, '-d', '-a', '2', archive, path.join(parts, 'part-')]);
  step('compressed and split');

  const sums: string[] = [];
  for (const p of readdirSync(parts).sort()) sums.push(`${await sha256(path.join(parts, p))}  ${p}`);
  sums.push(`${await sha256(archive)}  pack.tar.xz`);
  writeFileSync(path.join(parts, 'SHA256SUMS'), `${sums.join('\n')}\n`);
  copyFileSync(path.join(stage, 'NEEDS'), path.join(parts, 'NEEDS'));

  const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  const du = (dir: string): number => readdirSync(dir, { withFileTypes: true }).reduce((n, e) => n + (e.isDirectory() ? du(path.join(dir, e.name)) : statSync(path.join(dir, e.name)).size), 0);
  console.log(`\npack ${mib(du(stage))} unpacked, ${mib(statSync(archive).size)} as pack.tar.xz; parts in ${path.relative(root, parts)}:`);
  for (const line of sums) {
    const name = line.split('  ')[1];
    const file = name === 'pack.tar.xz' ? archive : path.join(parts, name);
    console.log(`  ${name}  ${mib(statSync(file).size)}  sha256 ${line.slice(0, 16)}…`);
  }
  for (const [what, dir] of [['bin', 'bin'], ['lib', 'lib'], ['models', 'models'], ['models-fp16', 'models-fp16'], ['photos', 'photos']]) console.log(`  ${what}: ${mib(du(path.join(stage, dir)))}`);
  console.log(`the host must have: ${needs.join(' ')}`);
  console.log(`took: ${took.join(', ')}`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
