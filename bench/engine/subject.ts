/**
 * Which face of a photo `biggest` takes, measured through the API on LFW, where the face the
 * photo is of sits in the middle (other faces may show at the edges):
 *
 *   node dist/bench/engine/subject.js [--lfw DIR] [--margins 0,0.05,0.1,0.2,0.3] [--no-api] [--clients 4] [--json FILE]
 *       [--lfw-limit N]
 *
 * `--lfw-limit N` keeps the first N people (a smoke test of the code path; its numbers are not LFW's).
 *
 * - Margin: every LFW photo detected through the addon, and for each area margin of
 *   subjectOf (src/services/analysis.ts) the photos where the face it takes does not hold the
 *   centre while another face does (the subject missed).
 * - Subject: every LFW photo through POST /v0/identify/ at its defaults (mf_selector biggest)
 *   on an empty database: the answer's key is the box identify chose. Counted: photos where
 *   the chosen box does not hold the photo's centre (125, 125), and of those, the photos with
 *   a face that does.
 * - Accuracy: every pair of pairs.txt through POST /v0/verify/ at its defaults; the standard
 *   10-fold accuracy of the returned confidence (a pair without a face counts as "different").
 *
 * Each run starts the service in its own process (startBenchService) with the default
 * recogniser, so before and after a change are two runs of this command.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import { engineOptionsFrom, openEngine, type Analysis } from '../../src/native/engine.js';
import { SUBJECT_AREA_MARGIN, subjectOf } from '../../src/services/analysis.js';
import { numberArg, optionArg as arg, saveJson } from '../lib/args.js';
import { inParallel } from '../../test/harness/in-parallel.js';
import { lfwMissing, limitPeople, loadLfw, loadPairs, NO_FACE_SCORE, tenFold } from '../lib/lfw.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { startBenchService } from '../../test/harness/load-service.js';

type Box = [number, number, number, number];

const CENTRE = 125;
const holdsCentre = ([x1, y1, x2, y2]: Box) => x1 <= CENTRE && CENTRE <= x2 && y1 <= CENTRE && CENTRE <= y2;

/** The alternative the rule was measured against: among faces within the margin, the best quality, then (within 0.05) the nearest the centre. */
function qualityFirst(a: Analysis, margin: number): number {
  const area = (i: number) => (a.faces[i].x2 - a.faces[i].x1) * (a.faces[i].y2 - a.faces[i].y1);
  const rivals = a.faces.map((_, i) => i).filter((i) => area(i) >= (1 - margin) * area(0));
  const best = Math.max(...rivals.map((i) => a.faces[i].quality));
  const off = (i: number) => Math.hypot((a.faces[i].x1 + a.faces[i].x2) / 2 - a.width / 2, (a.faces[i].y1 + a.faces[i].y2) / 2 - a.height / 2);
  return rivals.filter((i) => a.faces[i].quality >= best - 0.05).reduce((x, y) => (off(y) < off(x) ? y : x));
}

