/**
 * The face database under load, against the real service in its own process:
 *
 *   node dist/bench/cluster/store.js [--faces 1000000] [--seconds 5]
 *
 * - adds/s of POST /v0/face/ (detection + embedding + store), and with the
 *   face given as `bbox` (embedding + store);
 * - GET /v0/face/id/<id>/ requests/s;
 * - the server's resident memory while it streams GET /v0/faces/ over
 *   `--faces` rows seeded straight into PostgreSQL.
 * The load is autocannon's (test/harness/http/http-load.ts); latencies are client-side,
 * over loopback.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findProjectRoot } from '../../src/config/index.js';
import { multipart } from '../../test/harness/http/raw-http.js';
import { generatorLine, printLoadTable, runLoad, type HttpRequest, type LoadResult } from '../../test/harness/http/http-load.js';
import { startBenchService } from '../../test/harness/load-service.js';
import { numberArg as arg } from '../lib/args.js';

const TOKEN = 'bench-token';
const AUTH = { Authorization: `Token ${TOKEN}` };

function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  return kb / 1024;
}

async function main() {
  const root = findProjectRoot();
  const faces = arg('faces', 1_000_000);
  const seconds = arg('seconds', 5);
  const service = await startBenchService(TOKEN);
  const { base, db, child } = service;
  const results: LoadResult[] = [];
  try {
    const photo = readFileSync(path.join(root, 'node_modules/@vladmandic/face-api/demo/sample2.jpg'));
    const upload = (extra: Record<string, string> = {}) => {
      const fd = new FormData();
      fd.append('photo', new Blob([new Uint8Array(photo)], { type: 'image/jpeg' }), 'photo.jpg');
      for (const [k, v] of Object.entries(extra)) fd.append(k, v);
      return fd;
    };
    const detected = await (await fetch(`${base}/v1/detect/`, { method: 'POST', headers: AUTH, body: upload() })).json();
    const f = detected.faces[0];
    const bbox = JSON.stringify([[f.x1, f.y1, f.x2, f.y2]]);

    // The same photo each time, as the load generator's multipart request.
    const uploadRequest = (extra: Record<string, string>): HttpRequest => {
      const { body, contentType } = multipart([{ name: 'photo', value: photo, filename: 'photo.jpg', type: 'image/jpeg' }, ...Object.entries(extra).map(([name, value]) => ({ name, value }))]);
      return { method: 'POST', path: '/v0/face/', headers: { 'Content-Type': contentType }, body };
    };
    results.push(
      await runLoad({ name: 'POST /v0/face/ (detect + embed + store), 4 connections', base, headers: AUTH, fixed: [uploadRequest({ meta: 'bench' })], connections: 4, requests: 24, seconds: 300 }),
    );
    results.push(
      await runLoad({ name: 'POST /v0/face/ with bbox (embed + store), 4 connections', base, headers: AUTH, fixed: [uploadRequest({ meta: 'bench', bbox })], connections: 4, requests: 60, seconds: 300 }),
    );
    const ids: number[] = (await db.owner`SELECT id FROM faces ORDER BY id`).map((r) => Number(r.id));
    results.push(
      await runLoad({ name: 'GET /v0/face/id/<id>/, 32 connections', base, headers: AUTH, fixed: ids.map((id) => ({ path: `/v0/face/id/${id}/` })), connections: 32, seconds }),
    );

    // Seed through SQL: one photo, `faces` rows with a 128-d zero SFace embedding.
    const t0 = performance.now();
    const [{ photo_hash: hash }] = await db.owner`SELECT photo_hash FROM faces LIMIT 1`;
    await db.owner`
      INSERT INTO faces (tenant_id, meta, photo, photo_hash, x1, y1, x2, y2, dim, embedding, model)
      SELECT 1, 'seed-' || (g % 1000), 'http://example.invalid/p.jpg', ${hash}, 10, 20, 110, 140, 128, decode(repeat('00', 512), 'hex'), 'sface'
      FROM generate_series(1, ${faces}) AS g`;
    const seedS = (performance.now() - t0) / 1000;

    const idle = rssMiB(child.pid!);
    let peak = idle;
    const sampler = setInterval(() => {
      peak = Math.max(peak, rssMiB(child.pid!));
    }, 50);
    const t1 = performance.now();
    const res = await fetch(`${base}/v0/faces/`, { headers: AUTH });
    let bytes = 0;
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) bytes += chunk.length;
    const listS = (performance.now() - t1) / 1000;
    clearInterval(sampler);

    console.log(`machine: ${os.cpus()[0]?.model ?? 'unknown cpu'}, ${os.availableParallelism()} cores, node ${process.version}`);
    printLoadTable(results);
    for (const r of results) console.log(`${r.name}: ${generatorLine(r.generator)}`);
    console.log(
      `listing ${faces + ids.length} faces: seeded in ${seedS.toFixed(1)} s; GET /v0/faces/ streamed ${(bytes / 2 ** 20).toFixed(0)} MiB ` +
        `in ${listS.toFixed(1)} s (status ${res.status}); server RSS ${idle.toFixed(0)} MiB before, ${peak.toFixed(0)} MiB peak`,
    );
  } finally {
    await service.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
