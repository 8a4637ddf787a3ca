/**
 * Identify's open-set calibration on real photos: LFW faces through the real engine into the
 * search index the service opens, probed with photos of people enrolled and of people
 * enrolled nowhere. Among a gallery of 1,500 faces the 1:1 default would name about half of
 * the strangers; the 1:N confidence must name almost none and still find the people enrolled.
 */
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.js';
import { engineOptionsFrom, openEngine, type Engine } from '../../src/native/engine.js';
import { openFaceIndex, type FaceIndex } from '../../src/native/face-index.js';
import { calibrationOf, DEFAULT_THRESHOLD, identifyConfidence, toConfidence, type Calibration } from '../../src/services/calibration.js';
import { inParallel } from '../harness/in-parallel.js';
import { haveLfw, lfwDir } from '../harness/images.js';
import { TEST_RECOGNIZER } from '../harness/service.js';

const GALLERY = 1500;
const PROBES = 60;

interface Person {
  name: string;
  photos: string[];
}

let engine: Engine;
/** The engine's recogniser's, as the service would read its scores. */
let calibration: Calibration;
let index: FaceIndex;
let indexDir: string;
let dim: number;
/** Best match of each probe: its cosine, the person it belongs to, and the faces searched. */
let mated: { person: number; best: number; bestPerson: number; faces: number }[];
let strangers: { best: number; faces: number }[];

/** The embedding of the face nearest the centre, or undefined when none is found. */
async function embed(file: string): Promise<Float32Array | undefined> {
  const a = await engine.analyze(await readFile(file), { embed: true, age: false, gender: false, emotions: false });
  if (a.faces.length === 0) return undefined;
  const centre = (f: (typeof a.faces)[number]) => Math.hypot((f.x1 + f.x2) / 2 - 125, (f.y1 + f.y2) / 2 - 125);
  const i = a.faces.reduce((best, f, k) => (centre(f) < centre(a.faces[best]) ? k : best), 0);
  return a.embeddings.slice(i * a.dim, (i + 1) * a.dim);
}

/** Embeds in order with a few analyses in flight, as the engine's pipeline likes. */
const embedAll = (files: string[]) => inParallel(files, 8, embed);

async function search(rows: Float32Array[]) {
  const q = new Float32Array(rows.length * dim);
  rows.forEach((r, i) => q.set(r, i * dim));
  return index.searchBatch(q, 1);
}

beforeAll(async () => {
  if (!haveLfw) return;
  const images = path.join(lfwDir, 'images');
  const names = (await readdir(images)).sort();
  const people: Person[] = await Promise.all(names.map(async (name) => ({ name, photos: (await readdir(path.join(images, name))).sort().map((f) => path.join(images, name, f)) })));
  // Every 25th person with two or more photos is probed with their second; every 40th other person is a stranger.
  const multi = people.filter((p) => p.photos.length >= 2);
  const probed = multi.filter((_, i) => i % 25 === 0).slice(0, PROBES);
  const probedSet = new Set(probed);
  const strangerPeople = people.filter((p) => !probedSet.has(p)).filter((_, i) => i % 40 === 7).slice(0, PROBES);
  const strangerSet = new Set(strangerPeople);
  const fillers = people.filter((p) => !probedSet.has(p) && !strangerSet.has(p)).slice(0, GALLERY - probed.length);
  const gallery = [...probed, ...fillers];

  engine = await openEngine(engineOptionsFrom(loadConfig(TEST_RECOGNIZER)));
  calibration = calibrationOf(engine.info().recognizer);
  const enrolled = await embedAll(gallery.map((p) => p.photos[0]));
  dim = enrolled.find((e) => e)!.length;
  const config = loadConfig({});
  indexDir = await mkdtemp(path.join(os.tmpdir(), 'face-open-set-'));
  index = await openFaceIndex({ dir: indexDir, shards: 2, dims: dim, kind: config.index.kind, rerank: config.index.rerank, scalar: config.index.scalar });
  for (const s of index.shards()) await index.finishRebuild(s.shard, 0);
  const changes = enrolled.flatMap((vector, i) => (vector ? [{ position: i + 1, op: 'upsert' as const, id: i + 1, vector, galleries: [] }] : []));
  await index.apply(changes);

  const matedRows = await embedAll(probed.map((p) => p.photos[1]));
  const strangerRows = await embedAll(strangerPeople.map((p) => p.photos[0]));
  const m = await search(matedRows.filter((r): r is Float32Array => r !== undefined));
  const s = await search(strangerRows.filter((r): r is Float32Array => r !== undefined));
  mated = matedRows
    .map((r, i) => (r ? i : -1))
    .filter((i) => i >= 0)
    .map((person, k) => ({ person, best: m[k].matches[0].similarity, bestPerson: m[k].matches[0].id - 1, faces: m[k].faces }));
  strangers = s.map((r) => ({ best: r.matches[0].similarity, faces: r.faces }));
}, 600_000);

afterAll(async () => {
  index?.close();
  if (indexDir) await rm(indexDir, { recursive: true, force: true });
});

describe.skipIf(!haveLfw)('identify among 1,500 LFW faces (needs ../shared/testdata/lfw)', () => {
  it('searches every face enrolled and probes nearly every photo', () => {
    expect(mated.length).toBeGreaterThanOrEqual(PROBES - 2);
    expect(strangers.length).toBeGreaterThanOrEqual(PROBES - 2);
    for (const p of [...mated, ...strangers]) expect(p.faces).toBeGreaterThanOrEqual(GALLERY - 5);
  });

  it('names almost no stranger at the default, where the 1:1 confidence named many', () => {
    const oneToOne = strangers.filter((s) => toConfidence(s.best, calibration) >= DEFAULT_THRESHOLD).length;
    const oneToN = strangers.filter((s) => identifyConfidence(s.best, s.faces, calibration) >= DEFAULT_THRESHOLD).length;
    // 1 − (1 − 4.66e-4)^1500: about half the strangers pass 1:1.
    expect(oneToOne).toBeGreaterThanOrEqual(strangers.length / 4);
    expect(oneToN).toBeLessThanOrEqual(1);
  });

  it("still names the people enrolled from another of their photos", () => {
    const right = mated.filter((p) => p.bestPerson === p.person && identifyConfidence(p.best, p.faces, calibration) >= DEFAULT_THRESHOLD).length;
    expect(right / mated.length).toBeGreaterThanOrEqual(0.9);
  });

  it('lowers the same match\'s confidence as the gallery grows', () => {
    const p = mated.find((x) => x.bestPerson === x.person && identifyConfidence(x.best, x.faces, calibration) > 0.9)!;
    expect(identifyConfidence(p.best, 1e7, calibration)).toBeLessThan(identifyConfidence(p.best, p.faces, calibration));
    expect(identifyConfidence(p.best, 10, calibration)).toBeGreaterThan(identifyConfidence(p.best, p.faces, calibration));
  });
});
