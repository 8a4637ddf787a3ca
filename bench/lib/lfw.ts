/**
 * LFW (deep-funneled, ../shared/testdata/lfw) for `bench/engine/accuracy.ts`: the
 * embedding of every photo, the standard 10-fold pair accuracy, the
 * false-accept rates over every impostor pair across people, and the
 * logistic fit behind `confidence`.
 *
 * - Per photo the face nearest the image centre is used (the LFW protocol
 *   is about the centred face; other faces can show at the edges), or the
 *   largest one where a caller asks (`bench/search/face-vectors.ts`).
 * - Embeddings are cached under .bench-out/, keyed by detector and
 *   recogniser spec (`sface`, `sface:mirror+dlib-resnet`, written out in
 *   full) and checked against the SHA-256 of every ONNX file in them and the
 *   photo list, so a rerun only redoes the statistics (`--recompute` forces
 *   the embedding pass).
 * - `limitPeople` keeps the first N people's photos, for smoke tests of the
 *   code path (`--lfw-limit`); `loadPairs` then keeps the pairs inside them.
 * - Mirroring goes through the engine's own decoder: an EXIF orientation 2
 *   (horizontal flip) segment is put in front of the JPEG data, so the
 *   mirrored photo is decoded by the same code, pixel for pixel mirrored,
 *   with no second lossy encoding. LFW's JPEGs carry no EXIF block.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import type { Config } from '../../src/config/index.js';
import { engineOptionsFrom, openEngine, type Engine } from '../../src/native/engine.js';
import { specFileName, type RecognizerMode } from './recognizer-modes.js';

export interface LfwSet {
  dir: string;
  /** Paths relative to images/, sorted by person then file name. */
  files: string[];
  /** Person index of each file. */
  person: Int32Array;
  names: string[];
  /** Cut to its first people by `limitPeople`. */
  limited?: boolean;
}

export interface LfwPair {
  fold: number;
  /** File indices into LfwSet.files. */
  a: number;
  b: number;
  same: boolean;
}

/** What a usable LFW folder lacks: empty when it has everything. */
export function lfwMissing(dir: string): string[] {
  const missing: string[] = [];
  if (!existsSync(path.join(dir, 'images'))) missing.push(path.join(dir, 'images/<Name>/<Name>_<nnnn>.jpg'));
  if (!existsSync(path.join(dir, 'pairs.txt'))) missing.push(path.join(dir, 'pairs.txt'));
  return missing;
}

export function loadLfw(dir: string): LfwSet {
  const images = path.join(dir, 'images');
  const names = readdirSync(images)
    .filter((name) => statSync(path.join(images, name)).isDirectory())
    .sort();
  const files: string[] = [];
  const person: number[] = [];
  names.forEach((name, p) => {
    for (const f of readdirSync(path.join(images, name)).filter((f) => f.endsWith('.jpg')).sort()) {
      files.push(`${name}/${f}`);
      person.push(p);
    }
  });
  return { dir, files, person: Int32Array.from(person), names };
}

/** The set with only its first `people` people (in name order) and their photos: a smoke test's subset. */
export function limitPeople(set: LfwSet, people: number): LfwSet {
  if (people >= set.names.length) return set;
  let n = 0;
  while (n < set.files.length && set.person[n] < people) n++;
  return { dir: set.dir, files: set.files.slice(0, n), person: set.person.slice(0, n), names: set.names.slice(0, people), limited: true };
}

/**
 * pairs.txt: `<fold> <name> <n1> <n2>` (same) or `<fold> <name1> <n1> <name2> <n2>` (different).
 * A pair naming a photo outside the set is an error, but for a set cut by `limitPeople`, which
 * keeps the pairs wholly inside it.
 */
