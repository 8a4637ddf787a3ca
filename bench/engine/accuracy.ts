/**
 * Accuracy of the model pack on labelled photos and on LFW, the numbers behind
 * the detector choice, the recogniser choice and the threshold calibration:
 *
 *   node dist/bench/engine/accuracy.js [--testdata DIR] [--recognizers a,b] [--json FILE]
 *       [--lfw DIR | --no-lfw] [--lfw-only] [--recompute] [--no-mirror] [--no-old]
 *       [--inflight 8] [--workers 2] [--intra 1]
 *
 * - detection: faces found against the labelled count on every photo, and on
 *   the six demo group photos (3,3,3,4,5,4);
 * - verification on the labelled photos, per recogniser: every same-identity
 *   pair is genuine, every cross-identity pair an impostor; best accuracy and
 *   its threshold, equal error rate, the cosine at the false-accept rates
 *   behind the presets (empirical where the impostor count allows, Gaussian
 *   tail otherwise), and the verdicts of the calibrated `medium` preset;
 * - attributes: age error and gender accuracy on the age-labelled chips,
 *   emotion top-1 on the emotion photos;
 * - LFW (../shared/testdata/lfw, see bench/lib/lfw.ts), with the default
 *   detector and recogniser: every photo embedded (face nearest the centre;
 *   2 inference workers x 1 intra thread, 8 analyses in flight, cached under
 *   .bench-out/), the standard 10-fold accuracy of pairs.txt, TAR at FAR
 *   1e-1..1e-6 over every impostor pair across people, the logistic fit and
 *   presets that go into src/services/calibration.ts, the presets' verdicts
 *   on the pairs; then mirror averaging (photo + mirrored photo) against the
 *   photo alone, and the old pipeline (blazeface-back + faceres) on the pair
 *   photos. `--no-lfw` skips LFW; without the folder the command stops and
 *   says what is missing.
 */
import { readFileSync, existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot, loadConfig } from '../../src/config.js';
import { engineOptionsFrom, openEngine, type Engine } from '../../src/native/engine.js';
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
  loadLfw,
  loadPairs,
  mirrorAverage,
  modelHashes,
  pairScores,
  tarAt,
  tenFold,
  type AllPairs,
  type Embedded,
  type LfwPair,
  type TenFold,
} from '../lib/lfw.js';

const flag = (name: string) => process.argv.includes(`--${name}`);

interface Label {
  file: string;
  identities: string[];
  faces: number | null;
  faces_min?: number;
  attributes?: { age?: number; gender?: string; emotion?: string };
}

const DEMO_COUNTS = [3, 3, 3, 4, 5, 4];
const FAR_TARGETS = [1e-1, 1e-3, 1e-5];

