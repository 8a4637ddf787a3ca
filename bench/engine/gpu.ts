/**
 * The engine as a GPU host runs it, measured through the addon (no HTTP), so
 * the same command runs on any machine: on a GPU host it gives the figures, on
 * the CPU the baseline and a check of the tool itself.
 *
 *   node dist/bench/engine/gpu.js [--batches 1,4,16,64] [--sets demo,12mp] [--time MS]
 *       [--no-start] [--no-accuracy] [--testdata DIR] [--fp16-models DIR] [--json FILE]
 *
 * Engine options come from the environment, as for the service (FACE_PROVIDERS,
 * ORT_LIBRARY, FACE_RECOGNIZER, FACE_FIXED_SHAPES, FACE_TRT_FP16, ...): a GPU
 * host runs it as `FACE_PROVIDERS=tensorrt,cuda,cpu ORT_LIBRARY=... npm run bench:gpu`.
 *
 * 1. Providers: what each model runs on, its GPU provider options as ONNX
 *    Runtime gets them, its fixed shapes, and the warm-up (every model at
 *    every shape before the engine is ready) with what it took.
 * 2. Throughput, per photo set (the six demo photos, 22 faces; the same
 *    photos as 12 MP phone photos) and batch size (the engine's `maxBatch`, one
 *    engine per size; a closed loop keeps enough work in flight to fill a batch
 *    on every inference worker, at least one photo per worker):
 *    - detect: photos/s and faces/s, decode + detection;
 *    - embed: faces/s with the faces given as boxes (decode, keypoints,
 *      alignment, recogniser);
 *    - detect + embed: photos/s and faces/s of the whole identify path.
 *    Each row also gives, from the engine's run telemetry, the recogniser's
 *    own run time per face (all its models, summed over the workers: with w
 *    workers busy, w faces take that long) and the rows each of its models
 *    was handed per call (a face is one row, two with its mirror image; a
 *    call runs in batches of at most the batch size), which shows whether
 *    batches fill.
 * 3. Time to first answer: a fresh process opens the engine and answers one
 *    photo, timed from the process's start; first with a new, empty TensorRT
 *    cache folder (cold), then again with the folder the first run filled
 *    (warm); and once with shapes following each photo (`fixedShapes` off),
 *    which skips the warm-up and leaves the preparing to the first requests.
 * 4. fp16 against fp32: the labelled dev set (../shared/testdata/faces)
 *    embedded by two engines, `trtFp16` on and off: how far each face's
 *    embedding moved (cosine), each one's best verification accuracy over
 *    every pair, and the pairs whose `medium` verdict differs. Only TensorRT
 *    reads the flag, so on other providers the two must agree bit for bit.
 *    The same two engines also detect on the dev set's photos and the photo
 *    sets: faces found by one only, and how far the landmarks of the faces
 *    both found moved (over the face's width).
 *    With `--fp16-models DIR` the fp16 engine also loads its models from DIR,
 *    stored in float16 by `bench/engine/fp16-models.py`: on the CPU, an
 *    estimate of what fp16 rounding does before a GPU runs it.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { findProjectRoot, loadConfig } from '../../src/config.js';
import { engineOptionsFrom, openEngine, warmupByModel, type Engine, type EngineInfo, type EngineOptions } from '../../src/native/engine.js';
import { resolveRecognizerSpec } from '../../models/prepare.js';
import { CALIBRATIONS, isVerified, thresholdPresets, toConfidence } from '../../src/services/calibration.js';
import { numberArg, optionArg, saveJson } from '../lib/args.js';
import { embedLabelled, loadLabels } from '../lib/dev-set.js';
import { bestThreshold } from '../lib/lfw.js';
import { describeMachine, machineLine } from '../lib/machine.js';
import { phonePhoto } from '../lib/phone-photos.js';

const flag = (name: string) => process.argv.includes(`--${name}`);
const NONE = { embed: false, age: false, gender: false, emotions: false };
/** The goal for one H100-class GPU, end to end. */
const GOAL_FACES_PER_SECOND = 2000;
/** The photo a fresh process answers first. */
const FIRST_PHOTO = 'sample1.jpg';

interface PhotoSet {
  name: string;
  photos: Buffer[];
  /** Each photo's faces, as the engine found them. */
  boxes: number[][][];
}