export function loadPairs(set: LfwSet): LfwPair[] {
  const index = new Map(set.files.map((f, i) => [f, i]));
  const file = (name: string, n: string) => {
    const rel = `${name}/${name}_${n.padStart(4, '0')}.jpg`;
    const i = index.get(rel);
    if (i === undefined && !set.limited) throw new Error(`pairs.txt names ${rel}, which is not in ${set.dir}/images`);
    return i ?? -1;
  };
  const pairs: LfwPair[] = [];
  for (const line of readFileSync(path.join(set.dir, 'pairs.txt'), 'utf8').split('\n')) {
    const t = line.trim();
    if (!t || t.startsWith('#')) continue;
    const f = t.split(/\s+/);
    if (f.length === 4) pairs.push({ fold: Number(f[0]), a: file(f[1], f[2]), b: file(f[1], f[3]), same: true });
    else if (f.length === 5) pairs.push({ fold: Number(f[0]), a: file(f[1], f[2]), b: file(f[3], f[4]), same: false });
    else throw new Error(`pairs.txt: cannot read line "${t}"`);
  }
  return pairs.filter((p) => p.a >= 0 && p.b >= 0);
}

/** The JPEG with an EXIF APP1 segment holding only `Orientation` put right after SOI. */
export function withExifOrientation(jpeg: Buffer, orientation: number): Buffer {
  const tiff = Buffer.alloc(26);
  tiff.write('MM\0\x2A', 0, 'latin1');
  tiff.writeUInt32BE(8, 4); // first IFD right after the header
  tiff.writeUInt16BE(1, 8); // one entry
  tiff.writeUInt16BE(0x0112, 10); // Orientation
  tiff.writeUInt16BE(3, 12); // SHORT
  tiff.writeUInt32BE(1, 14); // count
  tiff.writeUInt16BE(orientation, 18); // value (padded to 4 bytes), then no next IFD
  const payload = Buffer.concat([Buffer.from('Exif\0\0', 'latin1'), tiff]);
  const head = Buffer.from([0xff, 0xe1, 0, 0]);
  head.writeUInt16BE(payload.length + 2, 2);
  return Buffer.concat([jpeg.subarray(0, 2), head, payload, jpeg.subarray(2)]);
}

/**
 * Which face of a photo is embedded: the one nearest the image centre (the LFW protocol is
 * about the centred face) or the largest (the engine lists faces largest first).
 */
export type FacePick = 'centre' | 'largest';

export interface Embedded {
  detector: string;
  recognizer: string;
  mirror: boolean;
  pick: FacePick;
  dim: number;
  /** Paths relative to images/, one row each. */
  files: string[];
  /** files.length × dim, L2-normalised; zero rows where no face was found. */
  emb: Float32Array;
  found: Uint8Array;
  /** Faces detected per photo (capped at 255). */
  faces: Uint8Array;
  /** Photos where the face nearest the centre is not the biggest one. */
  notBiggest: number;
  /** 1 for those photos. */
  centredNotBiggest: Uint8Array;
  seconds: number;
  photosPerSecond: number;
  /** Load average (1 min) when the pass started and ended: the machine is shared. */
  load: [number, number];
  /** The engine shape and analyses in flight of the pass (the cached pass's where cached). */
  engine: { inferenceWorkers: number; intraThreads: number };
  inFlight: number;
  cached: boolean;
}

interface CacheMeta {
  version: 1;
  detector: string;
  recognizer: string;
  mirror: boolean;
  /** Absent in caches written before the choice existed, which embedded the centred face. */
  pick?: FacePick;
  models: Record<string, string>;
  settings: Record<string, unknown>;
  filesSha256: string;
  count: number;
  dim: number;
  noFace: number[];
  faces: number[];
  notBiggest: number;
  /** Indices of those photos; absent in caches written before it was kept. */
  centredNotBiggest?: number[];
  seconds: number;
  photosPerSecond: number;
  load: [number, number];
  inFlight: number;
  engine: { inferenceWorkers: number; intraThreads: number };
}

export interface EmbedOptions {
  detector: string;
  /** The recogniser spec in full, as engine.info().recognizer gives it. */
  recognizer: string;
  /** SHA-256 of each model file (the detector and every recogniser of the spec), part of the cache key. */
  models: Record<string, string>;
  /** Engine settings that change what is found (minimum face, detector threshold): part of the cache key. */
  settings: Record<string, unknown>;
  mirror: boolean;
  /** Default 'centre'. */
  pick?: FacePick;
  inFlight: number;
  engine: { inferenceWorkers: number; intraThreads: number };
  /** Cache files, without extension (.json and .bin are added). */
  cache: string;
  force: boolean;
  log: (line: string) => void;
  /** Interval of the progress lines; default 30 s. */
  progressMs?: number;
}

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');

