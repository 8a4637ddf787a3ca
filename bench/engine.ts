/**
 * Engine throughput through the addon (no HTTP), with tinybench:
 *
 *   node dist/bench/engine.js [--time MS]
 *
 * - detect: images/s for whole demo photos (decode + detection);
 * - embed: faces/s with the faces given as boxes (decode + alignment +
 *   recogniser), one face per call at one call in flight (batch 1), then a
 *   whole group photo per call and several calls in flight, so the
 *   recogniser's batching queue merges faces across requests.
 * Printed as a table with the ratios against batch 1.
 */
import os from 'node:os';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Bench } from 'tinybench';
import { findProjectRoot, loadConfig } from '../src/config.js';
import { engineOptionsFrom, openEngine } from '../src/native/engine.js';
import { numberArg as arg } from './args.js';

async function main() {
  const root = findProjectRoot();
  const config = loadConfig();
  const engine = await openEngine(engineOptionsFrom(config));
  const info = engine.info();
  const photos = [1, 2, 3, 4, 5, 6].map((i) => readFileSync(path.join(root, 'node_modules/@vladmandic/face-api/demo', `sample${i}.jpg`)));
  const none = { embed: false, age: false, gender: false, emotions: false };
  const boxes = await Promise.all(
    photos.map(async (p) => (await engine.analyze(p, none)).faces.map((f) => [f.x1, f.y1, f.x2, f.y2])),
  );
  const group = 4; // sample5: five faces
  const groupFaces = boxes[group].length;

  const time = arg('time', 3000);
  // tinybench runs at least `iterations` samples: keep it low, time decides the rest.
  const bench = new Bench({ time, iterations: 3, warmupTime: 200, warmupIterations: 1 });
  let k = 0;
  bench.add('detect: 1 photo, 1 in flight', async () => {
    const i = k++ % photos.length;
    await engine.analyze(photos[i], none);
  });
  bench.add('embed: 1 face, 1 in flight (batch 1)', async () => {
    await engine.analyze(photos[group], { ...none, embed: true, boxes: [boxes[group][0]] });
  });
  for (const inflight of [1, 4, 16]) {
    bench.add(`embed: ${groupFaces} faces, ${inflight} in flight (batched)`, async () => {
      await Promise.all(
        Array.from({ length: inflight }, () => engine.analyze(photos[group], { ...none, embed: true, boxes: boxes[group] })),
      );
    });
  }
  bench.add('detect+embed+age+gender+emotions: 1 photo', async () => {
    await engine.analyze(photos[group], { embed: true, age: true, gender: true, emotions: true });
  });
  await bench.run();

  const perTask: Record<string, number> = {
    'detect: 1 photo, 1 in flight': 1,
    'embed: 1 face, 1 in flight (batch 1)': 1,
    'embed: 5 faces, 1 in flight (batched)': groupFaces,
    'embed: 5 faces, 4 in flight (batched)': groupFaces * 4,
    'embed: 5 faces, 16 in flight (batched)': groupFaces * 16,
    'detect+embed+age+gender+emotions: 1 photo': 1,
  };
  console.log(
    `machine: ${os.cpus()[0]?.model ?? 'unknown cpu'}, ${os.availableParallelism()} cores; ` +
      `providers ${info.providers.join(',')}; simd ${info.simd}; recogniser ${info.recognizer} (${info.dim}-d); ` +
      `workers ${config.inferenceWorkers}, intra threads ${config.intraThreads}, max batch ${config.maxBatch}`,
  );
  const rows = bench.tasks.map((t) => {
    const r = t.result as { latency?: { mean: number; p50?: number; p99?: number }; period?: number } | undefined;
    const mean = r?.latency?.mean ?? r?.period ?? NaN; // ms per task
    const units = perTask[t.name] ?? 1;
    return { task: t.name, 'ms/task': mean.toFixed(1), 'units/s': ((units * 1000) / mean).toFixed(1), samples: t.runs };
  });
  console.table(rows);
  const batch1 = Number(rows[1]['units/s']);
  for (const r of rows.slice(2, 5)) console.log(`${r.task}: ${(Number(r['units/s']) / batch1).toFixed(2)}x batch 1 faces/s`);
  engine.close();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
