/**
 * Age and gender per model on the labelled photos, side by side, and the
 * emotion model's top-1: the numbers behind the manifest's `age` and `gender`
 * defaults.
 *
 *   node dist/bench/engine/attributes.js [--testdata DIR] [--models faceres,cydral-age+cydral-gender]
 *       [--rounds 5] [--json FILE] [--verbose]
 *
 * - each entry of `--models` is one engine: `a+b` takes age from model `a`
 *   and gender from model `b`, a single id both (default: faceres' heads and
 *   Cydral's dlib networks, plus GEAR when `npm run models -- --all` has
 *   converted it);
 * - gender accuracy over every photo with a gender label, age mean and
 *   median absolute error (and the mean signed error: positive is too old)
 *   over every photo with an age (the UTKFace chips), each on the biggest
 *   face found; a photo where no face is found counts as wrong and is listed;
 * - time per face: each age/gender photo analysed with and without age and
 *   gender, the fastest of `--rounds` runs of each, (sum with - sum without)
 *   / faces, on one inference worker with one ONNX Runtime thread, one photo
 *   at a time (so batch 1); it includes cutting the crops;
 * - paired: on how many faces each model's age is nearer the label than the
 *   first model's (ties apart), since 48 faces leave wide error bars;
 * - emotion top-1 on the emotion-labelled photos, with the default engine.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import { engineOptionsFrom, openEngine, type AnalyzeOptions, type Engine } from '../../src/native/engine.js';
import { numberArg, optionArg as arg } from '../lib/args.js';

interface Label {
  file: string;
  attributes?: { age?: number; gender?: string; emotion?: string };
}

interface Candidate {
  name: string;
  ageModel: string;
  genderModel: string;
}

interface PhotoResult {
  file: string;
  age?: number;
  gender?: string;
  wantAge?: number;
  wantGender?: string;
}

const NONE: AnalyzeOptions = { embed: false, age: false, gender: false, emotions: false };
const AGE_GENDER: AnalyzeOptions = { embed: false, age: true, gender: true, emotions: false };
/** face-api.js' file names for the FER labels. */
const EMOTION_NAMES: Record<string, string> = { disgusted: 'disgust', fearful: 'fear', surprised: 'surprise' };

