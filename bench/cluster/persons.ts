/**
 * Persons formed by strangers, measured:
 *
 *   npm run bench:persons -- [--people 2000] [--mode <recogniser>] [--thresholds strict,medium,low]
 *       [--rate-photos 300] [--clients 4] [--rounds 2] [--sizes 10000,1000000] [--lfw DIR] [--json FILE]
 *       [--parts grouping,rate,cost]
 *
 * 1. Grouping accuracy. The first `--people` LFW people (name order), every photo of each,
 *    in a seeded random order, recorded as camera sightings with nobody enrolled, once per
 *    threshold, through the service's own recording path: the grouping step
 *    (services/sightings.ts `recordGrouped`, with the strangers' index) and the history store
 *    on an embedded PostgreSQL. The engine's part is done once beforehand: each photo's
 *    centred face embedded by `--mode` (default: the recogniser this host's service chooses),
 *    cached under .bench-out. Every face counts as of equal quality (the cache keeps none), so
 *    a person's representatives are its first sightings. Reported per threshold: persons that
 *    hold two real people and sightings filed under a person not theirs (false merges);
 *    people with two or more photos spread over several persons (splits), and wholly in one.
 * 2. Sighting rate through the service (its own process): `--rate-photos` LFW photos as
 *    POST /v0/identify/ with cam_id from `--clients` clients, with grouping (the default) and
 *    with FACE_PERSON_THRESHOLD=off, alternated over `--rounds` rounds.
 * 3. Cost per sighting as the strangers grow: the strangers' index filled with `--sizes`
 *    synthetic representatives (random unit vectors), then one sighting's search and add.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import { HistoryStore } from '../../src/db/history-store.js';
import { openDatabase } from '../../src/db/open.js';
import { calibrationOf, resolveIdentifyThreshold, type ThresholdPreset } from '../../src/services/calibration.js';
import { grouping as groupingOf, recordGrouped } from '../../src/services/sightings.js';
import { historyStrangers, StrangerIndex, type StrangerSource } from '../../src/search/stranger-index.js';
import { numberArg, optionArg as arg, saveJson } from '../lib/args.js';
import { embedLfwSet, lfwMissing, limitPeople, loadLfw } from '../lib/lfw.js';
import { resolveRecognizerMode } from '../lib/recognizer-modes.js';
import { inParallel } from '../../test/harness/in-parallel.js';
import { startBenchService } from '../../test/harness/load-service.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { Rng } from '../../test/harness/reliability/outcome.js';
import { FIRST_TENANT } from '../../src/auth.js';

const JPEG = Buffer.from([0xff, 0xd8, 0xff, 0xd9]);
const HASH = 'f'.repeat(64);
const pct = (x: number) => `${(100 * x).toFixed(2)}%`;

interface Grouped {
  threshold: string;
  persons: number;
  /** Persons holding two or more real people, of all persons. */
  mixedPersons: number;
  /** Sightings in a person whose majority is someone else, of all sightings. */
  strayedSightings: number;
  /** Real people with two or more photos found spread over several persons, of those people. */
  split: number;
  /** ...and wholly in one person. */
  whole: number;
  sightingsPerSecond: number;
}

/** Persons as the history reads them (merges applied), per sighting id. */
async function personsNow(history: HistoryStore): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  for await (const batch of (await history.events.search(FIRST_TENANT, {})).batches) for (const e of batch) out.set(e.id, e.person_id);
  return out;
}

function score(threshold: string, who: Map<number, number>, person: Map<number, number>, seconds: number): Grouped {
  const members = new Map<number, Map<number, number>>();
  const personsOfWho = new Map<number, Set<number>>();
  for (const [sighting, p] of person) {
    const w = who.get(sighting)!;
    const m = members.get(p) ?? new Map<number, number>();
    m.set(w, (m.get(w) ?? 0) + 1);
    members.set(p, m);
    personsOfWho.set(w, (personsOfWho.get(w) ?? new Set()).add(p));
  }
  let strayed = 0;
  for (const m of members.values()) strayed += [...m.values()].reduce((a, b) => a + b, 0) - Math.max(...m.values());
  const photosOf = new Map<number, number>();
  for (const w of who.values()) photosOf.set(w, (photosOf.get(w) ?? 0) + 1);
  const several = [...photosOf].filter(([, n]) => n >= 2).map(([w]) => w);
  const spread = several.filter((w) => personsOfWho.get(w)!.size > 1).length;
  return {
    threshold,
    persons: members.size,
    mixedPersons: [...members.values()].filter((m) => m.size > 1).length / members.size,
    strayedSightings: strayed / person.size,
    split: spread / several.length,
    whole: (several.length - spread) / several.length,
    sightingsPerSecond: person.size / seconds,
  };
}