/** SHA-256 of each listed model's ONNX file, from the manifest in modelDir. */
export function modelHashes(modelDir: string, ids: string[]): Record<string, string> {
  const manifest = JSON.parse(readFileSync(path.join(modelDir, 'manifest.json'), 'utf8')) as { models: { id: string; onnx: string }[] };
  const out: Record<string, string> = {};
  for (const id of ids) {
    const m = manifest.models.find((x) => x.id === id);
    if (!m) throw new Error(`model ${id} is not in ${modelDir}/manifest.json`);
    out[id] = sha256(readFileSync(path.join(modelDir, m.onnx)));
  }
  return out;
}

/**
 * Embeds one face of each photo (`o.pick`), `inFlight` analyses at once, or
 * reads the cache when its key matches.
 */
export async function embedPhotos(engine: Engine, imagesDir: string, files: string[], o: EmbedOptions): Promise<Embedded> {
  const pick = o.pick ?? 'centre';
  const filesSha256 = sha256(files.join('\n'));
  const metaFile = `${o.cache}.json`;
  const binFile = `${o.cache}.bin`;
  if (!o.force && existsSync(metaFile) && existsSync(binFile)) {
    const meta = JSON.parse(readFileSync(metaFile, 'utf8')) as CacheMeta;
    const same =
      meta.version === 1 &&
      meta.detector === o.detector &&
      meta.recognizer === o.recognizer &&
      meta.mirror === o.mirror &&
      (meta.pick ?? 'centre') === pick &&
      meta.filesSha256 === filesSha256 &&
      JSON.stringify(meta.models) === JSON.stringify(o.models) &&
      JSON.stringify(meta.settings) === JSON.stringify(o.settings) &&
      (pick === 'centre' || meta.centredNotBiggest !== undefined);
    if (same) {
      const bin = readFileSync(binFile);
      const emb = new Float32Array(bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.byteLength));
      if (emb.length === files.length * meta.dim) {
        const found = new Uint8Array(files.length).fill(1);
        for (const i of meta.noFace) found[i] = 0;
        const centredNotBiggest = new Uint8Array(files.length);
        for (const i of meta.centredNotBiggest ?? []) centredNotBiggest[i] = 1;
        o.log(`  embeddings from ${binFile} (pass of ${meta.seconds.toFixed(0)} s; --recompute redoes it)`);
        return {
          detector: meta.detector,
          recognizer: meta.recognizer,
          mirror: meta.mirror,
          pick,
          dim: meta.dim,
          files,
          emb,
          found,
          faces: Uint8Array.from(meta.faces),
          notBiggest: meta.notBiggest,
          centredNotBiggest,
          seconds: meta.seconds,
          photosPerSecond: meta.photosPerSecond,
          load: meta.load,
          engine: meta.engine,
          inFlight: meta.inFlight,
          cached: true,
        };
      }
    }
    o.log(`  cache ${metaFile} is for other models or photos: recomputing`);
  }

  const n = files.length;
  const rows: (Float32Array | null)[] = new Array(n).fill(null);
  const faces = new Uint8Array(n);
  let notBiggest = 0;
  const centredNotBiggest = new Uint8Array(n);
  let dim = 0;
  let next = 0;
  let done = 0;
  const load0 = loadavg()[0];
  const t0 = performance.now();
  let lastLog = t0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      let bytes: Buffer = readFileSync(path.join(imagesDir, files[i]));
      if (o.mirror) bytes = withExifOrientation(bytes, 2);
      const a = await engine.analyze(bytes, { embed: true, age: false, gender: false, emotions: false });
      faces[i] = Math.min(255, a.faces.length);
      if (a.faces.length > 0) {
        const cx = a.width / 2;
        const cy = a.height / 2;
        let best = 0;
        let bestD = Infinity;
        a.faces.forEach((f, k) => {
          const d = ((f.x1 + f.x2) / 2 - cx) ** 2 + ((f.y1 + f.y2) / 2 - cy) ** 2;
          if (d < bestD) {
            bestD = d;
            best = k;
          }
        });
        if (best !== 0) {
          notBiggest++;
          centredNotBiggest[i] = 1;
        }
        const chosen = pick === 'centre' ? best : 0;
        dim = a.dim;
        rows[i] = a.embeddings.slice(chosen * a.dim, (chosen + 1) * a.dim);
      }
      done++;
      const now = performance.now();
      if (now - lastLog > (o.progressMs ?? 30_000)) {
        lastLog = now;
        o.log(`  ${done}/${n} photos, ${(done / ((now - t0) / 1000)).toFixed(1)} photos/s`);
      }
    }
  };
  await Promise.all(Array.from({ length: o.inFlight }, worker));
  const seconds = (performance.now() - t0) / 1000;
  const load: [number, number] = [load0, loadavg()[0]];
  if (dim === 0) throw new Error('no face found on any photo');
  const emb = new Float32Array(n * dim);
  const found = new Uint8Array(n);
  rows.forEach((r, i) => {
    if (r) {
      emb.set(r, i * dim);
      found[i] = 1;
    }
  });
  const noFace = [...found.keys()].filter((i) => !found[i]);
  const meta: CacheMeta = {
    version: 1,
    detector: o.detector,
    recognizer: o.recognizer,
    mirror: o.mirror,
    pick,
    models: o.models,
    settings: o.settings,
    filesSha256,
    count: n,
    dim,
    noFace,
    faces: [...faces],
    notBiggest,
    centredNotBiggest: [...centredNotBiggest.keys()].filter((i) => centredNotBiggest[i]),
    seconds,
    photosPerSecond: n / seconds,
    load,
    inFlight: o.inFlight,
    engine: o.engine,
  };
  mkdirSync(path.dirname(metaFile), { recursive: true });
  writeFileSync(binFile, Buffer.from(emb.buffer, emb.byteOffset, emb.byteLength));
  writeFileSync(metaFile, JSON.stringify(meta));
  return { detector: o.detector, recognizer: o.recognizer, mirror: o.mirror, pick, dim, files, emb, found, faces, notBiggest, centredNotBiggest, seconds, photosPerSecond: n / seconds, load, engine: o.engine, inFlight: o.inFlight, cached: false };
}

