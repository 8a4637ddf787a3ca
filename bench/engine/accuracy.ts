/**
 * Accuracy of the model pack on labelled photos and on LFW, the numbers behind
 * the detector choice, the recogniser choice and the threshold calibration:
 *
 *   node dist/bench/engine/accuracy.js [--testdata DIR] [--recognizers a,b] [--json FILE]
 *       [--lfw DIR | --no-lfw] [--lfw-only] [--modes sface,sface:mirror,accurate]
 *       [--recompute] [--no-mirror | --photo-mirror] [--no-old]
 *       [--inflight 8] [--workers 2] [--intra 1] [--lfw-limit N]
 *
 * - detection: faces found against the labelled count on every photo, and on
 *   the six demo group photos (3,3,3,4,5,4);
 * - verification on the labelled photos, per recogniser (`--recognizers`,
 *   default every converted recogniser of the manifest): every same-identity
 *   pair is genuine, every cross-identity pair an impostor; best accuracy and
 *   its threshold, equal error rate, the cosine at the false-accept rates
 *   behind the presets (empirical where the impostor count allows, Gaussian
 *   tail otherwise), and the verdicts of the calibrated `medium` preset;
 * - attributes: age error and gender accuracy on the age-labelled chips,
 *   emotion top-1 on the emotion photos;
 * - LFW (../shared/testdata/lfw, see bench/lib/lfw.ts), with the default
 *   detector, once per recogniser mode of `--modes` (default
 *   `sface,sface:mirror,accurate`: a spec the engine's `recognizer` option
 *   takes, or a name of the manifest's `recognizerModes`; in the default list
 *   a mode whose models are not converted is skipped and said, a named one is
 *   an error). Per mode: every photo embedded (face nearest the centre;
 *   2 inference workers x 1 intra thread, 8 analyses in flight, cached under
 *   .bench-out/ by the spec in full and the hash of every model in it), the
 *   throughput (photos/s, ms of engine wall time per photo), the dim and the
 *   bytes per stored face (PostgreSQL, scan index), the standard 10-fold
 *   accuracy of pairs.txt, TAR at FAR 1e-1..1e-6 over every impostor pair
 *   across people, the logistic fit and presets for
 *   src/services/calibration.ts (a ready-to-paste CALIBRATIONS entry keyed by
 *   the spec in full where the file differs), the presets' verdicts on the
 *   pairs; then on the labelled dev set (../shared/testdata/faces) the
 *   `medium` verdicts (the file's calibration, else the one just measured)
 *   and rank-1 identification of every dev face of a person with two or more
 *   against a gallery of the dev faces plus every LFW photo but the dev
 *   people's own LFW folders. One summary row per mode at the end, and all
 *   of it in `--json`.
 *   Photo-level mirror averaging (photo + EXIF-mirrored photo against the
 *   photo alone) runs within the first mode without `:mirror`, but is
 *   skipped by default when another mode mirrors the crop in the engine
 *   (`--photo-mirror` runs it anyway, `--no-mirror` never). After the modes,
 *   the old pipeline (blazeface-back + faceres) on the pair photos
 *   (`--no-old` skips it).
 *   `--no-lfw` skips LFW; without the folder the command stops and says what
 *   is missing. `--lfw-limit N` is for smoke tests of the code path only: the
 *   first N people's photos and the pairs among them (cached apart; the
 *   numbers are not LFW's).
 */