/** Inverse of the standard normal upper tail, for the FAR targets we use (bisection is plenty). */
function upperTailZ(p: number): number {
  const tail = (z: number) => 0.5 * erfc(z / Math.SQRT2);
  let lo = 0;
  let hi = 10;
  for (let i = 0; i < 100; i++) {
    const mid = (lo + hi) / 2;
    if (tail(mid) > p) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

function erfc(x: number): number {
  // Numerical Recipes' Chebyshev fit, relative error below 1.2e-7.
  const z = Math.abs(x);
  const t = 1 / (1 + 0.5 * z);
  const r =
    t *
    Math.exp(
      -z * z -
        1.26551223 +
        t *
          (1.00002368 +
            t *
              (0.37409196 +
                t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))),
    );
  return x >= 0 ? r : 2 - r;
}

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

async function embeddings(engine: Engine, dir: string, labels: Label[]) {
  const people: string[] = [];
  const rows: Float32Array[] = [];
  let dim = 0;
  let missed = 0;
  for (const l of labels) {
    if (l.identities.length !== 1 || l.faces !== 1) continue;
    const a = await engine.analyze(readFileSync(path.join(dir, l.file)), { embed: true, age: false, gender: false, emotions: false });
    if (a.faces.length === 0) {
      missed++;
      continue;
    }
    dim = a.dim;
    rows.push(a.embeddings.slice(0, a.dim));
    people.push(l.identities[0]);
  }
  const all = new Float32Array(rows.length * dim);
  rows.forEach((r, i) => all.set(r, i * dim));
  const sim = await engine.similarity(all, all, dim);
  const pairs: Pairs = { genuine: [], impostor: [] };
  for (let i = 0; i < people.length; i++) {
    for (let j = i + 1; j < people.length; j++) {
      (people[i] === people[j] ? pairs.genuine : pairs.impostor).push(sim[i * people.length + j]);
    }
  }
  const calibration = CALIBRATIONS[engine.info().recognizer];
  const medium = calibration ? presetVerdicts(pairs, calibration, 'medium') : undefined;
  return { faces: people.length, missed, identities: new Set(people).size, ...verificationStats(pairs), medium };
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

async function lfwSection(config: ReturnType<typeof loadConfig>, root: string, dir: string) {
  const set = loadLfw(dir);
  const pairs = loadPairs(set);
  const manifest = JSON.parse(readFileSync(path.join(config.modelDir, 'manifest.json'), 'utf8')) as Manifest;
  const detector = config.detector ?? manifest.defaults.detector;
  const recognizer = config.recognizer ?? manifest.defaults.recognizer;
  const shape = { inferenceWorkers: numberArg('workers', 2), intraThreads: numberArg('intra', 1) };
  const inFlight = numberArg('inflight', 8);
  const settings = { minFace: config.minFace, detectThreshold: config.detectThreshold ?? null };
  const force = flag('recompute');
  const images = path.join(dir, 'images');
  const cache = (det: string, rec: string, tag: string) => path.join(root, '.bench-out', `lfw-${det}+${rec}-${tag}`);
  const log = (line: string) => console.log(line);
  const report: Record<string, unknown> = {};
  const folds = new Set(pairs.map((p) => p.fold)).size;
  console.log(
    `\nLFW (${dir}): ${set.files.length} photos of ${set.names.length} people; ${pairs.length} pairs in ${folds} folds ` +
      `(${pairs.filter((p) => p.same).length} same, ${pairs.filter((p) => !p.same).length} different)`,
  );
  report.dataset = { dir, photos: set.files.length, people: set.names.length, pairs: pairs.length, folds };

  // 1. Every photo, default pipeline.
  console.log(`${detector} + ${recognizer}: ${shape.inferenceWorkers} inference workers x ${shape.intraThreads} intra threads, ${inFlight} analyses in flight`);
  const engine = await openEngine(engineOptionsFrom(config, { ...shape, detector, recognizer }));
  const models = modelHashes(config.modelDir, [detector, recognizer]);
  const common = { detector, recognizer, models, settings, inFlight, engine: shape, force, log };
  const plain = await embedPhotos(engine, images, set.files, { ...common, mirror: false, cache: cache(detector, recognizer, 'all') });
  const dim = plain.dim;
  const noFace = set.files.filter((_, i) => !plain.found[i]);
  const multi = [...plain.faces].filter((n) => n > 1).length;
  console.log(
    `  embedded ${set.files.length} photos in ${plain.seconds.toFixed(0)} s: ${plain.photosPerSecond.toFixed(1)} photos/s ` +
      `(load average ${plain.load[0].toFixed(1)} → ${plain.load[1].toFixed(1)}${plain.cached ? ', from the cache' : ''}); ` +
      `no face on ${noFace.length}; more than one face on ${multi}, the centred one not the biggest on ${plain.notBiggest}`,
  );
  if (noFace.length) console.log(`  no face: ${noFace.slice(0, 20).join(', ')}${noFace.length > 20 ? ', …' : ''}`);
  report.embedding = {
    detector,
    recognizer,
    dim,
    engine: shape,
    inFlight,
    seconds: plain.seconds,
    photosPerSecond: plain.photosPerSecond,
    loadAverage: plain.load,
    noFace,
    multiFace: multi,
    centredNotBiggest: plain.notBiggest,
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
      : `  src/services/calibration.ts differs for ${recognizer}: measured ${JSON.stringify(measured)}, file ${JSON.stringify(current ?? null)}`,
  );
  report.calibration = { measured, file: current ?? null, fileMatches: !!same, logistic: fit };

  // The service's own presets (the file's numbers) on every pair and on the LFW pairs.
  if (current) {
    const presets = thresholdPresets(current);
    const rows: { name: string; target: string; confidence: number }[] = [
      { name: 'strict', target: '1e-5', confidence: presets.strict },
      { name: 'medium', target: '1e-3', confidence: presets.medium },
      { name: 'low', target: '1e-1', confidence: presets.low },
      { name: `default ${DEFAULT_THRESHOLD}`, target: '', confidence: DEFAULT_THRESHOLD },
    ];
    const presetReport = rows.map((r) => {
      const cosine = cosineAtConfidence(current, r.confidence);
      const v = pairVerdicts(scores, pairs, current, r.confidence);
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
    console.log(`  presets of src/services/calibration.ts (${recognizer}): every pair, and the ${pairs.length} pairs.txt pairs at the fixed threshold`);
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
    report.presets = presetReport;
  }

  // 5. Mirror averaging.
  if (!flag('no-mirror')) {
    const mirrored = await embedPhotos(engine, images, set.files, { ...common, mirror: true, cache: cache(detector, recognizer, 'all-mirror') });
    const avg = mirrorAverage(plain, mirrored);
    const mScores = pairScores(avg.emb, avg.found, dim, pairs);
    const mTf = tenFold(mScores, pairs);
    const mOnlyTf = tenFold(pairScores(mirrored.emb, mirrored.found, dim, pairs), pairs);
    const mAp = await allPairs(engine, avg.emb, avg.found, set.person, dim);
    const mFar = farRows(mAp);
    const plainCost = 1 / plain.photosPerSecond;
    const mirrorCost = 1 / mirrored.photosPerSecond;
    console.log(
      `  mirror averaging (photo + EXIF-mirrored photo, face nearest the centre in each, summed and renormalised): ` +
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
    report.mirror = {
      method: 'EXIF orientation 2 put in front of the JPEG data, so the engine decodes the photo mirrored',
      photosPerSecond: { photo: plain.photosPerSecond, mirrored: mirrored.photosPerSecond, both: 1 / (plainCost + mirrorCost) },
      timeFactor: (plainCost + mirrorCost) / plainCost,
      noFaceMirrored: set.files.length - [...mirrored.found].filter(Boolean).length,
      tenFold: { photo: tf, mirroredOnly: mOnlyTf, average: mTf },
      atFar: { photo: far, average: mFar },
    };
  }
  engine.close();

  // 6. The old pipeline on the photos of the pairs.
  const has = (id: string) => manifest.models.some((m) => m.id === id);
  if (!flag('no-old') && has('blazeface-back') && has('faceres')) {
    const oldDet = 'blazeface-back';
    const oldRec = 'faceres';
    const used = [...new Set(pairs.flatMap((p) => [p.a, p.b]))].sort((a, b) => a - b);
    const row = new Map(used.map((f, r) => [f, r]));
    console.log(`  old pipeline ${oldDet} + ${oldRec} on the ${used.length} photos of the pairs (all ${folds} folds)`);
    const old = await openEngine(engineOptionsFrom(config, { ...shape, detector: oldDet, recognizer: oldRec }));
    const emb = await embedPhotos(
      old,
      images,
      used.map((f) => set.files[f]),
      { ...common, detector: oldDet, recognizer: oldRec, models: modelHashes(config.modelDir, [oldDet, oldRec]), mirror: false, cache: cache(oldDet, oldRec, 'pairs') },
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
        [`${detector} + ${recognizer}`, dim, tenFoldText(tf).split(' (')[0], `${noFace.length} (${tf.noFacePairs})`, plain.photosPerSecond.toFixed(1)],
        [`${oldDet} + ${oldRec}`, emb.dim, tenFoldText(oTf).split(' (')[0], `${oNoFace} (${oTf.noFacePairs})`, emb.photosPerSecond.toFixed(1)],
      ],
    );
    report.oldPipeline = { detector: oldDet, recognizer: oldRec, photos: used.length, photosPerSecond: emb.photosPerSecond, noFace: oNoFace, tenFold: oTf };
  } else if (!flag('no-old')) {
    console.log('  old pipeline skipped: blazeface-back or faceres is not in the manifest');
  }
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
  const haveData = existsSync(path.join(dir, 'labels.json'));
  const labels: Label[] = haveData ? JSON.parse(readFileSync(path.join(dir, 'labels.json'), 'utf8')) : [];
  if (!haveData) console.log(`no labelled photos at ${dir}: detection on the demo photos only`);
  const manifest = JSON.parse(readFileSync(path.join(config.modelDir, 'manifest.json'), 'utf8')) as {
    models: { id: string; role: string }[];
  };
  const recognizers = arg('recognizers')?.split(',') ?? manifest.models.filter((m) => m.role === 'recognizer').map((m) => m.id);
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