async function main() {
  const root = findProjectRoot();
  const lfwDir = arg('lfw') ?? path.resolve(root, '../shared/testdata/lfw');
  const missing = lfwMissing(lfwDir);
  if (missing.length) throw new Error(`LFW is not at ${lfwDir}: missing ${missing.join(', ')}`);
  const clients = numberArg('clients', 4);
  const set = limitPeople(loadLfw(lfwDir), numberArg('lfw-limit', Infinity));
  const pairs = loadPairs(set);
  const machine = machineLine(describeMachine());
  console.log(`which face biggest takes, through the API; ${machine}`);
  // 0. The margin, through the addon: every photo detected once, each margin's choice counted.
  const margins = (arg('margins') ?? '0,0.05,0.1,0.2,0.3').split(',').map(Number);
  const engine = await openEngine(engineOptionsFrom(loadConfig({})));
  const analyses = await inParallel(set.files, 8, async (file) =>
    engine.analyze(readFileSync(path.join(lfwDir, 'images', file)), { embed: false, age: false, gender: false, emotions: false }),
  );
  const missed = (pick: (a: Analysis) => number) =>
    analyses.filter((a) => {
      if (a.faces.length < 2) return false;
      const f = a.faces[pick(a)];
      return !holdsCentre([f.x1, f.y1, f.x2, f.y2]) && a.faces.some((x) => holdsCentre([x.x1, x.y1, x.x2, x.y2]));
    }).length;
  const sweep = margins.map((margin) => ({ margin, missed: missed((a) => subjectOf(a, margin)), qualityFirst: missed((a) => qualityFirst(a, margin)) }));
  console.log(
    `margin sweep through the addon (${analyses.filter((a) => a.faces.length > 1).length} photos with two or more faces), the subject missed ` +
      `(nearest the centre / best quality first): ${sweep.map((x) => `${x.missed} / ${x.qualityFirst} at ${x.margin}`).join(', ')}; in use: ${SUBJECT_AREA_MARGIN}`,
  );
  if (process.argv.includes('--no-api')) return saveJson(arg('json'), { date: new Date().toISOString(), machine, sweep });

  const token = 'subject-bench-token';
  const service = await startBenchService(token, { LOG_LEVEL: 'error' });
  const auth = { Authorization: `Token ${token}` };
  const blob = (f: number) => new Blob([new Uint8Array(readFileSync(path.join(lfwDir, 'images', set.files[f])))], { type: 'image/jpeg' });
  try {
    // 1. The face identify chooses on each photo, and every face detect finds.
    let t0 = performance.now();
    const chosen = await inParallel(
      set.files.map((_, f) => f),
      clients,
      async (f): Promise<{ chosen?: Box; centred: boolean }> => {
        const fd = new FormData();
        fd.append('photo', blob(f), 'photo.jpg');
        const r = await fetch(`${service.base}/v0/identify/`, { method: 'POST', headers: auth, body: fd });
        const body = (await r.json()) as { results?: Record<string, unknown> };
        const key = Object.keys(body.results ?? {})[0];
        const box = key ? (JSON.parse(key) as Box) : undefined;
        let centred = false;
        if (box && !holdsCentre(box)) {
          const d = new FormData();
          d.append('photo', blob(f), 'photo.jpg');
          const all = (await (await fetch(`${service.base}/v1/detect/`, { method: 'POST', headers: auth, body: d })).json()) as { faces?: { x1: number; y1: number; x2: number; y2: number }[] };
          centred = (all.faces ?? []).some((x) => holdsCentre([x.x1, x.y1, x.x2, x.y2]));
        }
        return { chosen: box, centred };
      },
    );
    const noFace = chosen.filter((c) => !c.chosen).length;
    const offCentre = chosen.map((c, f) => ({ ...c, file: set.files[f] })).filter((c) => c.chosen && !holdsCentre(c.chosen));
    const wrong = offCentre.filter((c) => c.centred);
    const subjectS = (performance.now() - t0) / 1000;
    console.log(
      `subject: ${set.files.length} photos in ${subjectS.toFixed(0)} s; no face on ${noFace}; the chosen face off the centre on ${offCentre.length}, ` +
        `of which ${wrong.length} have a face on the centre (the subject missed): ${wrong.slice(0, 12).map((w) => w.file).join(', ')}${wrong.length > 12 ? ', …' : ''}`,
    );

    // 2. 10-fold accuracy of verify's answers.
    t0 = performance.now();
    const scores = Float64Array.from(
      await inParallel(pairs, clients, async (p) => {
        const fd = new FormData();
        fd.append('photo1', blob(p.a), 'a.jpg');
        fd.append('photo2', blob(p.b), 'b.jpg');
        const r = await fetch(`${service.base}/v0/verify/`, { method: 'POST', headers: auth, body: fd });
        const body = (await r.json()) as { results?: { confidence: number }[] };
        return r.ok && body.results?.[0] ? body.results[0].confidence : NO_FACE_SCORE;
      }),
    );
    const tf = tenFold(scores, pairs);
    const verifyS = (performance.now() - t0) / 1000;
    console.log(
      `verify: ${pairs.length} pairs in ${verifyS.toFixed(0)} s; LFW 10-fold ${(tf.mean * 100).toFixed(2)}% ± ${(tf.std * 100).toFixed(2)}%; ` +
        `${tf.noFacePairs} pairs without a face; wrong answers per fold at its threshold: ${tf.folds.map((f) => Math.round((1 - f.accuracy) * f.pairs)).join(', ')}`,
    );
    saveJson(arg('json'), { date: new Date().toISOString(), machine, sweep, photos: set.files.length, noFace, offCentre: offCentre.length, subjectMissed: wrong.map((w) => w.file), tenFold: tf });
  } finally {
    await service.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