import { readFileSync, existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import { engineOptionsFrom, openEngine, type Engine } from '../../src/native/engine.js';
import { upperTailZ } from '../../src/services/normal.js';
import { CALIBRATIONS, DEFAULT_THRESHOLD, isVerified, thresholdPresets, toConfidence, type Calibration } from '../../src/services/calibration.js';
import { numberArg, optionArg as arg } from '../lib/args.js';
import {
  allPairs,
  atFar,
  embedPhotos,
  fitLogisticAllPairs,
  fitLogisticWeighted,
  impostorsAbove,
  lfwMissing,
  limitPeople,
  loadLfw,
  loadPairs,
  mirrorAverage,
  modelHashes,
  pairScores,
  tarAt,
  tenFold,
  type AllPairs,
  type EmbedOptions,
  type Embedded,
  type LfwPair,
  type LfwSet,
  type TenFold,
} from '../lib/lfw.js';
import { embedLabelled, lfwFolders, loadLabels, type DevFaces, type Label } from '../lib/dev-set.js';
import {
  databaseBytesPerFace,
  resolveRecognizerMode,
  scanIndexBytesPerFace,
  specFileName,
  type RecognizerMode,
} from '../lib/recognizer-modes.js';

const flag = (name: string) => process.argv.includes(`--${name}`);

const DEMO_COUNTS = [3, 3, 3, 4, 5, 4];
const FAR_TARGETS = [1e-1, 1e-3, 1e-5];

function quantileAbove(sorted: number[], far: number): number | null {
  // The smallest threshold with at most far * n impostors strictly above it.
  const allowed = Math.floor(far * sorted.length);
  if (allowed < 1) return null;
  return sorted[sorted.length - allowed - 1];
}

interface Pairs {
  genuine: number[];
  impostor: number[];
}

/**
 * Logistic fit of P(same person | cosine) at equal priors (each class weighs
 * half): confidence = 1 / (1 + exp(-slope * (cosine - center))).
 */
function fitLogistic({ genuine, impostor }: Pairs): { slope: number; center: number } {
  const x = [...genuine, ...impostor];
  const y = x.map((_, i) => (i < genuine.length ? 1 : 0));
  const w = x.map((_, i) => (i < genuine.length ? 0.5 / genuine.length : 0.5 / impostor.length));
  return fitLogisticWeighted(x, y, w);
}

/** A preset's verdicts as the service gives them: verified when confidence >= the preset's threshold. */
function presetVerdicts({ genuine, impostor }: Pairs, c: Calibration, preset: 'strict' | 'medium' | 'low') {
  const t = thresholdPresets(c)[preset];
  const accepted = genuine.filter((s) => isVerified(toConfidence(s, c), t)).length;
  const rejected = impostor.filter((s) => !isVerified(toConfidence(s, c), t)).length;
  return {
    preset,
    threshold: t,
    accuracy: (accepted + rejected) / (genuine.length + impostor.length),
    tar: accepted / genuine.length,
    far: (impostor.length - rejected) / impostor.length,
    falseRejects: genuine.length - accepted,
    falseAccepts: impostor.length - rejected,
  };
}

function verificationStats({ genuine, impostor }: Pairs) {
  const all = [...genuine.map((s) => [s, 1] as const), ...impostor.map((s) => [s, 0] as const)].sort((a, b) => a[0] - b[0]);
  // Sweep thresholds between consecutive scores: accept when score > t.
  let fn = 0;
  let tn = 0;
  let best = { accuracy: 0, threshold: -1 };
  let eer = { gap: Infinity, rate: 1, threshold: 0 };
  const n = all.length;
  for (let i = 0; i <= n; i++) {
    const t = i === 0 ? all[0][0] - 1e-6 : all[i - 1][0];
    const accuracy = (tn + (genuine.length - fn)) / n;
    if (accuracy > best.accuracy) best = { accuracy, threshold: t };
    const far = (impostor.length - tn) / impostor.length;
    const frr = fn / genuine.length;
    if (Math.abs(far - frr) < eer.gap) eer = { gap: Math.abs(far - frr), rate: (far + frr) / 2, threshold: t };
    if (i < n) {
      if (all[i][1] === 1) fn++;
      else tn++;
    }
  }
  const imp = [...impostor].sort((a, b) => a - b);
  const mean = imp.reduce((a, b) => a + b, 0) / imp.length;
  const std = Math.sqrt(imp.reduce((a, b) => a + (b - mean) ** 2, 0) / (imp.length - 1));
  const gen = [...genuine].sort((a, b) => a - b);
  const atFar = FAR_TARGETS.map((far) => {
    const gaussian = mean + upperTailZ(far) * std;
    const empirical = quantileAbove(imp, far);
    const threshold = empirical ?? Math.max(gaussian, imp[imp.length - 1]);
    const tar = gen.filter((s) => s > threshold).length / gen.length;
    return { far, empirical, gaussian, threshold, tar };
  });
  return {
    genuinePairs: genuine.length,
    impostorPairs: impostor.length,
    bestAccuracy: best.accuracy,
    bestThreshold: best.threshold,
    eer: eer.rate,
    eerThreshold: eer.threshold,
    impostor: { mean, std, max: imp[imp.length - 1] },
    genuine: { mean: gen.reduce((a, b) => a + b, 0) / gen.length, min: gen[0] },
    atFar,
    logistic: fitLogistic({ genuine, impostor }),
  };
}

async function detection(engine: Engine, root: string, dir: string | undefined, labels: Label[]) {
  const rows: { file: string; expected: string; found: number; ok: boolean }[] = [];
  for (let i = 0; i < DEMO_COUNTS.length; i++) {
    const file = path.join(root, 'node_modules/@vladmandic/face-api/demo', `sample${i + 1}.jpg`);
    const a = await engine.analyze(readFileSync(file), { embed: false, age: false, gender: false, emotions: false });
    rows.push({ file: `demo/sample${i + 1}.jpg`, expected: String(DEMO_COUNTS[i]), found: a.faces.length, ok: a.faces.length === DEMO_COUNTS[i] });
  }
  if (dir) {
    for (const l of labels) {
      const a = await engine.analyze(readFileSync(path.join(dir, l.file)), { embed: false, age: false, gender: false, emotions: false });
      const found = a.faces.length;
      const ok = l.faces !== null ? found === l.faces : found >= (l.faces_min ?? 0);
      rows.push({ file: l.file, expected: l.faces !== null ? String(l.faces) : `>=${l.faces_min}`, found, ok });
    }
  }
  return rows;
}

/** Every same-identity pair of dev faces is genuine, every cross-identity pair an impostor. */
async function labelledPairs(engine: Engine, f: DevFaces): Promise<Pairs & { faces: DevFaces; calibration?: Calibration }> {
  const sim = await engine.similarity(f.all, f.all, f.dim);
  const pairs: Pairs = { genuine: [], impostor: [] };
  const n = f.people.length;
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j < n; j++) (f.people[i] === f.people[j] ? pairs.genuine : pairs.impostor).push(sim[i * n + j]);
  }
  return { ...pairs, faces: f, calibration: CALIBRATIONS[engine.info().recognizer] };
}

/**
 * Verification statistics of the dev pairs, and the `medium` preset's verdicts with the
 * recogniser's calibration from src/services/calibration.ts, else with `fallback` (a
 * calibration just measured on LFW for a recogniser the file does not hold yet).
 */
function verifyLabelled(p: Awaited<ReturnType<typeof labelledPairs>>, fallback?: Calibration) {
  const calibration = p.calibration ?? fallback;
  const medium = calibration ? presetVerdicts(p, calibration, 'medium') : undefined;
  return { faces: p.faces.people.length, missed: p.faces.missed, identities: new Set(p.faces.people).size, ...verificationStats(p), medium };
}

async function embeddings(engine: Engine, dir: string, labels: Label[]) {
  return verifyLabelled(await labelledPairs(engine, await embedLabelled(engine, dir, labels)));
}

async function attributes(engine: Engine, dir: string, labels: Label[]) {
  const ageErr: number[] = [];
  let genderOk = 0;
  let genderN = 0;
  let emotionOk = 0;
  let emotionN = 0;
  const emotionNames: Record<string, string> = { disgusted: 'disgust', fearful: 'fear', surprised: 'surprise' };
  for (const l of labels) {
    const want = l.attributes;
    if (!want) continue;
    const a = await engine.analyze(readFileSync(path.join(dir, l.file)), { embed: false, age: true, gender: true, emotions: true });
    const face = a.faces[0];
    if (!face) continue;
    if (want.age !== undefined && face.age !== undefined) ageErr.push(Math.abs(face.age - want.age));
    if (want.gender) {
      genderN++;
      if (face.gender === want.gender) genderOk++;
    }
    if (want.emotion) {
      emotionN++;
      if (face.emotions?.[0] === (emotionNames[want.emotion] ?? want.emotion)) emotionOk++;
    }
  }
  return {
    ageMae: ageErr.reduce((a, b) => a + b, 0) / Math.max(1, ageErr.length),
    ageN: ageErr.length,
    genderAccuracy: genderOk / Math.max(1, genderN),
    genderN,
    emotionTop1: emotionOk / Math.max(1, emotionN),
    emotionN,
  };
}