export interface ThroughputRow {
  set: string;
  batch: number;
  task: 'detect' | 'embed' | 'detect + embed';
  inFlight: number;
  photosPerSecond: number;
  facesPerSecond: number;
  /** The recogniser's own run time per face (all its models, summed over workers), when it ran. */
  recognizerMsPerFace?: number;
  /** Rows handed to each recogniser model per call (run in batches of at most `batch`), the mean over its calls. */
  rowsPerCall?: number;
  failures: number;
  /** What the first failure said (OVERLOADED: too much in flight for the queues). */
  firstFailure?: string;
}

export interface FirstAnswer {
  run: string;
  fixedShapes: boolean;
  /** Process start to open() resolved, warm-up included. */
  openMs: number;
  /** Process start to the first photo's answer. */
  firstAnswerMs: number;
  warmupMs: number;
  cacheFiles: number;
  cacheBytes: number;
}

export interface PrecisionCheck {
  /** What the fp16 side is: TensorRT's flag, or float16 models as well. */
  fp16: string;
  /** Faces compared: photos where both sides found the face. */
  faces: number;
  /** Photos where only one side found a face. */
  onlyFp32Found: number;
  onlyFp16Found: number;
  providers: string[];
  /** Least cosine between a face's fp16 and fp32 embeddings, and the mean. */
  minCosine: number;
  meanCosine: number;
  identical: boolean;
  fp32Accuracy: number;
  fp16Accuracy: number;
  pairs: number;
  mediumVerdictsDiffering: number;
  /** The same comparison for detection, on the dev set's photos and the bench's photo sets. */
  detections: DetectionShift;
}

export interface DetectionShift {
  photos: number;
  /** Faces both found. */
  faces: number;
  onlyFp32: number;
  onlyFp16: number;
  /** Landmark displacement over face width: median, 99th percentile, largest; faces moved by more than 1%. */
  medianShift: number;
  p99Shift: number;
  maxShift: number;
  shiftedOver1Percent: number;
}

export interface GpuReport {
  machine: string;
  info: Pick<EngineInfo, 'providers' | 'recognizer' | 'detector' | 'dim' | 'fixedShapes' | 'sessions'>;
  warmup: { model: string; shapes: number; ms: number }[];
  throughput: ThroughputRow[];
  bestFacesPerSecond: number;
  firstAnswer?: FirstAnswer[];
  precision?: PrecisionCheck | { skipped: string };
}

/** Runs `call` with `inFlight` calls always outstanding for `ms`, then waits for the last; each call returns the faces it handled. */
async function closedLoop(inFlight: number, ms: number, call: (k: number) => Promise<number>) {
  const deadline = performance.now() + ms;
  let calls = 0;
  let faces = 0;
  let failures = 0;
  let firstFailure: string | undefined;
  let next = 0;
  const t0 = performance.now();
  const slot = async () => {
    while (performance.now() < deadline) {
      try {
        // Not `faces += await ...`: that reads `faces` before the await and loses the other slots' counts.
        const n = await call(next++);
        faces += n;
        calls++;
      } catch (err) {
        failures++;
        firstFailure ??= err instanceof Error ? err.message : String(err);
      }
    }
  };
  await Promise.all(Array.from({ length: inFlight }, slot));
  return { calls, faces, failures, firstFailure, seconds: (performance.now() - t0) / 1000 };
}

/** Model indices of the recogniser's parts in `info.models` (the engine reports its spec in full). */
function recognizerModels(info: EngineInfo): Set<number> {
  const ids = new Set(resolveRecognizerSpec({}, info.recognizer).models);
  return new Set(info.models.flatMap((m, i) => (ids.has(m.id) ? [i] : [])));
}

/** The recogniser's calls since the last call to stats(): its seconds and rows per call. */
function recognizerRuns(engine: Engine, models: Set<number>) {
  const runs = engine.stats().runs;
  let seconds = 0;
  let rows = 0;
  let count = 0;
  for (let i = 0; i + 2 < runs.length; i += 3) {
    if (!models.has(runs[i])) continue;
    rows += runs[i + 1];
    seconds += runs[i + 2];
    count++;
  }
  return { seconds, rowsPerCall: count ? rows / count : undefined };
}

