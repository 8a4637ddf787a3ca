/**
 * Does a caller's box change the answer? LFW photos placed into camera and phone frames
 * (1280x720 and 1920x1080, faces 60 to 600 px wide, a third of them against an edge or in a
 * corner), through the service, with the detector's own box for the face and without any box:
 *
 *   node dist/bench/engine/caller-boxes.js [--lfw DIR] [--lfw-limit N] [--frames 5] [--clients 2] [--json FILE]
 *
 * `--lfw-limit N` keeps the first N people (default 200; each enrolled from their first photo,
 * the frames made from it). Per frame: POST /v1/detect/ finds the placed face (or not: a face
 * smaller than the detector finds is counted apart); then verify against the original and
 * identify among the enrolled, each with `bbox` set to that box and without a box
 * (mf_selector all, the same face's answer). Reported: the frames where the confidences agree to
 * 1e-3 and identify names the same person, those answered `aligned: false`, the others; and
 * identify's latency with the box and without (a box costs the frame's detection, as no box does).
 * A camera worker sends every sighting as identify with the box of its tracked face, so the
 * agreement here is how often a sighting is named as identify names its frame.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot } from '../../src/config/index.js';
import { numberArg, optionArg as arg, saveJson } from '../lib/args.js';
import { lfwMissing, limitPeople, loadLfw } from '../lib/lfw.js';
import { inParallel } from '../../test/harness/in-parallel.js';
import { iou, placeFace, type FaceBox, type FacePlacement } from '../../test/harness/frames.js';
import { startBenchService } from '../../test/harness/load-service.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { Rng } from '../../test/harness/reliability/outcome.js';

interface Frame {
  person: number;
  at: FacePlacement;
  outcome: 'same' | 'unaligned' | 'differs' | 'not detected';
  detail?: string;
  msWithBox?: number;
  msWithout?: number;
}

const SIZES = [
  [1280, 720],
  [1920, 1080],
] as const;

/** A placement drawn from `rng`: the face's width log-uniform in 60..600 px (at most the frame's height allows), a third against an edge or in a corner. */
function drawPlacement(rng: Rng): FacePlacement {
  const [width, height] = SIZES[Math.floor(rng.next() * SIZES.length)];
  const face = Math.round(Math.min(60 * 10 ** rng.next(), height * 0.6));
  const edge = () => (rng.next() < 0.5 ? 0 : 1);
  const against = rng.next() < 1 / 3;
  return { width, height, face, fx: against ? edge() : rng.next(), fy: against && rng.next() < 0.5 ? edge() : rng.next() };
}

const percentile = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