/** Sum of the photo's and the mirrored photo's embeddings, renormalised; either alone where the other found no face. */
export function mirrorAverage(plain: Embedded, mirrored: Embedded): { emb: Float32Array; found: Uint8Array } {
  const { dim } = plain;
  const n = plain.files.length;
  const emb = new Float32Array(n * dim);
  const found = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    if (!plain.found[i] && !mirrored.found[i]) continue;
    found[i] = 1;
    let norm = 0;
    for (let k = 0; k < dim; k++) {
      const v = plain.emb[i * dim + k] + mirrored.emb[i * dim + k];
      emb[i * dim + k] = v;
      norm += v * v;
    }
    const s = 1 / Math.sqrt(norm);
    for (let k = 0; k < dim; k++) emb[i * dim + k] *= s;
  }
  return { emb, found };
}

/** Score of a pair where a photo has no face: below every cosine, so it is never accepted. */
export const NO_FACE_SCORE = -2;

/** Cosine of each pair (rows index emb through rowOf), NO_FACE_SCORE where either photo has no face. */
export function pairScores(
  emb: Float32Array,
  found: Uint8Array,
  dim: number,
  pairs: LfwPair[],
  rowOf: (file: number) => number = (f) => f,
): Float64Array {
  return Float64Array.from(pairs, (p) => {
    const a = rowOf(p.a);
    const b = rowOf(p.b);
    if (!found[a] || !found[b]) return NO_FACE_SCORE;
    let s = 0;
    for (let k = 0; k < dim; k++) s += emb[a * dim + k] * emb[b * dim + k];
    return s;
  });
}

/** The threshold (accept when score > t) with the best accuracy on these pairs: the middle of the first best gap. */
export function bestThreshold(scores: ArrayLike<number>, same: ArrayLike<boolean>): { threshold: number; accuracy: number } {
  const idx = Array.from({ length: scores.length }, (_, i) => i).sort((x, y) => scores[x] - scores[y]);
  let positives = 0;
  for (let i = 0; i < same.length; i++) if (same[i]) positives++;
  // Threshold below everything: every genuine accepted, every impostor rejected wrongly.
  let correct = positives;
  let best = { correct, threshold: scores[idx[0]] - 1e-3 };
  for (let k = 0; k < idx.length; k++) {
    correct += same[idx[k]] ? -1 : 1;
    // Only between distinct scores can the threshold separate them.
    if (k + 1 < idx.length && scores[idx[k + 1]] === scores[idx[k]]) continue;
    if (correct > best.correct) {
      const hi = k + 1 < idx.length ? scores[idx[k + 1]] : scores[idx[k]] + 2e-3;
      best = { correct, threshold: (scores[idx[k]] + hi) / 2 };
    }
  }
  return { threshold: best.threshold, accuracy: best.correct / scores.length };
}