async function throughput(options: EngineOptions, sets: PhotoSet[], batches: number[], ms: number, log: (line: string) => void): Promise<ThroughputRow[]> {
  const rows: ThroughputRow[] = [];
  for (const batch of batches) {
    const engine = await openEngine({ ...options, maxBatch: batch });
    const models = recognizerModels(engine.info());
    const workers = options.inferenceWorkers;
    for (const set of sets) {
      const facesPerPhoto = set.boxes.reduce((n, b) => n + b.length, 0) / set.photos.length;
      // Photos: one per batch row on each worker, at most 16 per worker (the detector takes
      // one window per run whatever the batch, so more would only lengthen the queue).
      const photoInFlight = Math.max(workers, Math.min(batch * workers, 16 * workers));
      // Caller boxes: faces enough for two full batches on each worker.
      const embedInFlight = Math.max(workers, Math.ceil((2 * batch * workers) / facesPerPhoto));
      const tasks: [ThroughputRow['task'], number, (k: number) => Promise<number>][] = [
        ['detect', photoInFlight, async (k) => (await engine.analyze(set.photos[k % set.photos.length], NONE)).faces.length],
        [
          'embed',
          embedInFlight,
          async (k) => {
            const i = k % set.photos.length;
            return (await engine.analyze(set.photos[i], { ...NONE, embed: true, boxes: set.boxes[i] })).faces.length;
          },
        ],
        ['detect + embed', photoInFlight, async (k) => (await engine.analyze(set.photos[k % set.photos.length], { ...NONE, embed: true })).faces.length],
      ];
      for (const [task, inFlight, call] of tasks) {
        await closedLoop(inFlight, Math.min(1000, ms / 4), call); // warm: caches, allocators, the JIT
        recognizerRuns(engine, models);
        const r = await closedLoop(inFlight, ms, call);
        const rec = recognizerRuns(engine, models);
        const row: ThroughputRow = {
          set: set.name,
          batch,
          task,
          inFlight,
          photosPerSecond: r.calls / r.seconds,
          facesPerSecond: r.faces / r.seconds,
          failures: r.failures,
          ...(r.firstFailure ? { firstFailure: r.firstFailure } : {}),
          ...(task !== 'detect' && rec.seconds > 0 && r.faces > 0 ? { recognizerMsPerFace: (rec.seconds * 1000) / r.faces, rowsPerCall: rec.rowsPerCall } : {}),
        };
        rows.push(row);
        log(
          `  ${set.name}, batch ${batch}, ${task}, ${inFlight} in flight: ${row.photosPerSecond.toFixed(1)} photos/s, ${row.facesPerSecond.toFixed(1)} faces/s` +
            (row.recognizerMsPerFace ? `; recogniser ${row.recognizerMsPerFace.toFixed(2)} ms/face, ${row.rowsPerCall?.toFixed(1)} rows/call` : '') +
            (row.failures ? `; ${row.failures} failed, the first: ${row.firstFailure}` : ''),
        );
      }
    }
    engine.close();
  }
  return rows;
}

/** Files and bytes under `dir`. */
function folderSize(dir: string): { files: number; bytes: number } {
  let files = 0;
  let bytes = 0;
  for (const name of readdirSync(dir, { recursive: true }) as string[]) {
    const s = statSync(path.join(dir, name));
    if (s.isFile()) {
      files++;
      bytes += s.size;
    }
  }
  return { files, bytes };
}

/** Runs this script as a fresh process answering one photo, with `env` on top of ours. */
function firstAnswerProcess(env: Record<string, string>): Promise<{ openMs: number; firstAnswerMs: number; warmupMs: number; fixedShapes: boolean }> {
  return new Promise((resolve, reject) => {
    // The compiled script, also when this module runs from source (under vitest).
    const script = path.join(findProjectRoot(), 'dist/bench/engine/gpu.js');
    const child = spawn(process.execPath, [script, '--first-answer'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      const line = out.trim().split('\n').pop() ?? '';
      if (code !== 0) reject(new Error(`first-answer process exited with ${code}: ${line}`));
      else resolve(JSON.parse(line));
    });
  });
}

/** In the child: open, answer one photo, print the times (ms since the process started). */
async function firstAnswerChild(): Promise<void> {
  const engine = await openEngine(engineOptionsFrom(loadConfig()));
  const openMs = performance.now();
  const photo = readFileSync(path.join(findProjectRoot(), 'node_modules/@vladmandic/face-api/demo', FIRST_PHOTO));
  await engine.analyze(photo, { ...NONE, embed: true });
  const firstAnswerMs = performance.now();
  const info = engine.info();
  engine.close();
  const warmupMs = info.warmup.reduce((s, w) => s + w.ms, 0);
  process.stdout.write(`${JSON.stringify({ openMs, firstAnswerMs, warmupMs, fixedShapes: info.fixedShapes })}\n`);
}