function candidates(spec: string): Candidate[] {
  return spec.split(',').map((entry) => {
    const [ageModel, genderModel = ageModel] = entry.split('+');
    return { name: entry, ageModel, genderModel };
  });
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length === 0 ? NaN : s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function accuracy(engine: Engine, dir: string, labels: Label[]): Promise<PhotoResult[]> {
  const rows: PhotoResult[] = [];
  for (const l of labels) {
    const a = await engine.analyze(readFileSync(path.join(dir, l.file)), AGE_GENDER);
    const face = a.faces[0];
    rows.push({ file: l.file, age: face?.age, gender: face?.gender, wantAge: l.attributes?.age, wantGender: l.attributes?.gender });
  }
  return rows;
}

/** Milliseconds of age + gender per face: fastest of `rounds` with and without, summed over the photos. */
async function timePerFace(engine: Engine, dir: string, labels: Label[], rounds: number): Promise<number> {
  let extra = 0;
  let faces = 0;
  for (const l of labels) {
    const bytes = readFileSync(path.join(dir, l.file));
    const best = { with: Infinity, without: Infinity };
    let n = 0;
    for (let r = 0; r < rounds; r++) {
      // Interleaved, so load from elsewhere on the machine hits both alike.
      let t = performance.now();
      await engine.analyze(bytes, NONE);
      best.without = Math.min(best.without, performance.now() - t);
      t = performance.now();
      n = (await engine.analyze(bytes, AGE_GENDER)).faces.length;
      best.with = Math.min(best.with, performance.now() - t);
    }
    extra += best.with - best.without;
    faces += n;
  }
  return extra / Math.max(1, faces);
}

function summarise(rows: PhotoResult[]) {
  const gendered = rows.filter((r) => r.wantGender !== undefined);
  const aged = rows.filter((r) => r.wantAge !== undefined);
  const errors = aged.filter((r) => r.age !== undefined).map((r) => r.age! - r.wantAge!);
  return {
    genderAccuracy: gendered.filter((r) => r.gender === r.wantGender).length / Math.max(1, gendered.length),
    genderN: gendered.length,
    ageMae: mean(errors.map(Math.abs)),
    ageMedianAe: median(errors.map(Math.abs)),
    ageBias: mean(errors),
    ageN: errors.length,
    noFace: rows.filter((r) => r.age === undefined && r.gender === undefined).map((r) => r.file),
  };
}

async function emotions(engine: Engine, dir: string, labels: Label[]) {
  const rows = [];
  for (const l of labels) {
    const a = await engine.analyze(readFileSync(path.join(dir, l.file)), { ...NONE, emotions: true });
    const want = EMOTION_NAMES[l.attributes!.emotion!] ?? l.attributes!.emotion!;
    rows.push({ file: l.file, want, got: a.faces[0]?.emotions?.[0] ?? '(no face)' });
  }
  return { top1: rows.filter((r) => r.got === r.want).length, n: rows.length, rows };
}

async function main() {
  const root = findProjectRoot();
  const config = loadConfig();
  const dir = arg('testdata') ?? path.resolve(root, '../shared/testdata/faces');
  if (!existsSync(path.join(dir, 'labels.json'))) {
    console.log(`no labelled photos at ${dir} (labels.json with attributes.age, attributes.gender, attributes.emotion): nothing to measure`);
    process.exit(1);
  }
  const labels = JSON.parse(readFileSync(path.join(dir, 'labels.json'), 'utf8')) as Label[];
  const ageGender = labels.filter((l) => l.attributes?.age !== undefined || l.attributes?.gender !== undefined);
  const timed = labels.filter((l) => l.attributes?.age !== undefined);
  const emotionLabelled = labels.filter((l) => l.attributes?.emotion !== undefined);
  const manifest = JSON.parse(readFileSync(path.join(config.modelDir, 'manifest.json'), 'utf8')) as { models: { id: string; onnx: string }[] };
  const converted = (id: string) => existsSync(path.join(config.modelDir, manifest.models.find((m) => m.id === id)?.onnx ?? '-'));
  // faceres and gear are optional models (`npm run models -- --all`): compared when converted.
  const optional = ['faceres', 'gear'].filter((id) => !converted(id));
  if (optional.length && !arg('models')) console.log(`${optional.join(', ')}: left out, not converted (npm run models -- --all converts them)`);
  const fallback = [...(converted('faceres') ? ['faceres'] : []), 'cydral-age+cydral-gender', ...(converted('gear') ? ['gear'] : [])].join(',');
  const chosen = candidates(arg('models') ?? fallback);
  const rounds = numberArg('rounds', 5);
  const verbose = process.argv.includes('--verbose');

  const report: Record<string, unknown> = { testdata: dir, rounds, models: {} };
  const perModel: Record<string, PhotoResult[]> = {};
  for (const c of chosen) {
    const engine = await openEngine(
      engineOptionsFrom(config, { ageModel: c.ageModel, genderModel: c.genderModel, inferenceWorkers: 1, intraThreads: 1 }),
    );
    const rows = await accuracy(engine, dir, ageGender);
    const msPerFace = await timePerFace(engine, dir, timed, rounds);
    engine.close();
    perModel[c.name] = rows;
    const s = { ...summarise(rows), msPerFace };
    (report.models as Record<string, unknown>)[c.name] = { ...s, photos: rows };
    console.log(
      `${c.name.padEnd(26)} gender ${(100 * s.genderAccuracy).toFixed(1)}% (n=${s.genderN})  ` +
        `age MAE ${s.ageMae.toFixed(2)}, median ${s.ageMedianAe.toFixed(1)}, bias ${s.ageBias >= 0 ? '+' : ''}${s.ageBias.toFixed(2)} (n=${s.ageN})  ` +
        `${msPerFace.toFixed(2)} ms/face` +
        (s.noFace.length ? `  no face: ${s.noFace.join(', ')}` : ''),
    );
    if (verbose) {
      for (const r of rows) console.log(`  ${r.file}: age ${r.age ?? '-'} (${r.wantAge ?? '-'}), gender ${r.gender ?? '-'} (${r.wantGender ?? '-'})`);
    }
  }

  // Paired against the first model: the same faces, so a model's edge shows beyond the noise of
  // which faces happen to be in the set.
  const [first, ...others] = chosen.map((c) => c.name);
  const paired: Record<string, unknown> = {};
  for (const other of others) {
    let nearer = 0;
    let farther = 0;
    let genderFixed = 0;
    let genderBroken = 0;
    perModel[other].forEach((r, i) => {
      const base = perModel[first][i];
      if (r.wantAge !== undefined && r.age !== undefined && base.age !== undefined) {
        const [d, b] = [Math.abs(r.age - r.wantAge), Math.abs(base.age - r.wantAge)];
        if (d < b) nearer++;
        else if (d > b) farther++;
      }
      if (r.wantGender !== undefined) {
        const [ok, baseOk] = [r.gender === r.wantGender, base.gender === r.wantGender];
        if (ok && !baseOk) genderFixed++;
        if (!ok && baseOk) genderBroken++;
      }
    });
    paired[other] = { versus: first, ageNearer: nearer, ageFarther: farther, genderRightWhereFirstWrong: genderFixed, genderWrongWhereFirstRight: genderBroken };
    console.log(
      `${other} vs ${first}: age nearer on ${nearer} faces, farther on ${farther}; gender right where ${first} is wrong on ${genderFixed}, wrong where it is right on ${genderBroken}`,
    );
  }
  report.paired = paired;

  const engine = await openEngine(engineOptionsFrom(config, { inferenceWorkers: 1, intraThreads: 1 }));
  const emo = await emotions(engine, dir, emotionLabelled);
  engine.close();
  report.emotion = emo;
  console.log(`emotion top-1: ${emo.top1} of ${emo.n}`);
  for (const r of emo.rows) console.log(`  ${r.file}: ${r.got}${r.got === r.want ? '' : ` (labelled ${r.want})`}`);

  const json = arg('json') ?? path.join(root, '.bench-out', 'attributes.json');
  mkdirSync(path.dirname(json), { recursive: true });
  writeFileSync(json, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`written ${path.relative(root, json)}`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