export interface TenFold {
  folds: { fold: number; pairs: number; threshold: number; accuracy: number }[];
  mean: number;
  /** Sample standard deviation (n − 1) of the fold accuracies. */
  std: number;
  /** std / √folds, what the LFW site calls the standard error. */
  standardError: number;
  /** Pairs with a photo where no face was found (counted as "different"). */
  noFacePairs: number;
}

/** The standard protocol: for each fold the threshold with the best accuracy on the other folds, measured on it. */
export function tenFold(scores: Float64Array, pairs: LfwPair[]): TenFold {
  const foldIds = [...new Set(pairs.map((p) => p.fold))].sort((a, b) => a - b);
  const folds = foldIds.map((fold) => {
    const train = pairs.map((p, i) => i).filter((i) => pairs[i].fold !== fold);
    const test = pairs.map((p, i) => i).filter((i) => pairs[i].fold === fold);
    const { threshold } = bestThreshold(
      train.map((i) => scores[i]),
      train.map((i) => pairs[i].same),
    );
    const correct = test.filter((i) => scores[i] > threshold === pairs[i].same).length;
    return { fold, pairs: test.length, threshold, accuracy: correct / test.length };
  });
  const acc = folds.map((f) => f.accuracy);
  const mean = acc.reduce((a, b) => a + b, 0) / acc.length;
  const std = Math.sqrt(acc.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, acc.length - 1));
  return { folds, mean, std, standardError: std / Math.sqrt(acc.length), noFacePairs: [...scores].filter((s) => s === NO_FACE_SCORE).length };
}

/** Impostor histogram resolution: bins of 1e-5 over [-1, 1]. */
export const BINS_PER_UNIT = 100_000;
const BINS = 2 * BINS_PER_UNIT + 1;
const binOf = (s: number) => {
  const b = Math.floor((s + 1) * BINS_PER_UNIT);
  return b < 0 ? 0 : b >= BINS ? BINS - 1 : b;
};
const binLow = (b: number) => b / BINS_PER_UNIT - 1;

export interface AllPairs {
  photos: number;
  people: number;
  genuinePeople: number;
  /** Every same-person pair's cosine, ascending. */
  genuine: Float32Array;
  impostorCount: number;
  /** Impostor counts per 1e-5 bin of cosine from -1. */
  histogram: Uint32Array;
  /** The highest impostor scores, exact, best first (files as indices into the set). */
  top: { score: number; a: number; b: number }[];
  impostorMean: number;
  impostorStd: number;
  seconds: number;
}

/**
 * Every pair of photos with a face: same person → genuine (kept exactly),
 * different people → impostor (histogram plus the exact top `topK`). Blocks
 * of rows go through engine.similarity against all later rows.
 */
