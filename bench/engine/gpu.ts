/**
 * The engine as a GPU host runs it, measured through the addon (no HTTP), so
 * the same command runs on any machine: on a GPU host it gives the figures, on
 * the CPU the baseline and a check of the tool itself.
 *
 *   node dist/bench/engine/gpu.js [--batches 1,4,16,64] [--sets demo,12mp] [--time MS]
 *       [--no-start] [--no-accuracy] [--testdata DIR] [--json FILE]
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
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { findProjectRoot, loadConfig } from '../../src/config.js';
import { engineOptionsFrom, openEngine, type Engine, type EngineInfo, type EngineOptions } from '../../src/native/engine.js';
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
  faces: number;
  providers: string[];
  /** Least cosine between a face's fp16 and fp32 embeddings, and the mean. */
  minCosine: number;
  meanCosine: number;
  identical: boolean;
  fp32Accuracy: number;
  fp16Accuracy: number;
  pairs: number;
  mediumVerdictsDiffering: number;
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

/** Model indices of the recogniser's parts in `info.models` (a spec is `id[:mirror]` parts joined by `+`). */
function recognizerModels(info: EngineInfo): Set<number> {
  const ids = new Set(info.recognizer.split('+').map((p) => p.split(':')[0]));
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

/** The dev set through two engines that differ in `trtFp16` alone. */
async function precision(options: EngineOptions, devDir: string): Promise<PrecisionCheck | { skipped: string }> {
  const labels = loadLabels(devDir);
  if (!labels) return { skipped: `no labelled dev set at ${devDir}` };
  const embedWith = async (trtFp16: boolean) => {
    const engine = await openEngine({ ...options, trtFp16 });
    try {
      return { faces: await embedLabelled(engine, devDir, labels), engine: engine.info() };
    } finally {
      engine.close();
    }
  };
  const fp32 = await embedWith(false);
  const fp16 = await embedWith(true);
  const [a, b] = [fp32.faces, fp16.faces];
  if (a.files.join('\n') !== b.files.join('\n')) throw new Error('fp16 and fp32 found faces in different photos');
  const dim = a.dim;
  const cosines: number[] = [];
  for (let i = 0; i < a.people.length; i++) {
    let dot = 0;
    for (let d = 0; d < dim; d++) dot += a.all[i * dim + d] * b.all[i * dim + d];
    cosines.push(dot);
  }
  const pairScores = (f: typeof a) => {
    const scores: number[] = [];
    const same: boolean[] = [];
    for (let i = 0; i < f.people.length; i++) {
      for (let j = i + 1; j < f.people.length; j++) {
        let dot = 0;
        for (let d = 0; d < dim; d++) dot += f.all[i * dim + d] * f.all[j * dim + d];
        scores.push(dot);
        same.push(f.people[i] === f.people[j]);
      }
    }
    return { scores, same };
  };
  const [pa, pb] = [pairScores(a), pairScores(b)];
  const calibration = CALIBRATIONS[fp32.engine.recognizer];
  let differing = 0;
  if (calibration) {
    const medium = thresholdPresets(calibration).medium;
    const verdict = (s: number) => isVerified(toConfidence(s, calibration), medium);
    differing = pa.scores.filter((s, k) => verdict(s) !== verdict(pb.scores[k])).length;
  }
  return {
    faces: a.people.length,
    providers: fp16.engine.providers,
    minCosine: Math.min(...cosines),
    meanCosine: cosines.reduce((s, c) => s + c, 0) / cosines.length,
    identical: a.all.every((v, k) => v === b.all[k]),
    fp32Accuracy: bestThreshold(pa.scores, pa.same).accuracy,
    fp16Accuracy: bestThreshold(pb.scores, pb.same).accuracy,
    pairs: pa.scores.length,
    mediumVerdictsDiffering: differing,
  };
}

export async function runGpuBench(o: {
  batches: number[];
  sets: string[];
  ms: number;
  start: boolean;
  accuracy: boolean;
  devDir: string;
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
  const warmup = info.sessions.map((s) => {
    const runs = info.warmup.filter((w) => w.model === s.model);
    return { model: s.model, shapes: runs.length, ms: runs.reduce((n, w) => n + w.ms, 0) };
  });
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
    log('fp16 against fp32 on the dev set:');
    const p = await precision(options, o.devDir);
    report.precision = p;
    if ('skipped' in p) log(`  skipped: ${p.skipped}`);
    else
      log(
        `  ${p.faces} faces on ${p.providers.join(', ')}: ${p.identical ? 'identical embeddings' : `cosine fp16 to fp32 min ${p.minCosine.toFixed(6)}, mean ${p.meanCosine.toFixed(6)}`}; ` +
          `best accuracy fp32 ${(p.fp32Accuracy * 100).toFixed(2)}%, fp16 ${(p.fp16Accuracy * 100).toFixed(2)}% over ${p.pairs} pairs; ` +
          `medium verdicts differing: ${p.mediumVerdictsDiffering}`,
      );
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
  });
  saveJson(optionArg('json'), report);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