async function main() {
  const root = findProjectRoot();
  const config = loadConfig();
  const lfwDir = arg('lfw') ?? path.resolve(root, '../shared/testdata/lfw');
  const missing = lfwMissing(lfwDir);
  if (missing.length) throw new Error(`LFW is not at ${lfwDir}: missing ${missing.join(', ')}`);
  const people = numberArg('people', 2000);
  const parts = new Set((arg('parts') ?? 'grouping,rate,cost').split(','));
  const set = limitPeople(loadLfw(lfwDir), people);
  const report: Record<string, unknown> = { date: new Date().toISOString(), machine: machineLine(describeMachine()), people: set.names.length, photos: set.files.length };
  console.log(`persons formed by strangers; ${report.machine}`);

  // The recogniser the service chooses on this host, unless asked for another.
  const probe = await startBenchService('persons-bench', {});
  const serviceRecognizer = ((await (await fetch(`${probe.base}/health`)).json()) as { engine?: { recognizer?: string } }).engine?.recognizer;
  await probe.stop();
  const mode = resolveRecognizerMode(config.modelDir, arg('mode') ?? serviceRecognizer ?? 'sface:mirror');
  if (mode.unavailable) throw new Error(`recogniser ${mode.mode}: ${mode.unavailable}`);
  const { engine, emb } = await embedLfwSet(config, set, mode, root, `first${set.names.length}people`, (l) => console.log(l));
  const recognizer = engine.info().recognizer;
  engine.close();
  const calibration = calibrationOf(recognizer);
  const dim = emb.dim;
  const rows = [...emb.found.keys()].filter((i) => emb.found[i]);
  const order = [...rows];
  const rng = new Rng(35);
  for (let i = order.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [order[i], order[j]] = [order[j], order[i]];
  }
  console.log(`${recognizer}: ${set.files.length} photos of ${set.names.length} people, a face on ${rows.length}; recorded in a seeded random order`);
  report.recognizer = recognizer;

  // 1. Grouping accuracy per threshold.
  const thresholds = parts.has('grouping') ? (arg('thresholds') ?? 'strict,medium,low').split(',') : [];
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'persons-bench-'));
  const database = await openDatabase({ dataDir, dbPool: 8 });
  const grouped: Grouped[] = [];
  try {
    const history = new HistoryStore(database.db.sql, { sightings: config.history.friendSightings, windowS: config.history.friendWindowS });
    for (const t of thresholds) {
      const threshold: ThresholdPreset | number = /^[a-z]+$/.test(t) ? (t as ThresholdPreset) : Number(t);
      await database.db.owner`TRUNCATE sighting_thumbnails, sightings, persons RESTART IDENTITY CASCADE`;
      const strangers = await StrangerIndex.open({ dims: dim, rerank: config.index.rerank }, historyStrangers(history, recognizer));
      const grouping = groupingOf({ strangers, history, model: recognizer, calibration, threshold, windowS: 0, retentionS: 0 });
      const who = new Map<number, number>();
      const started = performance.now();
      for (const i of order) {
        const vector = emb.emb.subarray(i * dim, (i + 1) * dim);
        const [e] = await recordGrouped(grouping, [{ vector, quality: 1 }], (group) =>
          history.events.recordWith(FIRST_TENANT, (tx) => group(tx, { tenant: FIRST_TENANT, camId: 'lfw', photoHash: HASH, photoKept: false, faces: [{ box: { x1: 0, y1: 0, x2: 1, y2: 1 }, thumbnail: JPEG }] })),
        );
        who.set(e.id, set.person[i]);
      }
      const seconds = (performance.now() - started) / 1000;
      const g = score(t, who, await personsNow(history), seconds);
      strangers.close();
      grouped.push(g);
      console.log(
        `  ${t} (${resolveIdentifyThreshold(threshold, rows.length, calibration)?.toFixed(4)} at N=${rows.length}): ${g.persons} persons; false merges: ${pct(g.mixedPersons)} of persons, ${pct(g.strayedSightings)} of sightings; ` +
          `split ${pct(g.split)}, whole ${pct(g.whole)} of people with 2+ photos; ${g.sightingsPerSecond.toFixed(0)} sightings/s recorded`,
      );
    }
  } finally {
    await database.db.close();
    await database.embedded?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
  report.grouping = grouped;

  // 2. Sighting rate through the service, with grouping and without.
  const photos = order.slice(0, numberArg('rate-photos', 300)).map((i) => readFileSync(path.join(lfwDir, 'images', set.files[i])));
  const clients = numberArg('clients', 4);
  const rates: Record<string, number[]> = { grouping: [], off: [] };
  for (let round = 0; round < (parts.has('rate') ? numberArg('rounds', 2) : 0); round++) {
    for (const [name, env] of [
      ['grouping', {}],
      ['off', { FACE_PERSON_THRESHOLD: 'off' }],
    ] as const) {
      const svc = await startBenchService('persons-bench', { FACE_RECOGNIZER: recognizer, ...env });
      try {
        const started = performance.now();
        await inParallel(photos, clients, async (photo) => {
          const body = new FormData();
          body.append('photo', new Blob([new Uint8Array(photo)], { type: 'image/jpeg' }));
          body.append('cam_id', 'lfw');
          const res = await fetch(`${svc.base}/v0/identify/`, { method: 'POST', body, headers: { Authorization: `Token ${svc.token}` } });
          await res.arrayBuffer();
          if (res.status !== 200) throw new Error(`identify answered ${res.status}`);
        });
        rates[name].push(photos.length / ((performance.now() - started) / 1000));
      } finally {
        await svc.stop();
      }
    }
  }
  const best = (xs: number[]) => Math.max(...xs);
  if (parts.has('rate')) console.log(
    `\nsightings/s through POST /v0/identify/ with cam_id, ${photos.length} photos, ${clients} clients (best of ${rates.off.length} rounds): grouping ${best(rates.grouping).toFixed(1)}, ` +
      `off ${best(rates.off).toFixed(1)} (${(best(rates.grouping) / best(rates.off)).toFixed(2)}x); rounds: ${JSON.stringify(rates)}`,
  );
  report.rate = { photos: photos.length, clients, ...rates };

  // 3. Cost per sighting as the strangers grow (synthetic representatives).
  const unit = (n: number) => {
    const v = new Float32Array(n * dim);
    for (let k = 0; k < n; k++) {
      let norm = 0;
      for (let j = 0; j < dim; j++) norm += (v[k * dim + j] = rng.next() - 0.5) ** 2;
      for (let j = 0; j < dim; j++) v[k * dim + j] /= Math.sqrt(norm);
    }
    return v;
  };
  const costs: { size: number; searchMs: number; addMs: number; heldMiB: number }[] = [];
  for (const size of parts.has('cost') ? (arg('sizes') ?? '10000,1000000').split(',').map(Number) : []) {
    const rssBefore = process.memoryUsage().rss;
    const synthetic: StrangerSource = {
      newest: async () => size,
      async *representatives() {
        for (let from = 0; from < size; from += 20_000) {
          const n = Math.min(20_000, size - from);
          const v = unit(n);
          yield Array.from({ length: n }, (_, k) => ({ sightingId: from + k + 1, tenant: FIRST_TENANT, person: from + k + 1, quality: 1, seenAt: 0, vector: v.subarray(k * dim, (k + 1) * dim) }));
        }
      },
      after: async () => [],
      kept: async (ids) => ids,
    };
    const strangers = await StrangerIndex.open({ dims: dim, rerank: config.index.rerank }, synthetic);
    // What the process holds for them: the index's codes and vectors, and the representatives' records.
    const heldMiB = (process.memoryUsage().rss - rssBefore) / 2 ** 20;
    const probes = unit(200);
    let search = 0;
    let add = 0;
    for (let k = 0; k < 200; k++) {
      const vector = probes.subarray(k * dim, (k + 1) * dim);
      // Searched as a grouping step searches; its database part (the newest sighting since the
      // last step, and the persons of at most 16 matches by id) reads the same rows at any size.
      const t0 = performance.now();
      await strangers.search(vector, 16, strangers.lastSighting(), -Infinity, FIRST_TENANT);
      const t1 = performance.now();
      await strangers.add([{ sightingId: size + k + 1, tenant: FIRST_TENANT, person: size + k + 1, quality: 1, seenAt: 0, vector }]);
      add += performance.now() - t1;
      search += t1 - t0;
    }
    strangers.close();
    costs.push({ size, searchMs: search / 200, addMs: add / 200, heldMiB });
    console.log(
      `strangers' index at ${size} representatives: search ${(search / 200).toFixed(3)} ms, add ${(add / 200).toFixed(3)} ms per sighting; ` +
        `${heldMiB.toFixed(0)} MiB more resident once filled`,
    );
  }
  report.cost = costs;
  const json = arg('json');
  if (json) saveJson(json, report);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