export async function allPairs(engine: Engine, emb: Float32Array, found: Uint8Array, person: Int32Array, dim: number, topK = 1000, blockRows = 512): Promise<AllPairs> {
  const t0 = performance.now();
  const rows = [...found.keys()].filter((i) => found[i]); // sorted by person
  const n = rows.length;
  const m = new Float32Array(n * dim);
  rows.forEach((f, r) => m.set(emb.subarray(f * dim, (f + 1) * dim), r * dim));
  // End (exclusive) of each row's person run.
  const runEnd = new Int32Array(n);
  for (let r = n - 1; r >= 0; r--) runEnd[r] = r + 1 < n && person[rows[r + 1]] === person[rows[r]] ? runEnd[r + 1] : r + 1;
  const histogram = new Uint32Array(BINS);
  const genuine: number[] = [];
  // Min-heap of the top impostors.
  const hs = new Float32Array(topK);
  const ha = new Int32Array(topK);
  const hb = new Int32Array(topK);
  let hn = 0;
  const push = (s: number, a: number, b: number) => {
    if (hn < topK) {
      let i = hn++;
      while (i > 0) {
        const p = (i - 1) >> 1;
        if (hs[p] <= s) break;
        hs[i] = hs[p]; ha[i] = ha[p]; hb[i] = hb[p];
        i = p;
      }
      hs[i] = s; ha[i] = a; hb[i] = b;
      return;
    }
    if (s <= hs[0]) return;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= hn) break;
      const c = l + 1 < hn && hs[l + 1] < hs[l] ? l + 1 : l;
      if (hs[c] >= s) break;
      hs[i] = hs[c]; ha[i] = ha[c]; hb[i] = hb[c];
      i = c;
    }
    hs[i] = s; ha[i] = a; hb[i] = b;
  };
  let count = 0;
  let sum = 0;
  let sum2 = 0;
  for (let r0 = 0; r0 < n; r0 += blockRows) {
    const r1 = Math.min(n, r0 + blockRows);
    const width = n - r0;
    const sim = await engine.similarity(m.subarray(r0 * dim, r1 * dim), m.subarray(r0 * dim), dim);
    for (let r = r0; r < r1; r++) {
      const base = (r - r0) * width - r0;
      const end = runEnd[r];
      for (let c = r + 1; c < end; c++) genuine.push(sim[base + c]);
      let min = hn < topK ? -Infinity : hs[0];
      for (let c = end; c < n; c++) {
        const s = sim[base + c];
        histogram[binOf(s)]++;
        sum += s;
        sum2 += s * s;
        if (s > min) {
          push(s, rows[r], rows[c]);
          min = hn < topK ? -Infinity : hs[0];
        }
      }
      count += n - end;
    }
  }
  const top = Array.from({ length: hn }, (_, i) => ({ score: hs[i], a: ha[i], b: hb[i] })).sort((x, y) => y.score - x.score);
  const mean = sum / count;
  const people = new Set(rows.map((f) => person[f]));
  const genuinePeople = new Set(rows.filter((f, r) => runEnd[r] - r > 1).map((f) => person[f]));
  return {
    photos: n,
    people: people.size,
    genuinePeople: genuinePeople.size,
    genuine: Float32Array.from(genuine).sort(),
    impostorCount: count,
    histogram,
    top,
    impostorMean: mean,
    impostorStd: Math.sqrt(sum2 / count - mean * mean),
    seconds: (performance.now() - t0) / 1000,
  };
}

/** Impostors strictly above a cosine: exact within the top list, else from the histogram (bins wholly above). */
export function impostorsAbove(ap: AllPairs, cosine: number): number {
  const last = ap.top[ap.top.length - 1];
  if (last && cosine >= last.score) return ap.top.filter((t) => t.score > cosine).length;
  let n = 0;
  // Bins wholly at or above the cosine: exact when it is a bin edge (as atFar's are), else
  // short by part of one 1e-5 bin.
  for (let b = BINS - 1; b >= 0 && binLow(b) >= cosine; b--) n += ap.histogram[b];
  return n;
}

/** Genuine pairs strictly above a cosine, as a share. */
export function tarAt(ap: AllPairs, cosine: number): number {
  const g = ap.genuine;
  let lo = 0;
  let hi = g.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (g[mid] > cosine) hi = mid;
    else lo = mid + 1;
  }
  return (g.length - lo) / g.length;
}

export interface FarPoint {
  far: number;
  /** Impostor pairs the target allows above the threshold. */
  allowed: number;
  /** Smallest cosine with at most `allowed` impostors strictly above it (accept when cosine > it). */
  cosine: number;
  /** exact: an impostor score from the exact top list; histogram: a 1e-5 bin edge. */
  from: 'exact' | 'histogram';
  impostorsAbove: number;
  tar: number;
}

export function atFar(ap: AllPairs, far: number): FarPoint {
  const allowed = Math.floor(far * ap.impostorCount);
  let cosine: number;
  let from: FarPoint['from'];
  if (allowed < ap.top.length) {
    cosine = ap.top[allowed].score;
    from = 'exact';
  } else {
    let n = 0;
    let b = BINS - 1;
    for (; b > 0; b--) {
      if (n + ap.histogram[b] > allowed) break;
      n += ap.histogram[b];
    }
    cosine = binLow(b + 1);
    from = 'histogram';
  }
  return { far, allowed, cosine, from, impostorsAbove: impostorsAbove(ap, cosine), tar: tarAt(ap, cosine) };
}