async function firstAnswers(log: (line: string) => void): Promise<FirstAnswer[]> {
  const cache = mkdtempSync(path.join(os.tmpdir(), 'face-trt-cache-'));
  const out: FirstAnswer[] = [];
  try {
    const runs: [string, Record<string, string>][] = [
      ['cold cache', { FACE_TRT_CACHE_DIR: cache }],
      ['warm cache', { FACE_TRT_CACHE_DIR: cache }],
      ['fixed shapes off', { FACE_TRT_CACHE_DIR: cache, FACE_FIXED_SHAPES: 'off' }],
    ];
    for (const [run, env] of runs) {
      const r = await firstAnswerProcess(env);
      const size = folderSize(cache);
      out.push({ run, ...r, cacheFiles: size.files, cacheBytes: size.bytes });
      log(
        `  ${run} (fixed shapes ${r.fixedShapes ? 'on' : 'off'}): open ${(r.openMs / 1000).toFixed(2)} s (warm-up ${(r.warmupMs / 1000).toFixed(2)} s), ` +
          `first answer ${(r.firstAnswerMs / 1000).toFixed(2)} s after start; cache ${size.files} files, ${(size.bytes / 2 ** 20).toFixed(1)} MiB`,
      );
    }
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
  return out;
}

/**
 * The dev set through two engines: fp32 (`trtFp16` off) and fp16 (`trtFp16` on, and with
 * `fp16Models` the models stored in float16 from that folder: `bench/engine/fp16-models.py`,
 * which estimates fp16's rounding where TensorRT is absent). Compared on the photos where both
 * found the face.
 */
async function precision(options: EngineOptions, devDir: string, photos: Buffer[], fp16Models?: string): Promise<PrecisionCheck | { skipped: string }> {
  const labels = loadLabels(devDir);
  if (!labels) return { skipped: `no labelled dev set at ${devDir}` };
  const embedWith = async (o: EngineOptions) => {
    const engine = await openEngine(o);
    return { engine, faces: await embedLabelled(engine, devDir, labels), info: engine.info() };
  };
  // A TensorRT cache folder each, so that neither side can load the other's engines.
  const cache = (name: string) => (options.tensorrtCache ? { tensorrtCache: path.join(options.tensorrtCache, `bench-${name}`) } : {});
  const fp32 = await embedWith({ ...options, ...cache('fp32'), trtFp16: false });
  const fp16 = await embedWith({ ...options, ...cache('fp16'), trtFp16: true, ...(fp16Models ? { modelDir: fp16Models } : {}) });
  const detections = await compareDetections(fp32.engine, fp16.engine, [...labels.map((l) => readFileSync(path.join(devDir, l.file))), ...photos]);
  fp32.engine.close();
  fp16.engine.close();
  const dim = fp32.faces.dim;
  // Row of each photo both found a face in, on each side.
  const rowOf16 = new Map(fp16.faces.files.map((f, i) => [f, i]));
  const common = fp32.faces.files.flatMap((f, i) => (rowOf16.has(f) ? [[i, rowOf16.get(f)!] as const] : []));
  const row = (all: Float32Array, i: number) => all.subarray(i * dim, (i + 1) * dim);
  const dot = (x: Float32Array, y: Float32Array) => x.reduce((n, v, d) => n + v * y[d], 0);
  const a = common.map(([i]) => row(fp32.faces.all, i));
  const b = common.map(([, j]) => row(fp16.faces.all, j));
  const people = common.map(([i]) => fp32.faces.people[i]);
  const cosines = a.map((x, k) => dot(x, b[k]));
  const pairScores = (rows: Float32Array[]) => {
    const scores: number[] = [];
    const same: boolean[] = [];
    for (let i = 0; i < rows.length; i++) {
      for (let j = i + 1; j < rows.length; j++) {
        scores.push(dot(rows[i], rows[j]));
        same.push(people[i] === people[j]);
      }
    }
    return { scores, same };
  };
  const [pa, pb] = [pairScores(a), pairScores(b)];
  const calibration = CALIBRATIONS[fp32.info.recognizer];
  let differing = 0;
  if (calibration) {
    const medium = thresholdPresets(calibration).medium;
    const verdict = (s: number) => isVerified(toConfidence(s, calibration), medium);
    differing = pa.scores.filter((s, k) => verdict(s) !== verdict(pb.scores[k])).length;
  }
  return {
    fp16: fp16Models ? `float16 models from ${fp16Models}` : 'trtFp16',
    faces: common.length,
    onlyFp32Found: fp32.faces.files.length - common.length,
    onlyFp16Found: fp16.faces.files.length - common.length,
    providers: fp16.info.providers,
    minCosine: Math.min(...cosines),
    meanCosine: cosines.reduce((n, c) => n + c, 0) / cosines.length,
    identical: common.length === fp32.faces.files.length && a.every((x, k) => x.every((v, d) => v === b[k][d])),
    fp32Accuracy: bestThreshold(pa.scores, pa.same).accuracy,
    fp16Accuracy: bestThreshold(pb.scores, pb.same).accuracy,
    pairs: pa.scores.length,
    mediumVerdictsDiffering: differing,
    detections,
  };
}

/**
 * The detector's half of the comparison: every photo through both engines, faces paired by
 * box overlap (IoU ≥ 0.5), and how far each pair's landmarks lie apart: the largest of the
 * five points' distances, over the face's width.
 */
async function compareDetections(a: Engine, b: Engine, photos: Buffer[]): Promise<DetectionShift> {
  const shifts: number[] = [];
  let onlyA = 0;
  let onlyB = 0;
  for (const photo of photos) {
    const [x, y] = await Promise.all([a.analyze(photo, NONE), b.analyze(photo, NONE)]);
    const paired = new Set<number>();
    for (const f of x.faces) {
      const ious = y.faces.map((g) => {
        const inter = Math.max(0, Math.min(f.x2, g.x2) - Math.max(f.x1, g.x1)) * Math.max(0, Math.min(f.y2, g.y2) - Math.max(f.y1, g.y1));
        return inter / ((f.x2 - f.x1) * (f.y2 - f.y1) + (g.x2 - g.x1) * (g.y2 - g.y1) - inter);
      });
      const j = ious.indexOf(Math.max(...ious));
      if (j < 0 || paired.has(j) || ious[j] < 0.5) {
        onlyA++;
        continue;
      }
      paired.add(j);
      const g = y.faces[j];
      let most = 0;
      for (let k = 0; k + 1 < f.landmarks.length; k += 2) most = Math.max(most, Math.hypot(f.landmarks[k] - g.landmarks[k], f.landmarks[k + 1] - g.landmarks[k + 1]));
      shifts.push(most / (f.x2 - f.x1));
    }
    onlyB += y.faces.length - paired.size;
  }
  shifts.sort((p, q) => p - q);
  const at = (q: number) => shifts[Math.min(shifts.length - 1, Math.floor(q * shifts.length))] ?? 0;
  return {
    photos: photos.length,
    faces: shifts.length,
    onlyFp32: onlyA,
    onlyFp16: onlyB,
    medianShift: at(0.5),
    p99Shift: at(0.99),
    maxShift: shifts.at(-1) ?? 0,
    shiftedOver1Percent: shifts.filter((v) => v > 0.01).length,
  };
}

export async function runGpuBench(o: {
  batches: number[];
  sets: string[];
  ms: number;
  start: boolean;
  accuracy: boolean;
  devDir: string;
  /** A model folder stored in float16 (bench/engine/fp16-models.py) for the fp16 side. */
  fp16Models?: string;
  log?: (line: string) => void;
}): Promise<GpuReport> {
  const log = o.log ?? ((line: string) => console.log(line));
  const root = findProjectRoot();
  const config = loadConfig();
  const options = engineOptionsFrom(config);
  const machine = machineLine(describeMachine());
  log(machine);

  const engine = await openEngine(options);
  const info = engine.info();
  log(`providers: ${info.providers.join(', ')} (asked for ${options.providers.join(', ')}); fixed shapes ${info.fixedShapes ? 'on' : 'off'}`);
  log(`recogniser ${info.recognizer} (${info.dim}-d), detector ${info.detector}`);
  for (const s of info.sessions) {
    const opts = s.providers.map((p) => `${p.name}: ${Object.entries(p.options).map(([k, v]) => `${k}=${v}`).join(' ')}`).join('; ');
    log(`  ${s.model}: ${s.shapes.length ? `${s.shapes.length} shapes (${s.shapes.map((d) => d.join('x')).join(', ')})` : 'shapes as they come'}${opts ? `; ${opts}` : ''}`);
  }
  const warmup = warmupByModel(info);
  if (info.fixedShapes) log(`warm-up: ${warmup.map((w) => `${w.model} ${w.shapes} shapes ${(w.ms / 1000).toFixed(2)} s`).join(', ')}`);

  const demo = [1, 2, 3, 4, 5, 6].map((i) => readFileSync(path.join(root, 'node_modules/@vladmandic/face-api/demo', `sample${i}.jpg`)));
  const sets: PhotoSet[] = [];
  for (const name of o.sets) {
    const photos = name === 'demo' ? demo : name === '12mp' ? demo.map((p) => phonePhoto(p, 4000, 3000, path.join(root, '.bench-out/phone-photos'))) : undefined;
    if (!photos) throw new Error(`unknown photo set ${name} (known: demo, 12mp)`);
    const boxes = await Promise.all(photos.map(async (p) => (await engine.analyze(p, NONE)).faces.map((f) => [f.x1, f.y1, f.x2, f.y2])));
    sets.push({ name, photos, boxes });
    log(`photo set ${name}: ${photos.length} photos, ${boxes.reduce((n, b) => n + b.length, 0)} faces`);
  }
  engine.close();

  log(`throughput (${o.ms} ms per row, ${options.inferenceWorkers} inference workers x ${options.intraThreads} threads):`);
  const rows = await throughput(options, sets, o.batches, o.ms, log);
  const best = Math.max(...rows.filter((r) => r.task !== 'detect').map((r) => r.facesPerSecond));
  log(`best faces/s with embedding: ${best.toFixed(1)} (goal on one H100-class GPU: ${GOAL_FACES_PER_SECOND})`);

  const report: GpuReport = {
    machine,
    info: { providers: info.providers, recognizer: info.recognizer, detector: info.detector, dim: info.dim, fixedShapes: info.fixedShapes, sessions: info.sessions },
    warmup,
    throughput: rows,
    bestFacesPerSecond: best,
  };
  if (o.start) {
    log('time to first answer (a fresh process each):');
    report.firstAnswer = await firstAnswers(log);
  }
  if (o.accuracy) {
    log(`fp16 against fp32 on the dev set (fp16: ${o.fp16Models ? `float16 models from ${o.fp16Models}` : 'trtFp16'}):`);
    const p = await precision(options, o.devDir, sets.flatMap((s) => s.photos), o.fp16Models);
    report.precision = p;
    if ('skipped' in p) log(`  skipped: ${p.skipped}`);
    else {
      const d = p.detections;
      const pct = (v: number) => `${(v * 100).toFixed(3)}%`;
      log(
        `  ${p.faces} faces on ${p.providers.join(', ')}: ${p.identical ? 'identical embeddings' : `cosine fp16 to fp32 min ${p.minCosine.toFixed(6)}, mean ${p.meanCosine.toFixed(6)}`}; ` +
          `best accuracy fp32 ${(p.fp32Accuracy * 100).toFixed(2)}%, fp16 ${(p.fp16Accuracy * 100).toFixed(2)}% over ${p.pairs} pairs; ` +
          `medium verdicts differing: ${p.mediumVerdictsDiffering}` +
          (p.onlyFp32Found || p.onlyFp16Found ? `; a face in ${p.onlyFp32Found} photos only in fp32, ${p.onlyFp16Found} only in fp16` : ''),
      );
      log(
        `  detection, ${d.photos} photos: ${d.faces} faces in both, ${d.onlyFp32} only in fp32, ${d.onlyFp16} only in fp16; landmarks moved ` +
          `median ${pct(d.medianShift)}, p99 ${pct(d.p99Shift)}, at most ${pct(d.maxShift)} of the face's width (${d.shiftedOver1Percent} faces over 1%)`,
      );
    }
  }
  return report;
}

async function main() {
  if (flag('first-answer')) return firstAnswerChild();
  const root = findProjectRoot();
  const report = await runGpuBench({
    batches: (optionArg('batches') ?? '1,4,16,64').split(',').map((b) => {
      const n = Number(b);
      if (!Number.isInteger(n) || n < 1) throw new Error(`--batches takes positive whole numbers, not ${b}`);
      return n;
    }),
    sets: (optionArg('sets') ?? 'demo,12mp').split(','),
    ms: numberArg('time', 3000),
    start: !flag('no-start'),
    accuracy: !flag('no-accuracy'),
    devDir: optionArg('testdata') ?? path.resolve(root, '../shared/testdata/faces'),
    fp16Models: optionArg('fp16-models'),
  });
  saveJson(optionArg('json'), report);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