async function main(): Promise<void> {
  const root = findProjectRoot();
  const lfwDir = arg('lfw') ?? path.resolve(root, '../shared/testdata/lfw');
  const missing = lfwMissing(lfwDir);
  if (missing.length) throw new Error(`LFW is not at ${lfwDir}: missing ${missing.join(', ')}`);
  const set = limitPeople(loadLfw(lfwDir), numberArg('lfw-limit', 200));
  const perPerson = numberArg('frames', 5);
  const clients = numberArg('clients', 2);
  const machine = machineLine(describeMachine());
  console.log(`caller boxes against no box, through the API; ${machine}`);
  const token = 'boxes-bench-token';
  const service = await startBenchService(token, { LOG_LEVEL: 'error' });
  const auth = { Authorization: `Token ${token}` };
  const post = async (url: string, fields: Record<string, string | Buffer>) => {
    const fd = new FormData();
    for (const [k, v] of Object.entries(fields)) {
      if (typeof v === 'string') fd.append(k, v);
      else fd.append(k, new Blob([new Uint8Array(v)], { type: 'image/jpeg' }), 'photo.jpg');
    }
    const t0 = performance.now();
    const res = await fetch(`${service.base}${url}`, { method: 'POST', headers: auth, body: fd });
    const json = (await res.json()) as any;
    if (!res.ok) throw new Error(`${url}: ${res.status} ${JSON.stringify(json)}`);
    return { json, ms: performance.now() - t0 };
  };
  const frames: Frame[] = [];
  try {
    // Each person's first photo, enrolled, and the box of its subject (the face nearest the centre).
    const firsts = set.names.map((_, p) => set.files[set.person.indexOf(p)]);
    const photos = firsts.map((f) => readFileSync(path.join(lfwDir, 'images', f)));
    const subjects: (FaceBox | undefined)[] = await inParallel(photos.map((photo, p) => ({ photo, p })), clients, async ({ photo, p }) => {
      const faces = (await post('/v1/detect/', { photo })).json.faces as FaceBox[];
      const off = (b: FaceBox) => Math.hypot((b.x1 + b.x2) / 2 - 125, (b.y1 + b.y2) / 2 - 125);
      const subject = faces.sort((a, b) => off(a) - off(b))[0];
      if (subject) await post('/v0/face/', { photo, meta: set.names[p], bbox: JSON.stringify(subject) });
      return subject;
    });
    const rng = new Rng(20261201);
    const jobs = subjects.flatMap((subject, person) => (subject ? Array.from({ length: perPerson }, () => ({ person, subject, at: drawPlacement(rng) })) : []));
    const started = performance.now();
    frames.push(
      ...(await inParallel(jobs, clients, async ({ person, subject, at }): Promise<Frame> => {
        const { frame, face: expected } = placeFace(photos[person], subject, at);
        const found = ((await post('/v1/detect/', { photo: frame })).json.faces as FaceBox[]).find((b) => iou(b, expected) > 0.5);
        if (!found) return { person, at, outcome: 'not detected' };
        const box = { x1: found.x1, y1: found.y1, x2: found.x2, y2: found.y2 };
        const bbox = JSON.stringify(box);
        const key = `[${box.x1}, ${box.y1}, ${box.x2}, ${box.y2}]`;
        const pairOf = (json: any) => (json.results as { bbox1: FaceBox & { aligned?: false }; confidence: number }[]).find((r) => iou(r.bbox1, box) > 0.99);
        const vWithout = pairOf((await post('/v0/verify/', { photo1: frame, photo2: photos[person], bbox2: JSON.stringify(subject), mf_selector: 'all', threshold: 'none' })).json);
        const vWith = pairOf((await post('/v0/verify/', { photo1: frame, photo2: photos[person], bbox1: bbox, bbox2: JSON.stringify(subject), threshold: 'none' })).json);
        const idWithout = await post('/v0/identify/', { photo: frame, mf_selector: 'all', threshold: 'none' });
        const idWith = await post('/v0/identify/', { photo: frame, bbox, threshold: 'none' });
        const timing = { msWithBox: idWith.ms, msWithout: idWithout.ms };
        if (vWith?.bbox1.aligned === false || idWith.json.unaligned?.length) return { person, at, outcome: 'unaligned', ...timing };
        const [m1, m2] = [idWithout.json.results[key]?.[0], idWith.json.results[key]?.[0]];
        const agree = vWithout && vWith && Math.abs(vWithout.confidence - vWith.confidence) <= 1e-3 && m1?.face.meta === m2?.face.meta && Math.abs(m1.confidence - m2.confidence) <= 1e-3;
        return agree
          ? { person, at, outcome: 'same', ...timing }
          : { person, at, outcome: 'differs', detail: JSON.stringify({ vWithout: vWithout?.confidence, vWith: vWith?.confidence, m1, m2 }), ...timing };
      })),
    );
    const count = (o: Frame['outcome']) => frames.filter((f) => f.outcome === o).length;
    const compared = frames.length - count('not detected');
    const withBox = frames.flatMap((f) => (f.msWithBox !== undefined ? [f.msWithBox] : []));
    const without = frames.flatMap((f) => (f.msWithout !== undefined ? [f.msWithout] : []));
    const summary = {
      frames: frames.length,
      notDetected: count('not detected'),
      compared,
      same: count('same'),
      unaligned: count('unaligned'),
      differs: count('differs'),
      sameShare: compared ? count('same') / compared : NaN,
      identifyMs: { withBox: { p50: percentile(withBox, 50), p99: percentile(withBox, 99) }, without: { p50: percentile(without, 50), p99: percentile(without, 99) } },
      seconds: (performance.now() - started) / 1000,
    };
    console.log(`| frames | not detected | compared | same answer | aligned: false | differs |`);
    console.log(`|---|---|---|---|---|---|`);
    console.log(
      `| ${summary.frames} | ${summary.notDetected} | ${compared} | ${summary.same} (${(100 * summary.sameShare).toFixed(2)}%) | ${summary.unaligned} | ${summary.differs} |`,
    );
    console.log(
      `identify p50/p99: with the box ${summary.identifyMs.withBox.p50.toFixed(0)}/${summary.identifyMs.withBox.p99.toFixed(0)} ms, ` +
        `without ${summary.identifyMs.without.p50.toFixed(0)}/${summary.identifyMs.without.p99.toFixed(0)} ms (${clients} clients)`,
    );
    for (const f of frames.filter((x) => x.outcome === 'differs').slice(0, 5)) console.log(`differs: ${set.names[f.person]} ${JSON.stringify(f.at)} ${f.detail}`);
    saveJson(arg('json'), { date: new Date().toISOString(), machine, summary, frames });
  } finally {
    await service.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
