/**
 * Real face embeddings for the search-index benchmarks: every photo of LFW
 * (../shared/testdata/lfw) and of the labelled photos (../shared/testdata/faces)
 * through the service's detector and recogniser, the largest face of each.
 *
 *   node dist/bench/search/face-vectors.js [--lfw DIR] [--faces DIR] [--out FILE_STEM]
 *       [--inflight 8] [--workers 2] [--intra 1] [--recompute] [--lfw-limit N]
 *
 * Writes `<stem>.f32` and `<stem>.json`, by default bench/data/<recogniser>-real
 * (git-ignored: LFW is a research set and is not shipped):
 *
 * - `.f32`: count × dims little-endian float32, row-major, each row L2-normalised.
 * - `.json`: `{ format: 1, dims, count, model, detector, face: "largest",
 *   identity: number[count], file: string[count], names: string[], models,
 *   sources, created }`. `identity[r]` indexes `names`, or is -1 where the
 *   person is not known (unlabelled photos, group photos whose largest face
 *   could be either labelled person, and LFW photos whose largest face is not
 *   the centred one, which is the face LFW labels); `file[r]` is `lfw/<Name>/<Name>_nnnn.jpg`
 *   or `faces/<file>`. Photos where no face was found have no row; `sources`
 *   lists them.
 *
 * crates/index/examples/faces/mod.rs reads these files: it fits the synthetic
 * face generator to them, and the index benchmark (`--data sface`) uses them
 * as enrolled faces and queries (docs/face-vectors.md).
 *
 * Embeddings are cached under .bench-out/ as in bench/lib/lfw.ts, so a rerun only
 * rewrites the output; `--recompute` embeds again.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import { engineOptionsFrom, openEngine } from '../../src/native/engine.js';
import { parseOptions, runAsScript } from '../lib/args.js';
import { embedPhotos, lfwMissing, limitPeople, loadLfw, modelHashes, type EmbedOptions, type Embedded } from '../lib/lfw.js';
import { resolveRecognizerMode } from '../lib/recognizer-modes.js';

const USAGE = `node dist/bench/search/face-vectors.js [--recognizer sface] [--lfw DIR] [--faces DIR] [--out FILE_STEM] [--inflight 8] [--workers 2] [--intra 1] [--recompute] [--lfw-limit N] (a smoke test: the first N people)`;

interface Options {
  /** The recogniser mode to embed with (a spec or a manifest name). */
  recognizer: string;
  lfw: string;
  faces: string;
  out?: string;
  inFlight: number;
  workers: number;
  intra: number;
  recompute: boolean;
  /** Only the first this many LFW people (Infinity: all). */
  lfwLimit: number;
}

interface Label {
  file: string;
  identities: string[];
}

/**
 * Labelled identities that LFW holds under another name: the same person must be one
 * identity, or a labelled photo's nearest neighbour in LFW would count as a mismatch.
 */
const SAME_PERSON: Record<string, string> = { joe_biden: 'Joseph_Biden' };

function parseCli(argv: string[]): Options {
  const root = findProjectRoot();
  const o = parseOptions(argv, ['recognizer', 'lfw', 'faces', 'out', 'inflight', 'workers', 'intra', 'lfw-limit'], USAGE, ['recompute']);
  const int = (name: string, fallback: number) => {
    const v = o[name] === undefined ? fallback : Number(o[name]);
    if (!Number.isInteger(v) || v < 1) throw new Error(`--${name} must be a positive integer\n${USAGE}`);
    return v;
  };
  return {
    // The index benches read `bench/data/sface-real` (`--data sface`), whatever the service's recogniser is.
    recognizer: o.recognizer ?? 'sface',
    lfw: o.lfw ?? path.resolve(root, '../shared/testdata/lfw'),
    faces: o.faces ?? path.resolve(root, '../shared/testdata/faces'),
    out: o.out,
    inFlight: int('inflight', 8),
    workers: int('workers', 2),
    intra: int('intra', 1),
    recompute: o.recompute === 'true',
    lfwLimit: o['lfw-limit'] === undefined ? Infinity : int('lfw-limit', 1),
  };
}

