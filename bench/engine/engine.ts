/**
 * Engine throughput through the addon (no HTTP), with tinybench, for several
 * pipelines side by side in one run:
 *
 *   node dist/bench/engine/engine.js [--time MS] [--pipelines new,new-1x2,old] [--base old]
 *
 * Pipelines: `new` is YuNet + SFace with two inference workers of one ONNX
 * Runtime thread each, `new-1x2` the same models with one worker of two
 * threads, `old` the previous pack (BlazeFace tiles + FaceRes) as it was
 * configured (one worker of two threads); `mirror` and `accurate` are the
 * recogniser modes `sface:mirror` and `accurate` (SFace mirrored + dlib's
 * ResNet, needs `npm run models -- --all`) on the `new` shape, for what each
 * mode costs per face (`--pipelines new,mirror,accurate --base new`). Tasks,
 * on the six demo photos:
 * - detect: photos/s (decode + detection), 1 and 4 in flight;
 * - embed: faces/s with the faces given as boxes (decode + alignment +
 *   recogniser), one face per call (batch 1), then a five-face group photo
 *   per call with 16 calls in flight, so the batching queue merges faces;
 * - detect + embed: photos/s for the whole identify path of a demo photo,
 *   4 in flight.
 * Printed as one table with each pipeline's ratio to the `--base` pipeline's
 * rate (default `old`, else the first pipeline). `old` needs
 * `npm run models -- --all`; without its models it is left out by default.
 */
import os from 'node:os';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Bench } from 'tinybench';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import { engineOptionsFrom, openEngine, type EngineOptions } from '../../src/native/engine.js';
import { numberArg, optionArg } from '../lib/args.js';

const PIPELINES: Record<string, Partial<EngineOptions>> = {
  new: { inferenceWorkers: 2, intraThreads: 1 },
  'new-1x2': { inferenceWorkers: 1, intraThreads: 2 },
  old: { detector: 'blazeface-back', recognizer: 'faceres', inferenceWorkers: 1, intraThreads: 2 },
  mirror: { recognizer: 'sface:mirror', inferenceWorkers: 2, intraThreads: 1 },
  accurate: { recognizer: 'accurate', inferenceWorkers: 2, intraThreads: 1 },
};

interface Row {
  pipeline: string;
  task: string;
  unit: string;
  perSecond: number;
  msPerCall: number;
  samples: number;
}

async function main() {
  const root = findProjectRoot();
  const config = loadConfig();
  const time = numberArg('time', 3000);
  // `old` runs models that `npm install` does not convert: it is left out by default until they are.
  const oldConverted = ['blazeface-back', 'faceres'].every((id) => existsSync(path.join(config.modelDir, 'onnx', `${id}.onnx`)));
  if (!oldConverted && !optionArg('pipelines')) console.log('old: left out, its models are not converted (npm run models -- --all converts them)');
  const names = (optionArg('pipelines') ?? (oldConverted ? 'new,new-1x2,old' : 'new,new-1x2')).split(',');
  const base = optionArg('base') ?? (names.includes('old') ? 'old' : names[0]);
  const photos = [1, 2, 3, 4, 5, 6].map((i) => readFileSync(path.join(root, 'node_modules/@vladmandic/face-api/demo', `sample${i}.jpg`)));
  const none = { embed: false, age: false, gender: false, emotions: false };
  const rows: Row[] = [];
  console.log(`machine: ${os.cpus()[0]?.model ?? 'unknown cpu'}, ${os.availableParallelism()} cores, load ${os.loadavg()[0].toFixed(2)}`);

  for (const name of names) {
    const overrides = PIPELINES[name];
    if (!overrides) throw new Error(`unknown pipeline ${name} (known: ${Object.keys(PIPELINES).join(', ')})`);
    const engine = await openEngine(engineOptionsFrom(config, overrides));
    const info = engine.info();
    console.log(
      `${name}: ${info.models.map((m) => m.id).join(' + ')} (recogniser ${info.recognizer}), ${info.dim}-d, ${overrides.inferenceWorkers} workers x ` +
        `${overrides.intraThreads} threads, providers ${info.providers.join(',')}, simd ${info.simd}`,
    );
    const boxes = await Promise.all(photos.map(async (p) => (await engine.analyze(p, none)).faces.map((f) => [f.x1, f.y1, f.x2, f.y2])));
    const group = 4; // sample5: five faces
    const groupFaces = boxes[group].length;
    // tinybench runs at least `iterations` samples: keep it low, time decides the rest.
    const bench = new Bench({ time, iterations: 2, warmupTime: 200, warmupIterations: 1 });
    const units: Record<string, [number, string]> = {};
    const add = (task: string, perCall: number, unit: string, fn: () => Promise<unknown>) => {
      units[task] = [perCall, unit];
      bench.add(task, fn);
    };
    let k = 0;
    const next = () => photos[k++ % photos.length];
    add('detect, 1 in flight', 1, 'photos', () => engine.analyze(next(), none));
    add('detect, 4 in flight', 4, 'photos', () => Promise.all([0, 1, 2, 3].map(() => engine.analyze(next(), none))));
    add('embed 1 face, 1 in flight', 1, 'faces', () => engine.analyze(photos[group], { ...none, embed: true, boxes: [boxes[group][0]] }));
    add(`embed ${groupFaces} faces, 16 in flight`, groupFaces * 16, 'faces', () =>
      Promise.all(Array.from({ length: 16 }, () => engine.analyze(photos[group], { ...none, embed: true, boxes: boxes[group] }))),
    );
    add('detect + embed, 4 in flight', 4, 'photos', () =>
      Promise.all([0, 1, 2, 3].map(() => engine.analyze(next(), { ...none, embed: true }))),
    );
    await bench.run();
    for (const t of bench.tasks) {
      const r = t.result as { latency?: { mean: number }; period?: number } | undefined;
      const ms = r?.latency?.mean ?? r?.period ?? NaN;
      const [perCall, unit] = units[t.name];
      rows.push({ pipeline: name, task: t.name.replace(/embed \d+ faces/, 'embed group'), unit, perSecond: (perCall * 1000) / ms, msPerCall: ms, samples: t.runs });
    }
    engine.close();
  }

  const baseline = new Map(rows.filter((r) => r.pipeline === base).map((r) => [r.task, r.perSecond]));
  console.table(
    rows.map((r) => ({
      pipeline: r.pipeline,
      task: r.task,
      [`per second`]: `${r.perSecond.toFixed(1)} ${r.unit}`,
      'ms/call': r.msPerCall.toFixed(1),
      [`x ${base}`]: baseline.has(r.task) ? (r.perSecond / (baseline.get(r.task) ?? NaN)).toFixed(2) : '',
      samples: r.samples,
    })),
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