const pct = (x: number, digits = 2) => `${(x * 100).toFixed(digits)}%`;
const round4 = (x: number) => Math.round(x * 1e4) / 1e4;
const FAR_TABLE = [1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6];

function printTable(header: string[], rows: (string | number)[][]) {
  const cells = [header, ...rows.map((r) => r.map(String))];
  const widths = header.map((_, c) => Math.max(...cells.map((r) => r[c].length)));
  const line = (r: string[]) => `  | ${r.map((v, c) => v.padEnd(widths[c])).join(' | ')} |`;
  console.log(line(header));
  console.log(`  |${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const r of cells.slice(1)) console.log(line(r));
}

const tenFoldText = (t: TenFold) => `${pct(t.mean)} ± ${pct(t.std)} (sd over ${t.folds.length} folds; standard error ${pct(t.standardError)})`;

interface Manifest {
  defaults: { detector: string; recognizer: string };
  models: { id: string; role: string; onnx: string }[];
}

/** The cosine where the confidence reaches a threshold: what a confidence threshold means on the cosine axis. */
const cosineAtConfidence = (c: Calibration, t: number) => c.center + Math.log(t / (1 - t)) / c.slope;

/** Verdicts on LFW pairs at a confidence threshold, the way the service decides. */
function pairVerdicts(scores: Float64Array, pairs: LfwPair[], c: Calibration, threshold: number) {
  let correct = 0;
  let accepted = 0;
  let falseAccepts = 0;
  let genuine = 0;
  pairs.forEach((p, i) => {
    const yes = isVerified(toConfidence(scores[i], c), threshold);
    if (yes === p.same) correct++;
    if (p.same) genuine++;
    if (yes && p.same) accepted++;
    if (yes && !p.same) falseAccepts++;
  });
  return { accuracy: correct / pairs.length, tar: accepted / genuine, falseAccepts };
}

function farRows(ap: AllPairs) {
  return FAR_TABLE.map((far) => atFar(ap, far));
}

/** The recogniser modes `--modes` measures by default. */
const DEFAULT_MODES = ['sface', 'sface:mirror', 'accurate'];

/** Dev-set people filed in LFW under another name (as in bench/search/face-vectors.ts). */
interface LfwContext {
  config: ReturnType<typeof loadConfig>;
  set: LfwSet;
  pairs: LfwPair[];
  images: string;
  detector: string;
  shape: { inferenceWorkers: number; intraThreads: number };
  inFlight: number;
  settings: Record<string, unknown>;
  force: boolean;
  cache: (det: string, rec: string, tag: string) => string;
  /** Cache tag of the photo list: `all`, or `first<N>people` under --lfw-limit. */
  tag: string;
  log: (line: string) => void;
  dev?: { dir: string; labels: Label[] };
  /** LFW people left out of the rank-1 gallery: the dev set's own. */
  excludedPeople: Set<number>;
  /** The mode that gets the photo-level mirror comparison, if any. */
  photoMirror?: string;
}

/** What the summary table and the JSON keep of one mode. */
interface ModeSummary {
  mode: string;
  recognizer: string;
  dim: number;
  tenFold: { mean: number; std: number };
  tarAtFar: Record<string, number>;
  devMedium?: { tar: number; falseAccepts: number; impostorPairs: number; calibration: 'file' | 'measured' };
  devRank1?: { queries: number; hits: number; rate: number; distractors: number; lfwTopHits: number };
  photosPerSecond: number;
  msPerPhoto: number;
  msPerFace: number;
  engine: { inferenceWorkers: number; intraThreads: number };
  inFlight: number;
  cached: boolean;
  bytesPerFace: { database: number; scanIndex: number };
}

const SUMMARY_FAR = [1e-3, 1e-4, 1e-5, 1e-6];

/** The calibration as a ready-to-paste entry of CALIBRATIONS in src/services/calibration.ts. */
function calibrationEntry(key: string, c: Calibration): string {
  const k = /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? key : `'${key}'`;
  return [
    `  ${k}: {`,
    `    slope: ${c.slope},`,
    `    center: ${c.center},`,
    `    cosineAtFar: { strict: ${c.cosineAtFar.strict}, medium: ${c.cosineAtFar.medium}, low: ${c.cosineAtFar.low} },`,
    '  },',
  ].join('\n');
}

/**
 * Rank-1 identification: gallery = every dev-set face plus every LFW photo with a face but
 * those of `excluded` people; queries = the dev faces of people with two or more. A query is
 * right when its nearest gallery face other than itself is the same person.
 */
async function rank1(engine: Engine, dev: DevFaces, set: LfwSet, lfw: Embedded, excluded: Set<number>) {
  const { dim } = dev;
  if (lfw.dim !== dim) throw new Error(`dev-set embeddings are ${dim}-d, LFW's ${lfw.dim}-d`);
  const lfwRows = [...lfw.found.keys()].filter((i) => lfw.found[i] && !excluded.has(set.person[i]));
  const nDev = dev.people.length;
  const gallery = new Float32Array((nDev + lfwRows.length) * dim);
  gallery.set(dev.all.subarray(0, nDev * dim));
  lfwRows.forEach((f, r) => gallery.set(lfw.emb.subarray(f * dim, (f + 1) * dim), (nDev + r) * dim));
  const count = new Map<string, number>();
  for (const p of dev.people) count.set(p, (count.get(p) ?? 0) + 1);
  const queries = dev.people.map((_, i) => i).filter((i) => count.get(dev.people[i])! >= 2);
  const q = new Float32Array(queries.length * dim);
  queries.forEach((d, r) => q.set(dev.all.subarray(d * dim, (d + 1) * dim), r * dim));
  const g = nDev + lfwRows.length;
  const sim = await engine.similarity(q, gallery, dim);
  let hits = 0;
  let lfwTopHits = 0;
  const misses: { query: string; person: string; top: string; score: number; sameScore: number }[] = [];
  queries.forEach((d, r) => {
    let best = -1;
    let bestS = -Infinity;
    let sameS = -Infinity;
    for (let c = 0; c < g; c++) {
      if (c === d) continue;
      const s = sim[r * g + c];
      if (s > bestS) {
        bestS = s;
        best = c;
      }
      if (c < nDev && dev.people[c] === dev.people[d] && s > sameS) sameS = s;
    }
    const ok = best < nDev && dev.people[best] === dev.people[d];
    if (ok) hits++;
    if (best >= nDev) lfwTopHits++;
    if (!ok) {
      const top = best < nDev ? `faces/${dev.files[best]}` : `lfw/${set.files[lfwRows[best - nDev]]}`;
      misses.push({ query: dev.files[d], person: dev.people[d], top, score: round4(bestS), sameScore: round4(sameS) });
    }
  });
  return { queries: queries.length, hits, rate: queries.length ? hits / queries.length : 0, gallery: g, distractors: lfwRows.length, lfwTopHits, misses };
}

/** One recogniser mode: LFW embedding, 10-fold, every pair, calibration, presets, dev set. */
async function lfwMode(ctx: LfwContext, mode: RecognizerMode): Promise<{ summary: ModeSummary; plain: Embedded; tf: TenFold; report: Record<string, unknown> }> {
  const { config, set, pairs, images, detector, shape, inFlight, log } = ctx;
  const report: Record<string, unknown> = { mode: mode.mode, spec: mode.spec, models: mode.models };
  console.log(
    `\n== ${mode.mode}${mode.spec !== mode.mode ? ` (${mode.spec})` : ''}: ${detector} + ${mode.spec}, ` +
      `${shape.inferenceWorkers} inference workers x ${shape.intraThreads} intra threads, ${inFlight} analyses in flight`,
  );
  const engine = await openEngine(engineOptionsFrom(config, { ...shape, detector, recognizer: mode.spec }));
  const recognizer = engine.info().recognizer;
  if (recognizer !== mode.spec) console.log(`  the engine names the recogniser ${recognizer}, not ${mode.spec}: ${recognizer} is used for the cache and the calibration`);
  report.recognizer = recognizer;

  // 1. Every photo.
  const models = modelHashes(config.modelDir, [detector, ...mode.models]);
  const common = { detector, recognizer, models, settings: ctx.settings, inFlight, engine: shape, force: ctx.force, log };
  const plain = await embedPhotos(engine, images, set.files, { ...common, mirror: false, cache: ctx.cache(detector, recognizer, ctx.tag) });
  const dim = plain.dim;
  const noFace = set.files.filter((_, i) => !plain.found[i]);
  const multi = [...plain.faces].filter((n) => n > 1).length;
  const facesFound = [...plain.faces].reduce((a, b) => a + b, 0);
  const msPerPhoto = (plain.seconds * 1000) / set.files.length;
  const msPerFace = (plain.seconds * 1000) / Math.max(1, facesFound);
  const passShape = `${plain.engine.inferenceWorkers} workers x ${plain.engine.intraThreads} intra, ${plain.inFlight} in flight`;
  console.log(
    `  embedded ${set.files.length} photos in ${plain.seconds.toFixed(0)} s${plain.cached ? ' (the cached pass)' : ''}: ` +
      `${plain.photosPerSecond.toFixed(1)} photos/s, ${msPerPhoto.toFixed(1)} ms of engine wall time per photo ` +
      `(${msPerFace.toFixed(1)} ms per detected face, ${facesFound} faces; detection included; ${passShape}; ` +
      `load average ${plain.load[0].toFixed(1)} → ${plain.load[1].toFixed(1)}); ${dim}-d; ` +
      `no face on ${noFace.length}; more than one face on ${multi}, the centred one not the biggest on ${plain.notBiggest}`,
  );
  if (noFace.length) console.log(`  no face: ${noFace.slice(0, 20).join(', ')}${noFace.length > 20 ? ', …' : ''}`);
  const bytesPerFace = { database: databaseBytesPerFace(dim), scanIndex: scanIndexBytesPerFace(dim) };
  console.log(`  bytes per stored face: ${bytesPerFace.database} in PostgreSQL (float32 x ${dim}), ${bytesPerFace.scanIndex} in the scan index (4-bit codes + f16 + id)`);
  report.embedding = {
    detector,
    recognizer,
    dim,
    engine: plain.engine,
    inFlight: plain.inFlight,
    cached: plain.cached,
    seconds: plain.seconds,
    photosPerSecond: plain.photosPerSecond,
    msPerPhoto,
    msPerFace,
    facesFound,
    loadAverage: plain.load,
    noFace,
    multiFace: multi,
    centredNotBiggest: plain.notBiggest,
    bytesPerFace,
  };

  // 2. 10-fold accuracy.
  const scores = pairScores(plain.emb, plain.found, dim, pairs);
  const tf = tenFold(scores, pairs);
  console.log(`  10-fold accuracy: ${tenFoldText(tf)}; ${tf.noFacePairs} pairs with a photo without a face (counted as "different")`);
  console.log(`  per fold: ${tf.folds.map((f) => `${f.fold}: ${pct(f.accuracy, 1)} @ ${f.threshold.toFixed(3)}`).join(', ')}`);
  report.tenFold = tf;

  // 3. Every pair of photos.
  const ap = await allPairs(engine, plain.emb, plain.found, set.person, dim);
  console.log(
    `  all pairs (${ap.seconds.toFixed(1)} s): ${ap.genuine.length} genuine pairs of ${ap.genuinePeople} people with 2+ photos, ` +
      `${ap.impostorCount} impostor pairs across ${ap.people} people (impostor cosine mean ${ap.impostorMean.toFixed(4)}, sd ${ap.impostorStd.toFixed(4)})`,
  );
  const far = farRows(ap);
  printTable(
    ['FAR', 'cosine', 'from', 'impostors above', 'TAR'],
    far.map((f) => [f.far.toExponential(0), f.cosine.toFixed(4), f.from, `${f.impostorsAbove} (≤ ${f.allowed})`, pct(f.tar)]),
  );
  const top = ap.top.slice(0, 100).map((t) => ({ score: round4(t.score), a: set.files[t.a], b: set.files[t.b] }));
  const at1e6 = far.find((f) => f.far === 1e-6)!;
  console.log(`  the FAR 1e-6 threshold is impostor score number ${at1e6.allowed + 1} from the top; the highest impostor pairs:`);
  for (const t of top.slice(0, 15)) console.log(`    ${t.score.toFixed(4)}  ${t.a}  ${t.b}`);
  report.allPairs = {
    photos: ap.photos,
    genuinePairs: ap.genuine.length,
    genuinePeople: ap.genuinePeople,
    impostorPairs: ap.impostorCount,
    impostor: { mean: ap.impostorMean, std: ap.impostorStd, max: ap.top[0]?.score },
    genuine: { mean: ap.genuine.reduce((a, b) => a + b, 0) / ap.genuine.length, min: ap.genuine[0] },
    atFar: far,
    topImpostors: top,
  };

  // 4. Calibration: logistic fit on every pair, presets at the FAR targets.
  const fit = fitLogisticAllPairs(ap);
  const cosAt = (f: number) => round4(far.find((x) => x.far === f)!.cosine);
  const measured: Calibration = {
    slope: Math.round(fit.slope * 100) / 100,
    center: round4(fit.center),
    cosineAtFar: { strict: cosAt(1e-5), medium: cosAt(1e-3), low: cosAt(1e-1) },
  };
  console.log(
    `  logistic confidence (${ap.genuine.length} genuine against ${ap.impostorCount} impostor pairs, equal total weight): ` +
      `slope ${fit.slope.toFixed(3)}, center ${fit.center.toFixed(4)}`,
  );
  const current = CALIBRATIONS[recognizer];
  const same = current && JSON.stringify(current) === JSON.stringify(measured);
  console.log(
    same
      ? `  src/services/calibration.ts holds these numbers for ${recognizer}`
      : `  src/services/calibration.ts ${current ? 'differs' : 'has no entry'} for ${recognizer}: measured ${JSON.stringify(measured)}, file ${JSON.stringify(current ?? null)}`,
  );
  if (!same) {
    console.log(`  CALIBRATIONS entry${set.limited ? ' (from an --lfw-limit subset: do not paste)' : ''}:`);
    console.log(calibrationEntry(recognizer, measured));
  }
  report.calibration = { measured, file: current ?? null, fileMatches: !!same, logistic: fit, entry: calibrationEntry(recognizer, measured) };

  // The presets (the file's numbers, else the measured ones) on every pair and on the LFW pairs.
  const calibration = current ?? measured;
  const presets = thresholdPresets(calibration);
  const presetRows: { name: string; target: string; confidence: number }[] = [
    { name: 'strict', target: '1e-5', confidence: presets.strict },
    { name: 'medium', target: '1e-3', confidence: presets.medium },
    { name: 'low', target: '1e-1', confidence: presets.low },
    { name: `default ${DEFAULT_THRESHOLD}`, target: '', confidence: DEFAULT_THRESHOLD },
  ];
  const presetReport = presetRows.map((r) => {
    const cosine = cosineAtConfidence(calibration, r.confidence);
    const v = pairVerdicts(scores, pairs, calibration, r.confidence);
    return {
      preset: r.name,
      farTarget: r.target,
      confidence: r.confidence,
      cosine,
      far: impostorsAbove(ap, cosine) / ap.impostorCount,
      tar: tarAt(ap, cosine),
      lfwPairAccuracy: v.accuracy,
      lfwPairTar: v.tar,
      lfwPairFalseAccepts: v.falseAccepts,
    };
  });
  console.log(
    `  presets of ${current ? 'src/services/calibration.ts' : 'the measured calibration'} (${recognizer}): every pair, and the ${pairs.length} pairs.txt pairs at the fixed threshold`,
  );
  printTable(
    ['preset', 'FAR target', 'confidence', 'cosine', 'FAR measured', 'TAR', 'pairs accuracy', 'pairs TAR', 'pairs false accepts'],
    presetReport.map((r) => [
      r.preset,
      r.farTarget,
      r.confidence.toFixed(4),
      r.cosine.toFixed(4),
      r.far.toExponential(2),
      pct(r.tar),
      pct(r.lfwPairAccuracy),
      pct(r.lfwPairTar),
      r.lfwPairFalseAccepts,
    ]),
  );
  report.presets = { calibration: current ? 'file' : 'measured', rows: presetReport };

  // 5. The dev set: verification at `medium`, rank-1 among the LFW distractors.
  let devMedium: ModeSummary['devMedium'];
  let devRank1: ModeSummary['devRank1'];
  if (ctx.dev) {
    const faces = await embedLabelled(engine, ctx.dev.dir, ctx.dev.labels);
    const stats = verifyLabelled(await labelledPairs(engine, faces), CALIBRATIONS[recognizer] ? undefined : measured);
    const m = stats.medium!;
    devMedium = { tar: m.tar, falseAccepts: m.falseAccepts, impostorPairs: stats.impostorPairs, calibration: CALIBRATIONS[recognizer] ? 'file' : 'measured' };
    console.log(
      `  dev set (${ctx.dev.dir}): ${faces.people.length} faces of ${new Set(faces.people).size} people (${faces.missed} photos without a face); ` +
        `medium preset (confidence >= ${m.threshold}, ${devMedium.calibration === 'file' ? 'calibration.ts' : 'measured calibration'}): ` +
        `TAR ${pct(m.tar, 1)} of ${stats.genuinePairs} genuine pairs (${m.falseRejects} false rejects), ` +
        `${m.falseAccepts} false accepts of ${stats.impostorPairs} impostor pairs; best accuracy ${pct(stats.bestAccuracy)}, EER ${pct(stats.eer)}`,
    );
    const r1 = await rank1(engine, faces, set, plain, ctx.excludedPeople);
    devRank1 = { queries: r1.queries, hits: r1.hits, rate: r1.rate, distractors: r1.distractors, lfwTopHits: r1.lfwTopHits };
    console.log(
      `  rank-1 identification among ${r1.distractors} LFW distractors (gallery ${r1.gallery} faces): ${r1.queries} queries, ${r1.hits} hits, ` +
        `rank-1 ${pct(r1.rate, 1)}; an LFW distractor was the top hit for ${r1.lfwTopHits}`,
    );
    for (const x of r1.misses) console.log(`    miss: ${x.query} (${x.person}) → ${x.top} ${x.score.toFixed(4)}; best same-person ${x.sameScore.toFixed(4)}`);
    report.dev = { faces: faces.people.length, missed: faces.missed, verification: stats, rank1: r1 };
  }

  // 6. Photo-level mirror averaging (photo + mirrored photo), for one mode without crop mirroring.
  if (ctx.photoMirror === mode.spec) report.photoMirror = await photoMirror(engine, ctx, common, plain, tf, far);
  engine.close();

  const summary: ModeSummary = {
    mode: mode.mode,
    recognizer,
    dim,
    tenFold: { mean: tf.mean, std: tf.std },
    tarAtFar: Object.fromEntries(SUMMARY_FAR.map((f) => [f.toExponential(0), far.find((x) => x.far === f)!.tar])),
    devMedium,
    devRank1,
    photosPerSecond: plain.photosPerSecond,
    msPerPhoto,
    msPerFace,
    engine: plain.engine,
    inFlight: plain.inFlight,
    cached: plain.cached,
    bytesPerFace,
  };
  return { summary, plain, tf, report };
}

async function photoMirror(
  engine: Engine,
  ctx: LfwContext,
  common: Omit<EmbedOptions, 'mirror' | 'cache'>,
  plain: Embedded,
  tf: TenFold,
  far: ReturnType<typeof farRows>,
) {
  const { set, pairs, images, detector } = ctx;
  const { dim } = plain;
  const mirrored = await embedPhotos(engine, images, set.files, { ...common, mirror: true, cache: ctx.cache(detector, common.recognizer, `${ctx.tag}-mirror`) });
  const avg = mirrorAverage(plain, mirrored);
  const mScores = pairScores(avg.emb, avg.found, dim, pairs);
  const mTf = tenFold(mScores, pairs);
  const mOnlyTf = tenFold(pairScores(mirrored.emb, mirrored.found, dim, pairs), pairs);
  const mAp = await allPairs(engine, avg.emb, avg.found, set.person, dim);
  const mFar = farRows(mAp);
  const plainCost = 1 / plain.photosPerSecond;
  const mirrorCost = 1 / mirrored.photosPerSecond;
  console.log(
    `  photo-level mirror averaging (photo + EXIF-mirrored photo, face nearest the centre in each, summed and renormalised): ` +
      `mirrored pass ${mirrored.photosPerSecond.toFixed(1)} photos/s (load ${mirrored.load[0].toFixed(1)} → ${mirrored.load[1].toFixed(1)}), ` +
      `no face on ${set.files.length - [...mirrored.found].filter(Boolean).length} mirrored photos`,
  );
  printTable(
    ['embedding', '10-fold accuracy', ...mFar.map((f) => `TAR@${f.far.toExponential(0)}`), 'ms per photo'],
    [
      ['photo', tenFoldText(tf).split(' (')[0], ...far.map((f) => `${pct(f.tar)} (${f.cosine.toFixed(3)})`), (plainCost * 1000).toFixed(1)],
      ['mirrored only', tenFoldText(mOnlyTf).split(' (')[0], ...FAR_TABLE.map(() => ''), (mirrorCost * 1000).toFixed(1)],
      ['photo + mirrored', tenFoldText(mTf).split(' (')[0], ...mFar.map((f) => `${pct(f.tar)} (${f.cosine.toFixed(3)})`), ((plainCost + mirrorCost) * 1000).toFixed(1)],
    ],
  );
  return {
    recognizer: common.recognizer,
    method: 'EXIF orientation 2 put in front of the JPEG data, so the engine decodes the photo mirrored',
    photosPerSecond: { photo: plain.photosPerSecond, mirrored: mirrored.photosPerSecond, both: 1 / (plainCost + mirrorCost) },
    timeFactor: (plainCost + mirrorCost) / plainCost,
    noFaceMirrored: set.files.length - [...mirrored.found].filter(Boolean).length,
    tenFold: { photo: tf, mirroredOnly: mOnlyTf, average: mTf },
    atFar: { photo: far, average: mFar },
  };
}

/** The modes of --modes, resolved; unavailable ones are an error when named, skipped (and said) in the default list. */
function lfwModes(modelDir: string): { modes: RecognizerMode[]; skipped: RecognizerMode[] } {
  const given = arg('modes');
  const names = (given ?? DEFAULT_MODES.join(',')).split(',').map((s) => s.trim()).filter(Boolean);
  const resolved: RecognizerMode[] = [];
  for (const name of names) {
    const m = resolveRecognizerMode(modelDir, name);
    if (resolved.some((r) => r.spec === m.spec)) continue;
    resolved.push(m);
  }
  const skipped = resolved.filter((m) => m.unavailable);
  if (given && skipped.length) throw new Error(`--modes: ${skipped.map((m) => `${m.mode}: ${m.unavailable}`).join('; ')}`);
  return { modes: resolved.filter((m) => !m.unavailable), skipped };
}

async function lfwSection(config: ReturnType<typeof loadConfig>, root: string, dir: string) {
  const full = loadLfw(dir);
  const limit = numberArg('lfw-limit', 0);
  const set = limit > 0 ? limitPeople(full, limit) : full;
  const pairs = loadPairs(set);
  const manifest = JSON.parse(readFileSync(path.join(config.modelDir, 'manifest.json'), 'utf8')) as Manifest;
  const detector = config.detector ?? manifest.defaults.detector;
  const shape = { inferenceWorkers: numberArg('workers', 2), intraThreads: numberArg('intra', 1) };
  const inFlight = numberArg('inflight', 8);
  const { modes, skipped } = lfwModes(config.modelDir);
  const report: Record<string, unknown> = {};
  const folds = new Set(pairs.map((p) => p.fold)).size;
  console.log(
    `\nLFW (${dir}): ${set.files.length} photos of ${set.names.length} people` +
      `${set.limited ? ` (--lfw-limit ${limit}: the first ${limit} people of ${full.names.length}, a smoke test; numbers are not LFW's)` : ''}; ` +
      `${pairs.length} pairs in ${folds} folds (${pairs.filter((p) => p.same).length} same, ${pairs.filter((p) => !p.same).length} different)`,
  );
  report.dataset = { dir, photos: set.files.length, people: set.names.length, pairs: pairs.length, folds, ...(set.limited ? { limitPeople: limit } : {}) };
  console.log(`modes: ${modes.map((m) => (m.spec === m.mode ? m.mode : `${m.mode} (${m.spec})`)).join(', ')}`);
  for (const m of skipped) console.log(`  skipped ${m.mode}${m.spec !== m.mode ? ` (${m.spec})` : ''}: ${m.unavailable}`);
  report.modesSkipped = skipped.map((m) => ({ mode: m.mode, spec: m.spec, why: m.unavailable }));
  if (!modes.length) throw new Error('no recogniser mode to measure');

  // The dev set, and the LFW folders of its people, left out of the rank-1 distractors.
  const devDir = arg('testdata') ?? path.resolve(root, '../shared/testdata/faces');
  const labels = loadLabels(devDir);
  const dev = labels ? { dir: devDir, labels } : undefined;
  const excludedPeople = new Set<number>();
  if (dev) {
    const devPeople = [...new Set(dev.labels.flatMap((l) => l.identities))].sort();
    const foldersOf = lfwFolders(set);
    const without: string[] = [];
    for (const who of devPeople) {
      const found = foldersOf(who);
      if (!found.length) without.push(who);
      for (const p of found) excludedPeople.add(p);
    }
    const left = [...excludedPeople].map((p) => ({ folder: set.names[p], photos: set.person.filter((x) => x === p).length }));
    console.log(
      `dev set ${devDir}: ${devPeople.length} people; LFW folders left out of the rank-1 distractors: ` +
        `${left.length ? left.map((l) => `${l.folder} (${l.photos} photos)`).join(', ') : 'none'}, ${left.reduce((a, b) => a + b.photos, 0)} photos; ` +
        `no LFW folder for ${without.join(', ') || 'nobody'}`,
    );
    report.devExcludedFromDistractors = left;
  } else {
    console.log(`no labelled dev set at ${devDir}: dev-set verification and rank-1 skipped`);
  }

  // Photo-level mirroring is redundant beside a mode that mirrors the crop.
  const mirrorModes = modes.filter((m) => m.spec.includes(':mirror'));
  let photoMirrorMode: string | undefined;
  if (!flag('no-mirror')) {
    const candidate = modes.find((m) => !m.spec.includes(':mirror'))?.spec;
    if (mirrorModes.length && !flag('photo-mirror')) {
      console.log(
        `photo-level mirror averaging skipped: ${mirrorModes.map((m) => m.mode).join(', ')} mirror${mirrorModes.length === 1 ? 's' : ''} the crop in the engine ` +
          `(--photo-mirror runs the photo-level comparison anyway${candidate ? `, on ${candidate}` : ''})`,
      );
    } else if (candidate) {
      photoMirrorMode = candidate;
    } else {
      console.log('photo-level mirror averaging skipped: every mode mirrors the crop already');
    }
  }

  const ctx: LfwContext = {
    config,
    set,
    pairs,
    images: path.join(dir, 'images'),
    detector,
    shape,
    inFlight,
    settings: { minFace: config.minFace, detectThreshold: config.detectThreshold ?? null },
    force: flag('recompute'),
    cache: (det, rec, tag) => path.join(root, '.bench-out', `lfw-${det}+${specFileName(rec)}-${tag}`),
    tag: set.limited ? `first${limit}people` : 'all',
    log: (line) => console.log(line),
    dev,
    excludedPeople,
    photoMirror: photoMirrorMode,
  };

  const results: Awaited<ReturnType<typeof lfwMode>>[] = [];
  const perMode: Record<string, unknown> = {};
  for (const mode of modes) {
    const r = await lfwMode(ctx, mode);
    results.push(r);
    perMode[r.summary.recognizer] = { ...r.report, summary: r.summary };
  }
  report.modes = perMode;

  // 7. The old pipeline on the photos of the pairs.
  const has = (id: string) => {
    const m = manifest.models.find((x) => x.id === id);
    return !!m && existsSync(path.join(config.modelDir, m.onnx));
  };
  if (!flag('no-old') && has('blazeface-back') && has('faceres')) {
    const oldDet = 'blazeface-back';
    const oldRec = 'faceres';
    const used = [...new Set(pairs.flatMap((p) => [p.a, p.b]))].sort((a, b) => a - b);
    const row = new Map(used.map((f, r) => [f, r]));
    console.log(`\nold pipeline ${oldDet} + ${oldRec} on the ${used.length} photos of the pairs (all ${folds} folds)`);
    const old = await openEngine(engineOptionsFrom(config, { ...shape, detector: oldDet, recognizer: oldRec }));
    const emb = await embedPhotos(
      old,
      ctx.images,
      used.map((f) => set.files[f]),
      {
        detector: oldDet,
        recognizer: oldRec,
        models: modelHashes(config.modelDir, [oldDet, oldRec]),
        settings: ctx.settings,
        inFlight,
        engine: shape,
        force: ctx.force,
        log: ctx.log,
        mirror: false,
        cache: ctx.cache(oldDet, oldRec, set.limited ? `pairs-first${limit}people` : 'pairs'),
      },
    );
    old.close();
    const oScores = pairScores(emb.emb, emb.found, emb.dim, pairs, (f) => row.get(f)!);
    const oTf = tenFold(oScores, pairs);
    const oNoFace = [...emb.found].filter((x) => !x).length;
    console.log(
      `  ${oldDet} + ${oldRec}: 10-fold accuracy ${tenFoldText(oTf)}; ${emb.photosPerSecond.toFixed(1)} photos/s; ` +
        `no face on ${oNoFace} photos (${oTf.noFacePairs} pairs)`,
    );
    printTable(
      ['pipeline', 'dim', '10-fold accuracy', 'no-face photos (pairs)', 'photos/s'],
      [
        ...results.map((r) => [
          `${detector} + ${r.summary.recognizer}`,
          r.summary.dim,
          tenFoldText(r.tf).split(' (')[0],
          `${[...r.plain.found].filter((x) => !x).length} (${r.tf.noFacePairs})`,
          r.plain.photosPerSecond.toFixed(1),
        ]),
        [`${oldDet} + ${oldRec}`, emb.dim, tenFoldText(oTf).split(' (')[0], `${oNoFace} (${oTf.noFacePairs})`, emb.photosPerSecond.toFixed(1)],
      ],
    );
    report.oldPipeline = { detector: oldDet, recognizer: oldRec, photos: used.length, photosPerSecond: emb.photosPerSecond, noFace: oNoFace, tenFold: oTf };
  } else if (!flag('no-old')) {
    console.log('\nold pipeline skipped: blazeface-back or faceres is not in the manifest or not converted (npm run models -- --all)');
  }

  // 8. One row per mode.
  const summaries = results.map((r) => r.summary);
  const shapes = [...new Set(summaries.map((s) => `${s.engine.inferenceWorkers}x${s.engine.intraThreads}`))];
  console.log(
    `\nsummary (${detector}; LFW${set.limited ? ` limited to ${set.names.length} people` : ''}: ${set.files.length} photos, ${pairs.length} pairs; ` +
      `TAR over every impostor pair; dev set: medium preset, rank-1 among the LFW distractors; ` +
      `ms/photo: engine wall time per LFW photo, detection included, workers x intra ${shapes.join(', ')}` +
      `${summaries.some((s) => s.cached) ? ', from the cached pass where cached' : ''}; bytes/face: PostgreSQL float32 / scan index)`,
  );
  printTable(
    ['mode', 'dim', 'LFW 10-fold', ...SUMMARY_FAR.map((f) => `TAR@${f.toExponential(0)}`), 'dev medium TAR / FA', 'dev rank-1', 'ms/photo', 'bytes/face'],
    summaries.map((s) => [
      s.recognizer === s.mode ? s.mode : `${s.mode} (${s.recognizer})`,
      s.dim,
      `${pct(s.tenFold.mean)} ± ${pct(s.tenFold.std)}`,
      ...SUMMARY_FAR.map((f) => pct(s.tarAtFar[f.toExponential(0)])),
      s.devMedium ? `${pct(s.devMedium.tar, 1)} / ${s.devMedium.falseAccepts}${s.devMedium.calibration === 'measured' ? ' (measured cal.)' : ''}` : 'n/a',
      s.devRank1 ? `${s.devRank1.hits}/${s.devRank1.queries} = ${pct(s.devRank1.rate, 1)} among ${s.devRank1.distractors}` : 'n/a',
      `${s.msPerPhoto.toFixed(1)} (${s.engine.inferenceWorkers}x${s.engine.intraThreads})`,
      `${s.bytesPerFace.database} / ${s.bytesPerFace.scanIndex}`,
    ]),
  );
  report.summary = summaries;
  return report;
}

async function main() {
  const root = findProjectRoot();
  const config = loadConfig();
  const lfwDir = arg('lfw') ?? path.resolve(root, '../shared/testdata/lfw');
  const withLfw = !flag('no-lfw');
  if (withLfw) {
    const missing = lfwMissing(lfwDir);
    if (missing.length) {
      console.error(
        `LFW is missing: ${missing.join(' and ')} not found.\n` +
          'The LFW part (10-fold accuracy, TAR at FAR 1e-1..1e-6, the calibration in src/services/calibration.ts) needs the ' +
          'deep-funneled LFW images and the fold-numbered pairs.txt (see ../shared/testdata/lfw/README.md). ' +
          'Point --lfw DIR at it, or pass --no-lfw for the labelled-photo parts only.',
      );
      process.exit(2);
    }
  }
  const report: Record<string, unknown> = {};
  if (!flag('lfw-only')) Object.assign(report, await labelledSection(config, root));
  if (withLfw) report.lfw = await lfwSection(config, root, lfwDir);
  const out = arg('json');
  if (out) writeFileSync(out, JSON.stringify(report, null, 2));
}

async function labelledSection(config: ReturnType<typeof loadConfig>, root: string) {
  const dir = arg('testdata') ?? path.resolve(root, '../shared/testdata/faces');
  const labels = loadLabels(dir) ?? [];
  const haveData = labels.length > 0;
  if (!haveData) console.log(`no labelled photos at ${dir}: detection on the demo photos only`);
  const manifest = JSON.parse(readFileSync(path.join(config.modelDir, 'manifest.json'), 'utf8')) as {
    models: { id: string; role: string }[];
  };
  const named = arg('recognizers')?.split(',') ?? manifest.models.filter((m) => m.role === 'recognizer').map((m) => m.id);
  const recognizers: string[] = [];
  for (const id of named) {
    const m = resolveRecognizerMode(config.modelDir, id);
    if (m.unavailable) console.log(`verification: ${id} skipped: ${m.unavailable}`);
    else recognizers.push(id);
  }
  const report: Record<string, unknown> = {};

  const engine = await openEngine(engineOptionsFrom(config));
  const det = await detection(engine, root, haveData ? dir : undefined, labels);
  const wrong = det.filter((r) => !r.ok);
  report.detection = { photos: det.length, correct: det.length - wrong.length, wrong };
  console.log(`detection: ${det.length - wrong.length}/${det.length} photos with the labelled face count`);
  for (const r of wrong) console.log(`  ${r.file}: expected ${r.expected}, found ${r.found}`);
  if (haveData) {
    report.attributes = await attributes(engine, dir, labels);
    console.log('attributes:', JSON.stringify(report.attributes));
  }
  engine.close();

  if (haveData) {
    const verification: Record<string, unknown> = {};
    for (const id of recognizers) {
      const e = await openEngine(engineOptionsFrom(config, { recognizer: id }));
      const stats = await embeddings(e, dir, labels);
      e.close();
      verification[id] = stats;
      console.log(
        `${id}: ${stats.faces} faces of ${stats.identities} people (${stats.missed} missed); ` +
          `${stats.genuinePairs} genuine / ${stats.impostorPairs} impostor pairs; ` +
          `best accuracy ${(stats.bestAccuracy * 100).toFixed(2)}% at cosine ${stats.bestThreshold.toFixed(4)}; ` +
          `EER ${(stats.eer * 100).toFixed(2)}%`,
      );
      console.log(`  logistic confidence: slope ${stats.logistic.slope.toFixed(3)}, center ${stats.logistic.center.toFixed(4)}`);
      if (stats.medium) {
        const m = stats.medium;
        console.log(
          `  medium preset (confidence >= ${m.threshold}): accuracy ${pct(m.accuracy)} on the ${stats.genuinePairs + stats.impostorPairs} pairs, ` +
            `TAR ${pct(m.tar, 1)} (${m.falseRejects} false rejects), FAR ${pct(m.far)} (${m.falseAccepts} false accepts)`,
        );
      }
      for (const f of stats.atFar) {
        console.log(
          `  FAR ${f.far}: cosine ${f.threshold.toFixed(4)} (empirical ${f.empirical?.toFixed(4) ?? 'n/a'}, gaussian ${f.gaussian.toFixed(4)}), TAR ${(f.tar * 100).toFixed(1)}%`,
        );
      }
    }
    report.verification = verification;
  }
  return report;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