async function main(opts: Options): Promise<number> {
  const root = findProjectRoot();
  const config = loadConfig();
  const missing = lfwMissing(opts.lfw);
  if (missing.length) {
    console.error(`LFW is missing: ${missing.join(' and ')} not found (see ../shared/testdata/lfw/README.md; --lfw DIR points elsewhere)`);
    return 2;
  }
  const labelsFile = path.join(opts.faces, 'labels.json');
  const labels: Label[] = existsSync(labelsFile) ? JSON.parse(readFileSync(labelsFile, 'utf8')) : [];
  if (!labels.length) console.log(`no labelled photos at ${opts.faces}: LFW only`);

  const manifest = JSON.parse(readFileSync(path.join(config.modelDir, 'manifest.json'), 'utf8')) as { defaults: { detector: string } };
  const detector = config.detector ?? manifest.defaults.detector;
  const mode = resolveRecognizerMode(config.modelDir, opts.recognizer);
  if (mode.unavailable) throw new Error(`recogniser ${opts.recognizer}: ${mode.unavailable}`);
  const recognizer = opts.recognizer;
  // A smoke test's subset never takes the place of the real set the index benches read.
  if (opts.lfwLimit !== Infinity && !opts.out) throw new Error(`--lfw-limit needs --out: bench/data holds the whole set\n${USAGE}`);
  const stem = path.resolve(opts.out ?? path.join(root, 'bench', 'data', `${recognizer}-real`));
  const shape = { inferenceWorkers: opts.workers, intraThreads: opts.intra };
  const engine = await openEngine(engineOptionsFrom(config, { ...shape, detector, recognizer }));
  const models = modelHashes(config.modelDir, [detector, ...mode.models]);
  const common: Omit<EmbedOptions, 'cache'> = {
    detector,
    recognizer,
    models,
    settings: { minFace: config.minFace, detectThreshold: config.detectThreshold ?? null },
    mirror: false,
    pick: 'largest',
    inFlight: opts.inFlight,
    engine: shape,
    force: opts.recompute,
    log: (line) => console.log(line),
    progressMs: 10_000,
  };
  const cache = (tag: string) => path.join(root, '.bench-out', `${tag}-${detector}+${recognizer}-largest`);

  const lfw = limitPeople(loadLfw(opts.lfw), opts.lfwLimit);
  console.log(
    `${detector} + ${recognizer}, largest face per photo: ${shape.inferenceWorkers} inference workers x ${shape.intraThreads} intra threads, ${opts.inFlight} in flight`,
  );
  console.log(`LFW: ${lfw.files.length} photos of ${lfw.names.length} people`);
  const lfwEmb = await embedPhotos(engine, path.join(opts.lfw, 'images'), lfw.files, { ...common, cache: cache('lfw') });
  report('LFW', lfwEmb);
  let labelled: Embedded | undefined;
  if (labels.length) {
    console.log(`labelled photos: ${labels.length}`);
    labelled = await embedPhotos(engine, opts.faces, labels.map((l) => l.file), { ...common, cache: cache('faces') });
    report('labelled photos', labelled);
  }
  engine.close();

  // Rows: every photo with a face, LFW first (sorted by person), then the labelled photos.
  const dims = lfwEmb.dim;
  const names = [...lfw.names];
  const nameIndex = new Map(names.map((n, i) => [n, i]));
  const identity: number[] = [];
  const file: string[] = [];
  const vectors: Float32Array[] = [];
  const take = (emb: Embedded, i: number) => vectors.push(unit(emb.emb.subarray(i * dims, (i + 1) * dims)));
  lfw.files.forEach((f, i) => {
    if (!lfwEmb.found[i]) return;
    // LFW names the face at the centre of the photo; a larger face elsewhere is someone else.
    identity.push(lfwEmb.centredNotBiggest[i] ? -1 : lfw.person[i]);
    file.push(`lfw/${f}`);
    take(lfwEmb, i);
  });
  labels.forEach((l, i) => {
    if (!labelled?.found[i]) return;
    let id = -1;
    // A group photo's largest face could be any of its people; only one-person labels name it.
    if (l.identities.length === 1) {
      const name = SAME_PERSON[l.identities[0]] ?? l.identities[0];
      let k = nameIndex.get(name);
      if (k === undefined) {
        k = names.push(name) - 1;
        nameIndex.set(name, k);
      }
      id = k;
    }
    identity.push(id);
    file.push(`faces/${l.file}`);
    take(labelled, i);
  });

  const count = vectors.length;
  const out = new Float32Array(count * dims);
  vectors.forEach((v, r) => out.set(v, r * dims));
  const perPerson = new Map<number, number>();
  for (const id of identity) if (id >= 0) perPerson.set(id, (perPerson.get(id) ?? 0) + 1);
  const multi = [...perPerson.values()].filter((n) => n >= 2);
  const sources = [
    {
      name: 'lfw',
      dir: opts.lfw,
      photos: lfw.files.length,
      embedded: lfw.files.length - noFace(lfwEmb).length,
      noFace: noFace(lfwEmb),
      largestNotCentred: lfw.files.filter((_, i) => lfwEmb.found[i] && lfwEmb.centredNotBiggest[i]),
    },
    ...(labelled ? [{ name: 'faces', dir: opts.faces, photos: labels.length, embedded: labels.length - noFace(labelled).length, noFace: noFace(labelled) }] : []),
  ];
  // dims and count first: they describe the .f32 file.
  const meta = {
    format: 1,
    dims,
    count,
    model: recognizer,
    detector,
    face: 'largest',
    identity,
    file,
    names,
    models,
    sources,
    created: new Date().toISOString(),
  };
  mkdirSync(path.dirname(stem), { recursive: true });
  writeFileSync(`${stem}.f32`, Buffer.from(out.buffer, out.byteOffset, out.byteLength));
  writeFileSync(`${stem}.json`, JSON.stringify(meta));
  console.log(
    `wrote ${stem}.f32 and .json: ${count} faces x ${dims} dims; ${perPerson.size} known people, ` +
      `${multi.length} of them with 2 or more photos (${multi.reduce((a, b) => a + b, 0)} photos); ` +
      `${identity.filter((i) => i < 0).length} faces of unknown people`,
  );
  return 0;
}

function noFace(e: Embedded): string[] {
  return e.files.filter((_, i) => !e.found[i]);
}

function report(what: string, e: Embedded) {
  const none = noFace(e);
  const multi = [...e.faces].filter((n) => n > 1).length;
  console.log(
    `  ${what}: ${e.files.length} photos in ${e.seconds.toFixed(0)} s (${e.photosPerSecond.toFixed(1)} photos/s${e.cached ? ', from the cache' : ''}); ` +
      `no face on ${none.length} (skipped); more than one face on ${multi}, the largest not the centred one on ${e.notBiggest}`,
  );
  if (none.length) console.log(`  no face: ${none.slice(0, 10).join(', ')}${none.length > 10 ? ', …' : ''}`);
}

/** The engine's rows are unit length already; renormalising in f64 makes the file's promise exact to f32 rounding. */
function unit(v: Float32Array): Float32Array {
  let s = 0;
  for (const x of v) s += x * x;
  const inv = 1 / Math.sqrt(s);
  return Float32Array.from(v, (x) => x * inv);
}

runAsScript(import.meta.url, () => parseCli(process.argv.slice(2)), main);
