/**
 * Open-set identification in the manner of NIST's 1:N evaluations: how often a stranger is
 * named (FPIR) and an enrolled person is missed (FNIR), as the number of enrolled faces N
 * grows. It fits identify's open-set calibration and measures it:
 *
 *   node dist/bench/engine/open-set.js [--lfw DIR] [--testdata DIR] [--mode sface:mirror]
 *       [--strangers 1000] [--sizes 1000,2000,all] [--api] [--api-probes 300] [--json FILE]
 *       [--lfw-limit N]  (the first N people only: a smoke test of the code path, not LFW's numbers)
 *
 * - Embeddings: every LFW photo, the face nearest the centre, through the engine with the
 *   mode's recogniser (cached under .bench-out/ with bench:accuracy's key).
 * - Fit: every impostor and genuine pair of LFW (bench/lib/lfw.ts), the normal of the
 *   impostor upper tail (cosines at per-pair false-accept rates 1e-3 … 1e-5) and of the
 *   genuine lower tail (false-reject rates 2% … 30%): a ready-to-paste OpenSetFit for
 *   src/services/calibration.ts, and the model's false-accept rate beside the counted one.
 * - Protocol: `--strangers` people (seeded draw) are never enrolled: every photo of theirs,
 *   and every single-identity photo of the labelled dev set whose person has no LFW folder,
 *   is a non-mated probe. From the other people, galleries of N (`--sizes`; `all` is every
 *   one of them) are enrolled with one photo each, through the addon's search index as the
 *   service opens it; every other photo of an enrolled person is a mated probe. A mated
 *   probe is named right when its best match is its own person at the threshold.
 * - Reported per N: FNIR at FPIR 10%, 1% and 0.1% (the threshold is the stranger quantile,
 *   so the rates are as fine as the stranger count allows), and FPIR and FNIR at the default
 *   threshold 0.75, before (the 1:1 confidence) and after (identify's 1:N confidence); then
 *   score normalisation against the gallery (the best score minus the k-th best) at equal
 *   FPIR, kept or rejected by its FNIR.
 * - Several photos per person: the people with three or more photos enrolled with one photo
 *   and with two, their later photos as mated probes; FNIR at equal FPIR for the best face
 *   (identify's top match) and for the mean of a person's two scores.
 * - Larger N (1k to 10M) from the measured distributions: a stranger's best of N impostors
 *   passes τ with 1 − (1 − FAR(τ))^N, FAR(τ) counted over all impostor pairs where at least
 *   1,000 reach τ, the impostor tail's normal beyond (MIN_COUNTED says why); a mated probe with mate score s is named
 *   with probability [s ≥ τ]·(1 − FAR(s))^(N−1), averaged over the mated probes of the
 *   largest gallery.
 * - `--api`: through the real service: every LFW photo but the strangers' and one held-out
 *   photo of each person with two or more enrolled with POST /v0/face/ (meta: the person),
 *   then `--api-probes` LFW strangers, the dev-set strangers and `--api-probes` held-out
 *   photos through POST /v0/identify/ at its defaults, counting strangers named and people
 *   named right.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import { openFaceIndex } from '../../src/native/face-index.js';
import {
  CALIBRATIONS,
  DEFAULT_THRESHOLD,
  falsePositiveIdentificationRate,
  identifyConfidence,
  identifyCosine,
  pairFalseAcceptRate,
  toConfidence,
  type Calibration,
  type OpenSetFit,
} from '../../src/services/calibration.js';
import { upperTailZ } from '../../src/services/normal.js';
import { numberArg, optionArg as arg, saveJson } from '../lib/args.js';
import { embedLabelled, lfwFolders, loadLabels } from '../lib/dev-set.js';
import { inParallel } from '../../test/harness/in-parallel.js';
import { allPairs, atFar, embedLfwSet, impostorsAbove, lfwMissing, limitPeople, loadLfw, type AllPairs, type Embedded, type LfwSet } from '../lib/lfw.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { Rng } from '../../test/harness/reliability/outcome.js';
import { resolveRecognizerMode } from '../lib/recognizer-modes.js';
import { startBenchService } from '../../test/harness/load-service.js';

const pct = (x: number, digits = 2) => `${(x * 100).toFixed(digits)}%`;
const round4 = (x: number) => Math.round(x * 1e4) / 1e4;

/** A seeded shuffle, so every run splits LFW the same way. */
function shuffled<T>(xs: T[], rng: Rng): T[] {
  const out = [...xs];
  for (let i = out.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

// ---- the fit ------------------------------------------------------------------------------

/**
 * Where the tails are fitted: the impostor tail over the two decades of per-pair FAR that LFW
 * counts cleanly (at 1e-6 most of the 72 pairs above the threshold are label noise: a photo
 * filed twice, one person under two names, twins), the genuine tail over the false-reject
 * rates whose cosines are where identify decides from a hundred to ten million faces.
 */
const FIT_FAR = [1e-3, 3e-4, 1e-4, 3e-5, 1e-5];
const FIT_FRR = [0.02, 0.05, 0.1, 0.2, 0.3];

/** Least squares of y on x: intercept and slope. */
function line(xs: number[], ys: number[]): { a: number; b: number } {
  const n = xs.length;
  const mx = xs.reduce((s, x) => s + x, 0) / n;
  const my = ys.reduce((s, y) => s + y, 0) / n;
  const sxy = xs.reduce((s, x, i) => s + (x - mx) * (ys[i] - my), 0);
  const sxx = xs.reduce((s, x) => s + (x - mx) ** 2, 0);
  const b = sxy / sxx;
  return { a: my - b * mx, b };
}

/** Normal models of both tails: cosine = mean + sd·z at each rate's z. */
function fitOpenSet(ap: AllPairs): OpenSetFit {
  const imp = FIT_FAR.map((far) => ({ z: upperTailZ(far), cosine: atFar(ap, far).cosine }));
  const i = line(
    imp.map((p) => p.z),
    imp.map((p) => p.cosine),
  );
  const gen = FIT_FRR.map((frr) => ({ z: -upperTailZ(frr), cosine: ap.genuine[Math.floor(frr * ap.genuine.length)] }));
  const g = line(
    gen.map((p) => p.z),
    gen.map((p) => p.cosine),
  );
  return { impostor: { mean: round4(i.a), sd: round4(i.b) }, genuine: { mean: round4(g.a), sd: round4(g.b) } };
}

// ---- the protocol -------------------------------------------------------------------------

interface Probe {
  /** Row in the probe matrix. */
  row: number;
  /** LFW person, or -1 for a dev-set stranger. */
  person: number;
  label: string;
  /** The photo, relative to LFW's images/ or the dev set's folder. */
  file: string;
}

interface Split {
  /** People never enrolled. */
  strangers: Set<number>;
  /** The enrolment order of the others: a gallery of N is the first N. */
  enrolOrder: number[];
  /** Each enrollable person's enrolled photo (file index). */
  enrolledPhoto: Map<number, number>;
}

function split(set: LfwSet, emb: Embedded, strangers: number, seed: number): Split {
  const photos = new Map<number, number[]>();
  set.files.forEach((_, f) => {
    if (!emb.found[f]) return;
    const p = set.person[f];
    photos.set(p, [...(photos.get(p) ?? []), f]);
  });
  const people = shuffled([...photos.keys()].sort((a, b) => a - b), new Rng(seed));
  const out = new Set(people.slice(0, strangers));
  const enrolOrder = people.slice(strangers);
  return { strangers: out, enrolOrder, enrolledPhoto: new Map(enrolOrder.map((p) => [p, photos.get(p)![0]])) };
}

interface Outcome {
  /** Best match: cosine and its person (-1 when none). */
  best: Float32Array;
  bestPerson: Int32Array;
  /** k-th best cosine, for score normalisation. */
  kth: Float32Array;
  /** The top K_NORM matches of each probe, by person. */
  hits: { person: number; similarity: number }[][];
}

const K_NORM = 10;

/** Enrols the photos `files` (indices into the LFW set) in an index as the service opens it, and searches every probe row. */
async function searchAll(emb: Embedded, person: Int32Array, probes: Float32Array, dim: number, files: number[]): Promise<Outcome> {
  const config = loadConfig({});
  const dir = mkdtempSync(path.join(os.tmpdir(), 'open-set-'));
  const index = await openFaceIndex({ dir, shards: config.index.shards, dims: dim, kind: config.index.kind, rerank: config.index.rerank, scalar: config.index.scalar, threads: config.index.threads });
  try {
    for (const s of index.shards()) await index.finishRebuild(s.shard, 0);
    const changes = files.map((f, i) => ({ position: i + 1, op: 'upsert' as const, id: f + 1, vector: emb.emb.slice(f * dim, (f + 1) * dim), galleries: [] }));
    for (let i = 0; i < changes.length; i += 1000) await index.apply(changes.slice(i, i + 1000));
    const rows = probes.length / dim;
    const out: Outcome = { best: new Float32Array(rows), bestPerson: new Int32Array(rows), kth: new Float32Array(rows), hits: [] };
    for (let r0 = 0; r0 < rows; r0 += 256) {
      const r1 = Math.min(rows, r0 + 256);
      const found = await index.searchBatch(probes.subarray(r0 * dim, r1 * dim), K_NORM);
      found.forEach((f, k) => {
        if (f.faces !== files.length) throw new Error(`the index says it searched ${f.faces} faces, not ${files.length}`);
        const hits = f.matches.map((m) => ({ person: person[m.id - 1], similarity: m.similarity }));
        out.hits[r0 + k] = hits;
        out.best[r0 + k] = hits[0]?.similarity ?? -1;
        out.bestPerson[r0 + k] = hits[0]?.person ?? -1;
        out.kth[r0 + k] = hits[hits.length - 1]?.similarity ?? -1;
      });
    }
    return out;
  } finally {
    index.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Rates {
  n: number;
  mated: number;
  nonMated: number;
  fnirAtFpir: Record<string, { fnir: number; threshold: number } | null>;
  before: { fpir: number; fnir: number };
  after: { fpir: number; fnir: number; cosine: number };
  normalised: Record<string, number | null>;
}

const FPIR_TARGETS = [0.1, 0.01, 0.001];

/** FNIR at the cosine where `score` lets through at most `fpir` of the strangers. */
function fnirAt(scoreNon: number[], scoreMated: number[], matedRight: boolean[], fpir: number): { fnir: number; threshold: number } | null {
  const sorted = [...scoreNon].sort((a, b) => b - a);
  const allowed = Math.floor(fpir * sorted.length);
  if (allowed < 1) return null;
  // Strictly above the (allowed+1)-th best stranger: at most `allowed` strangers pass.
  const threshold = sorted[allowed];
  const named = scoreMated.filter((s, i) => matedRight[i] && s > threshold).length;
  return { fnir: 1 - named / scoreMated.length, threshold };
}

function rates(out: Outcome, probes: Probe[], n: number, c: Calibration): Rates {
  const mated = probes.filter((p) => p.person >= 0 && p.label === 'mated');
  const non = probes.filter((p) => p.label !== 'mated');
  const right = mated.map((p) => out.bestPerson[p.row] === p.person);
  const fnirAtFpir: Rates['fnirAtFpir'] = {};
  const normalised: Rates['normalised'] = {};
  const raw = (ps: Probe[]) => ps.map((p) => out.best[p.row]);
  const norm = (ps: Probe[]) => ps.map((p) => out.best[p.row] - out.kth[p.row]);
  for (const f of FPIR_TARGETS) {
    fnirAtFpir[String(f)] = fnirAt(raw(non), raw(mated), right, f);
    normalised[String(f)] = fnirAt(norm(non), norm(mated), right, f)?.fnir ?? null;
  }
  const passes1 = (s: number) => toConfidence(s, c) >= DEFAULT_THRESHOLD;
  const passesN = (s: number) => identifyConfidence(s, n, c) >= DEFAULT_THRESHOLD;
  const at = (passes: (s: number) => boolean) => ({
    fpir: non.filter((p) => passes(out.best[p.row])).length / non.length,
    fnir: 1 - mated.filter((p, i) => right[i] && passes(out.best[p.row])).length / mated.length,
  });
  return { n, mated: mated.length, nonMated: non.length, fnirAtFpir, before: at(passes1), after: { ...at(passesN), cosine: identifyCosine(DEFAULT_THRESHOLD, n, c) }, normalised };
}

// ---- several photos per person ------------------------------------------------------------

/** A probe's decision: the person named and the score that named them. */
type Decide = (hits: { person: number; similarity: number }[]) => { person: number; score: number };

const bestFace: Decide = (hits) => ({ person: hits[0]?.person ?? -1, score: hits[0]?.similarity ?? -1 });

/** Per person among the top matches, the mean of their best two (one seen only once counts the k-th best as its second). */
const meanOfTwo: Decide = (hits) => {
  const floor = hits[hits.length - 1]?.similarity ?? -1;
  const top = new Map<number, number[]>();
  for (const h of hits) top.set(h.person, [...(top.get(h.person) ?? []), h.similarity]);
  let best = { person: -1, score: -1 };
  for (const [person, scores] of top) {
    const score = (scores[0] + (scores[1] ?? floor)) / 2;
    if (score > best.score) best = { person, score };
  }
  return best;
};

/**
 * People with three or more photos enrolled with one photo or with two, the rest with one;
 * their third and later photos are the mated probes, the strangers as before. FNIR at equal
 * FPIR for the best face (what identify's top match is) and for the mean of a person's two.
 */
async function severalPhotos(set: LfwSet, emb: Embedded, sp: Split, strangerRows: Float32Array[], dim: number) {
  const photos = new Map<number, number[]>();
  set.files.forEach((_, f) => {
    const p = set.person[f];
    if (emb.found[f] && !sp.strangers.has(p)) photos.set(p, [...(photos.get(p) ?? []), f]);
  });
  const three = [...photos.entries()].filter(([, fs]) => fs.length >= 3);
  const others = [...photos.entries()].filter(([, fs]) => fs.length < 3).map(([, fs]) => fs[0]);
  const matedFiles = three.flatMap(([, fs]) => fs.slice(2));
  const rows = [...strangerRows, ...matedFiles.map((f) => emb.emb.subarray(f * dim, (f + 1) * dim))];
  const matrix = new Float32Array(rows.length * dim);
  rows.forEach((r, i) => matrix.set(r, i * dim));
  const nStrangers = strangerRows.length;
  const variants: { name: string; files: number[]; decide: Decide }[] = [
    { name: 'one photo, best face', files: [...three.map(([, fs]) => fs[0]), ...others], decide: bestFace },
    { name: 'two photos, best face', files: [...three.flatMap(([, fs]) => fs.slice(0, 2)), ...others], decide: bestFace },
    { name: 'two photos, mean of the two', files: [...three.flatMap(([, fs]) => fs.slice(0, 2)), ...others], decide: meanOfTwo },
  ];
  console.log(`\n2b. several photos per person: ${three.length} people with three or more photos, ${matedFiles.length} mated probes (their third and later), ${nStrangers} strangers`);
  console.log('| gallery, decision | faces | FNIR @ FPIR 10% | @ 1% |');
  console.log('|---|---|---|---|');
  const out = [];
  for (const v of variants) {
    const found = await searchAll(emb, set.person, matrix, dim, v.files);
    const decided = found.hits.map(v.decide);
    const non = decided.slice(0, nStrangers).map((d) => d.score);
    const mated = decided.slice(nStrangers);
    const right = mated.map((d, i) => d.person === set.person[matedFiles[i]]);
    const at = (fpir: number) => fnirAt(non, mated.map((d) => d.score), right, fpir)?.fnir ?? Number.NaN;
    const row = { variant: v.name, faces: v.files.length, fnirAtFpir10: at(0.1), fnirAtFpir1: at(0.01) };
    console.log(`| ${v.name} | ${row.faces} | ${pct(row.fnirAtFpir10)} | ${pct(row.fnirAtFpir1)} |`);
    out.push(row);
  }
  return out;
}

// ---- larger N from the distributions --------------------------------------------------------

/**
 * Impostor pairs that must reach a cosine for its false-accept rate to be counted rather than
 * taken from the fitted tail: the few dozen LFW impostor pairs above 0.55 are mostly label
 * noise (one person filed under two names, twins, a photo filed twice), which would count a
 * stranger named once per million faces where the service sees the same person.
 */
const MIN_COUNTED = 1000;

/** Per-pair false-accept rate at a cosine: counted where at least MIN_COUNTED impostor pairs reach it, the fitted tail beyond. */
function measuredFar(ap: AllPairs, cosine: number, c: Calibration): number {
  const above = impostorsAbove(ap, cosine);
  return above >= MIN_COUNTED ? above / ap.impostorCount : pairFalseAcceptRate(cosine, c);
}

function extrapolate(ap: AllPairs, mateScores: number[], n: number, c: Calibration) {
  const fpirAt = (t: number) => -Math.expm1(n * Math.log1p(-measuredFar(ap, t, c)));
  const named = (t: number) => mateScores.reduce((sum, s) => sum + (s >= t ? Math.exp((n - 1) * Math.log1p(-measuredFar(ap, s, c))) : 0), 0) / mateScores.length;
  // The cosine where the share of strangers named is `fpir` (bisection: it falls as the cosine rises).
  const cosineAtFpir = (fpir: number) => {
    let lo = -1;
    let hi = 1;
    for (let i = 0; i < 50; i++) {
      const mid = (lo + hi) / 2;
      if (fpirAt(mid) > fpir) lo = mid;
      else hi = mid;
    }
    return hi;
  };
  const fnirAtFpir = Object.fromEntries(FPIR_TARGETS.map((f) => [String(f), 1 - named(cosineAtFpir(f))]));
  const afterCos = identifyCosine(DEFAULT_THRESHOLD, n, c);
  const beforeCos = cosineForConfidence1(DEFAULT_THRESHOLD, c);
  return {
    n,
    fnirAtFpir,
    before: { fpir: fpirAt(beforeCos), fnir: 1 - named(beforeCos) },
    after: { fpir: fpirAt(afterCos), fnir: 1 - named(afterCos), cosine: afterCos, modelFpir: falsePositiveIdentificationRate(afterCos, n, c) },
  };
}

/** The cosine at which verify's 1:1 confidence reaches `t`: the logistic inverted. */
function cosineForConfidence1(t: number, c: Calibration): number {
  return c.center + Math.log(t / (1 - t)) / c.slope;
}

// ---- through the API ----------------------------------------------------------------------

/**
 * The service with every LFW photo enrolled but the strangers' and one held-out photo of each
 * enrolled person who has two or more (the mated probes): identify at its defaults counts
 * strangers named and people named right.
 */
async function throughApi(set: LfwSet, emb: Embedded, sp: Split, devStrangers: string[], probes: number) {
  const token = 'open-set-bench-token';
  const service = await startBenchService(token, { LOG_LEVEL: 'error' });
  const auth = { Authorization: `Token ${token}` };
  const lfwFile = (f: number) => path.join(set.dir, 'images', set.files[f]);
  const photo = (file: string) => new Blob([new Uint8Array(readFileSync(file))], { type: 'image/jpeg' });
  const byPerson = new Map<number, number[]>();
  set.files.forEach((_, f) => {
    if (emb.found[f] && !sp.strangers.has(set.person[f])) byPerson.set(set.person[f], [...(byPerson.get(set.person[f]) ?? []), f]);
  });
  const heldOut = [...byPerson.values()].filter((fs) => fs.length >= 2).map((fs) => fs[fs.length - 1]);
  const held = new Set(heldOut);
  const gallery = [...byPerson.values()].flat().filter((f) => !held.has(f));
  try {
    const t0 = performance.now();
    const added = await inParallel(gallery, 4, async (f) => {
      const fd = new FormData();
      fd.append('photo', photo(lfwFile(f)), 'photo.jpg');
      fd.append('meta', String(set.person[f]));
      const r = await fetch(`${service.base}/v0/face/`, { method: 'POST', headers: auth, body: fd });
      await r.arrayBuffer();
      return r.ok;
    });
    const enrolled = added.filter(Boolean).length;
    const enrolS = (performance.now() - t0) / 1000;
    console.log(`  enrolled ${enrolled} of ${gallery.length} photos (${byPerson.size} people) through POST /v0/face/ in ${enrolS.toFixed(0)} s (${(enrolled / enrolS).toFixed(1)} photos/s)`);
    const identify = async (file: string): Promise<string | undefined> => {
      const fd = new FormData();
      fd.append('photo', photo(file), 'photo.jpg');
      const r = await fetch(`${service.base}/v0/identify/`, { method: 'POST', headers: auth, body: fd });
      const body = (await r.json()) as { results?: Record<string, { face: { meta: string } }[]> };
      return Object.values(body.results ?? {})[0]?.[0]?.face.meta;
    };
    const random = new Rng(7);
    const strangerPhotos = set.files.map((_, f) => f).filter((f) => emb.found[f] && sp.strangers.has(set.person[f]));
    const strangerFiles = [...shuffled(strangerPhotos, random).slice(0, probes).map(lfwFile), ...devStrangers];
    const matedFiles = shuffled(heldOut, random).slice(0, probes);
    let named = 0;
    for (const f of strangerFiles) if ((await identify(f)) !== undefined) named++;
    let right = 0;
    for (const f of matedFiles) if ((await identify(lfwFile(f))) === String(set.person[f])) right++;
    const out = { enrolled, people: byPerson.size, strangers: strangerFiles.length, strangersNamed: named, mated: matedFiles.length, matedNamedRight: right };
    console.log(
      `  identify at its defaults among ${enrolled} faces: strangers named ${named}/${strangerFiles.length} (${pct(named / strangerFiles.length)}), ` +
        `enrolled people named right ${right}/${matedFiles.length} (${pct(right / matedFiles.length)}) from photos not in the gallery`,
    );
    return out;
  } finally {
    await service.stop();
  }
}

// ---- main ---------------------------------------------------------------------------------

async function main() {
  const root = findProjectRoot();
  const config = loadConfig({});
  const lfwDir = arg('lfw') ?? path.resolve(root, '../shared/testdata/lfw');
  const missing = lfwMissing(lfwDir);
  if (missing.length) throw new Error(`LFW is not at ${lfwDir}: missing ${missing.join(', ')}`);
  const mode = resolveRecognizerMode(config.modelDir, arg('mode') ?? 'sface:mirror');
  const strangerCount = numberArg('strangers', 1000);
  const report: Record<string, unknown> = { date: new Date().toISOString(), machine: machineLine(describeMachine()), mode: mode.spec };
  console.log(`open-set identification, ${mode.spec}; ${machineLine(describeMachine())}`);

  const set = limitPeople(loadLfw(lfwDir), numberArg('lfw-limit', Infinity));
  const { engine, emb } = await embedLfwSet(config, set, mode, root, set.limited ? `first${set.names.length}people` : 'all', (l) => console.log(l));
  const recognizer = engine.info().recognizer;
  const dim = emb.dim;
  console.log(`  ${set.files.length} LFW photos embedded${emb.cached ? ' (cached)' : ''}, a face on ${[...emb.found].filter(Boolean).length}`);

  // 1. The fit.
  const ap = await allPairs(engine, emb.emb, emb.found, set.person, dim);
  const fit = fitOpenSet(ap);
  const file = CALIBRATIONS[recognizer];
  if (!file) throw new Error(`${recognizer} has no calibration in src/services/calibration.ts: run bench:accuracy first`);
  const measured: Calibration = { ...file, openSet: fit };
  const c: Calibration = file.openSet ? file : measured;
  console.log(`\n1. fit on ${ap.impostorCount} impostor and ${ap.genuine.length} genuine pairs:`);
  console.log(`  openSet: { impostor: { mean: ${fit.impostor.mean}, sd: ${fit.impostor.sd} }, genuine: { mean: ${fit.genuine.mean}, sd: ${fit.genuine.sd} } },`);
  console.log(`  the calibration in use: ${file.openSet ? 'the file\'s' : 'the one just measured (the file has none)'}`);
  console.log(`  impostor cosine at per-pair FAR: ${[1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7].map((far) => `${far}: ${atFar(ap, far).cosine.toFixed(4)}`).join(', ')}`);
  console.log(`  genuine cosine at FRR: ${FIT_FRR.map((frr) => `${frr}: ${ap.genuine[Math.floor(frr * ap.genuine.length)].toFixed(4)}`).join(', ')}`);
  const farCheck = [0.3, 0.4, 0.45, 0.5, 0.55, 0.6].map((cos) => ({ cosine: cos, counted: impostorsAbove(ap, cos) / ap.impostorCount, model: pairFalseAcceptRate(cos, c) }));
  console.log(`  per-pair false-accept rate, counted vs model: ${farCheck.map((x) => `${x.cosine}: ${x.counted.toExponential(2)} vs ${x.model.toExponential(2)}`).join('; ')}`);
  report.fit = { impostorPairs: ap.impostorCount, genuinePairs: ap.genuine.length, measured: fit, inUse: c.openSet, farCheck };

  // 2. The protocol through the addon's index.
  const sp = split(set, emb, strangerCount, 20261127);
  const sizes = (arg('sizes') ?? '1000,2000,all').split(',').map((s) => (s === 'all' ? sp.enrolOrder.length : Number(s))).filter((n) => n > 0 && n <= sp.enrolOrder.length);
  const largest = Math.max(...sizes);
  const enrolled = new Set(sp.enrolOrder.slice(0, largest));
  const rows: number[] = [];
  const probes: Probe[] = [];
  const add = (vector: Float32Array, person: number, label: string, file: string) => {
    probes.push({ row: rows.length / dim, person, label, file });
    rows.push(...vector);
  };
  set.files.forEach((_, f) => {
    if (!emb.found[f]) return;
    const p = set.person[f];
    if (sp.strangers.has(p)) add(emb.emb.subarray(f * dim, (f + 1) * dim), p, 'lfw-stranger', set.files[f]);
  });
  // Mated probes: other photos of the people the largest gallery holds (each N keeps its own people's).
  const matedFiles: number[] = [];
  set.files.forEach((_, f) => {
    const p = set.person[f];
    if (emb.found[f] && enrolled.has(p) && sp.enrolledPhoto.get(p) !== f) {
      matedFiles.push(f);
      add(emb.emb.subarray(f * dim, (f + 1) * dim), p, 'mated-candidate', set.files[f]);
    }
  });
  // The dev set's people who have no LFW folder are strangers too: phone photos, studio portraits.
  const devDir = arg('testdata') ?? path.resolve(root, '../shared/testdata/faces');
  const labels = loadLabels(devDir) ?? [];
  const foldersOf = lfwFolders(set);
  const devLabels = labels.filter((l) => l.identities.length === 1 && foldersOf(l.identities[0]).length === 0);
  const dev = await embedLabelled(engine, devDir, devLabels);
  dev.people.forEach((_, i) => add(dev.all.subarray(i * dim, (i + 1) * dim), -1, 'dev-stranger', dev.files[i]));
  console.log(
    `\n2. protocol: ${strangerCount} LFW people never enrolled (${probes.filter((p) => p.label === 'lfw-stranger').length} photos) and ` +
      `${dev.people.length} dev-set photos of ${new Set(dev.people).size} people with no LFW folder are the strangers; ` +
      `galleries of ${sizes.join(', ')} of the other ${sp.enrolOrder.length} people, one photo each, in the service's index (${config.index.kind}, rerank ${config.index.rerank})`,
  );
  const probeMatrix = Float32Array.from(rows);
  const table: Rates[] = [];
  let topStrangers: { probe: string; match: string; cosine: number }[] = [];
  for (const n of sizes) {
    const gallery = sp.enrolOrder.slice(0, n);
    const inGallery = new Set(gallery);
    const out = await searchAll(emb, set.person, probeMatrix, dim, gallery.map((p) => sp.enrolledPhoto.get(p)!));
    const here = probes.map((p) => (p.label === 'mated-candidate' ? { ...p, label: inGallery.has(p.person) ? 'mated' : 'skip' } : p)).filter((p) => p.label !== 'skip');
    const r = rates(out, here, n, c);
    table.push(r);
    if (n === largest) {
      // The strangers hardest to tell apart, by name: LFW files a few people under two names.
      const worst = here.filter((p) => p.label !== 'mated').sort((a, b) => out.best[b.row] - out.best[a.row]).slice(0, 8);
      topStrangers = worst.map((p) => ({ probe: p.label === 'dev-stranger' ? `faces/${p.file}` : `lfw/${p.file}`, match: set.names[out.bestPerson[p.row]], cosine: round4(out.best[p.row]) }));
    }
  }
  report.severalPhotos = await severalPhotos(
    set,
    emb,
    sp,
    probes.filter((p) => p.label !== 'mated-candidate').map((p) => probeMatrix.subarray(p.row * dim, (p.row + 1) * dim)),
    dim,
  );
  console.log(`  strangers with the highest best match at N = ${largest}: ${topStrangers.map((t) => `${t.probe} → ${t.match} ${t.cosine}`).join('; ')}`);
  report.topStrangers = topStrangers;
  console.log(`\n| N | mated / strangers | FNIR @ FPIR 10% | @ 1% | @ 0.1% | default 0.75 before: FPIR / FNIR | after: FPIR / FNIR (cosine) | best − 10th best: FNIR @ 10% / 1% / 0.1% |`);
  console.log('|---|---|---|---|---|---|---|---|');
  for (const r of table) {
    const f = (k: string) => (r.fnirAtFpir[k] ? pct(r.fnirAtFpir[k]!.fnir) : 'n/a');
    const nf = (k: string) => (r.normalised[k] !== null ? pct(r.normalised[k]!) : 'n/a');
    console.log(
      `| ${r.n} | ${r.mated} / ${r.nonMated} | ${f('0.1')} | ${f('0.01')} | ${f('0.001')} | ${pct(r.before.fpir)} / ${pct(r.before.fnir)} | ` +
        `${pct(r.after.fpir)} / ${pct(r.after.fnir)} (${r.after.cosine.toFixed(3)}) | ${nf('0.1')} / ${nf('0.01')} / ${nf('0.001')} |`,
    );
  }
  report.addon = table;

  // 3. Larger N from the distributions.
  const mateScores = matedFiles.map((f) => {
    const e = sp.enrolledPhoto.get(set.person[f])!;
    let s = 0;
    for (let d = 0; d < dim; d++) s += emb.emb[f * dim + d] * emb.emb[e * dim + d];
    return s;
  });
  console.log(`\n3. larger N from the measured distributions (${mateScores.length} mate scores; the false-accept rate counted over all ${ap.impostorCount} impostor pairs down to ${MIN_COUNTED} pairs, the fitted tail beyond):`);
  console.log('| N | FNIR @ FPIR 10% | @ 1% | @ 0.1% | default before: FPIR / FNIR | after: FPIR / FNIR (cosine; model FPIR) |');
  console.log('|---|---|---|---|---|---|');
  const extra = [1e3, 1e4, 1e5, 1e6, 1e7].map((n) => extrapolate(ap, mateScores, n, c));
  for (const x of extra) {
    console.log(
      `| ${x.n.toExponential(0)} | ${pct(x.fnirAtFpir['0.1'])} | ${pct(x.fnirAtFpir['0.01'])} | ${pct(x.fnirAtFpir['0.001'])} | ` +
        `${pct(x.before.fpir)} / ${pct(x.before.fnir)} | ${pct(x.after.fpir)} / ${pct(x.after.fnir)} (${x.after.cosine.toFixed(3)}; ${pct(x.after.modelFpir)}) |`,
    );
  }
  report.extrapolated = extra;

  // 4. Through the API.
  if (process.argv.includes('--api')) {
    console.log('\n4. through the API:');
    report.api = await throughApi(set, emb, sp, dev.files.map((f) => path.join(devDir, f)), numberArg('api-probes', 300));
  }
  saveJson(arg('json'), report);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
