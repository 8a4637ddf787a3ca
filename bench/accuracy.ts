/**
 * Accuracy of the model pack on labelled photos, the numbers behind the
 * detector choice, the recogniser choice and the threshold calibration:
 *
 *   node dist/bench/accuracy.js [--testdata DIR] [--recognizers a,b] [--json FILE]
 *
 * - detection: faces found against the labelled count on every photo, and on
 *   the six demo group photos (3,3,3,4,5,4);
 * - verification, per recogniser: every same-identity pair is genuine, every
 *   cross-identity pair an impostor; best accuracy and its threshold, equal
 *   error rate, and the cosine at the false-accept rates behind the presets
 *   (empirical where the impostor count allows, Gaussian tail otherwise);
 * - attributes: age error and gender accuracy on the age-labelled chips,
 *   emotion top-1 on the emotion photos.
 */
import { readFileSync, existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot, loadConfig } from '../src/config.js';
import { engineOptionsFrom, openEngine, type Engine } from '../src/native/engine.js';
import { optionArg as arg } from './args.js';

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
 * half), by Newton's method on the two parameters: confidence =
 * 1 / (1 + exp(-slope * (cosine - center))).
 */
function fitLogistic({ genuine, impostor }: Pairs): { slope: number; center: number } {
  const data = [...genuine.map((x) => [x, 1, 0.5 / genuine.length]), ...impostor.map((x) => [x, 0, 0.5 / impostor.length])];
  let w = 10;
  let b = -5;
  for (let iter = 0; iter < 100; iter++) {
    let gw = 0, gb = 0, hww = 0, hwb = 0, hbb = 0;
    for (const [x, y, wt] of data) {
      const p = 1 / (1 + Math.exp(-(w * x + b)));
      const r = wt * (p - y);
      const h = wt * p * (1 - p);
      gw += r * x;
      gb += r;
      hww += h * x * x;
      hwb += h * x;
      hbb += h;
    }
    const det = hww * hbb - hwb * hwb;
    const dw = (hbb * gw - hwb * gb) / det;
    const db = (hww * gb - hwb * gw) / det;
    w -= dw;
    b -= db;
    if (Math.abs(dw) + Math.abs(db) < 1e-10) break;
  }
  return { slope: w, center: -b / w };
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
  return { faces: people.length, missed, identities: new Set(people).size, ...verificationStats(pairs) };
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

async function main() {
  const root = findProjectRoot();
  const config = loadConfig();
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
      for (const f of stats.atFar) {
        console.log(
          `  FAR ${f.far}: cosine ${f.threshold.toFixed(4)} (empirical ${f.empirical?.toFixed(4) ?? 'n/a'}, gaussian ${f.gaussian.toFixed(4)}), TAR ${(f.tar * 100).toFixed(1)}%`,
        );
      }
    }
    report.verification = verification;
  }
  const out = arg('json');
  if (out) writeFileSync(out, JSON.stringify(report, null, 2));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