/**
 * Weighted logistic regression of y on x: P(y=1 | x) = 1 / (1 + exp(-slope (x - center))).
 * Newton's method with step halving on the weighted log-loss.
 */
export function fitLogisticWeighted(x: ArrayLike<number>, y: ArrayLike<number>, w: ArrayLike<number>): { slope: number; center: number } {
  const n = x.length;
  const loss = (a: number, b: number) => {
    let l = 0;
    for (let i = 0; i < n; i++) {
      const z = a * x[i] + b;
      // log(1 + e^z) - y z, stable
      l += w[i] * ((z > 0 ? z + Math.log1p(Math.exp(-z)) : Math.log1p(Math.exp(z))) - y[i] * z);
    }
    return l;
  };
  let a = 10;
  let b = -3;
  let current = loss(a, b);
  for (let iter = 0; iter < 200; iter++) {
    let ga = 0, gb = 0, haa = 0, hab = 0, hbb = 0;
    for (let i = 0; i < n; i++) {
      const p = 1 / (1 + Math.exp(-(a * x[i] + b)));
      const r = w[i] * (p - y[i]);
      const h = w[i] * p * (1 - p);
      ga += r * x[i];
      gb += r;
      haa += h * x[i] * x[i];
      hab += h * x[i];
      hbb += h;
    }
    const det = haa * hbb - hab * hab;
    let da = (hbb * ga - hab * gb) / det;
    let db = (haa * gb - hab * ga) / det;
    let step = 1;
    let next = loss(a - da, b - db);
    while (!(next <= current) && step > 1e-6) {
      step /= 2;
      next = loss(a - step * da, b - step * db);
    }
    da *= step;
    db *= step;
    a -= da;
    b -= db;
    current = next;
    if (Math.abs(da) + Math.abs(db) < 1e-10) break;
  }
  return { slope: a, center: -b / a };
}

/** The logistic fit on every genuine pair against the impostor histogram, each class weighing half. */
export function fitLogisticAllPairs(ap: AllPairs): { slope: number; center: number } {
  const x: number[] = [];
  const y: number[] = [];
  const w: number[] = [];
  for (const s of ap.genuine) {
    x.push(s);
    y.push(1);
    w.push(0.5 / ap.genuine.length);
  }
  for (let b = 0; b < BINS; b++) {
    if (!ap.histogram[b]) continue;
    x.push(binLow(b) + 0.5 / BINS_PER_UNIT);
    y.push(0);
    w.push((0.5 * ap.histogram[b]) / ap.impostorCount);
  }
  return fitLogisticWeighted(x, y, w);
}

/**
 * Every photo of `set` through the service's detector (its settings from `config`) and the
 * recogniser `mode`, the centred face of each, on an engine of two single-threaded workers;
 * cached under `<root>/.bench-out/lfw-<detector>+<recogniser>-<tag>`. The engine stays open
 * for the caller.
 */
export async function embedLfwSet(config: Config, set: LfwSet, mode: RecognizerMode, root: string, tag: string, log: (line: string) => void): Promise<{ engine: Engine; emb: Embedded }> {
  const manifest = JSON.parse(readFileSync(path.join(config.modelDir, 'manifest.json'), 'utf8')) as { defaults: { detector: string } };
  const detector = config.detector ?? manifest.defaults.detector;
  const shape = { inferenceWorkers: 2, intraThreads: 1 };
  const engine = await openEngine(engineOptionsFrom(config, { ...shape, detector, recognizer: mode.spec }));
  const recognizer = engine.info().recognizer;
  const emb = await embedPhotos(engine, path.join(set.dir, 'images'), set.files, {
    detector,
    recognizer,
    models: modelHashes(config.modelDir, [detector, ...mode.models]),
    settings: { minFace: config.minFace, detectThreshold: config.detectThreshold ?? null },
    inFlight: 8,
    engine: shape,
    force: false,
    log,
    mirror: false,
    cache: path.join(root, '.bench-out', `lfw-${detector}+${specFileName(recognizer)}-${tag}`),
  });
  return { engine, emb };
}
