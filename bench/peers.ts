/**
 * Our service and engine next to their peers, same photos, same machine, in
 * one run; every peer is reported as a ratio to ours:
 *
 *   npm run bench:peers -- [engines|http|search|all] [--rounds N] [--seconds S]
 *                          [--concurrency N] [--n N] [--queries Q] [--near SIGMA] [--no-ours-index]
 *
 * - engines: detection + descriptor per demo photo: ours (addon) against
 *   face-api.js (SSD-MobileNetV1 + 128-d) and Human (the same blazeface-back +
 *   faceres our models are converted from), both on TFJS's WASM backend.
 * - http: GET /v0/face/id/<id>/ through the service (uWebSockets.js) against
 *   the same token check, query and rendering on node:http, same PostgreSQL.
 * - search: `cargo run --release -p face-index --example bench` (ours) then
 *   bench/peers/search.py (numpy, FAISS, hnswlib) on the same vectors, at the
 *   recall@10 ours reached. Needs bench/.venv (see bench/RESULTS.md).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot } from '../src/config.js';
import { progressBar, runLoad, type LoadResult } from './http-load.js';
import { Client, demoPhotos, printReport } from './load.js';
import { describeMachine, machineLine } from './machine.js';
import { freePort, startBenchService, waitForHealth } from './service.js';

const root = findProjectRoot();
const argv = process.argv.slice(2);
const what = argv[0] && !argv[0].startsWith('--') ? argv[0] : 'all';
const num = (name: string, fallback: number) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const ratio = (peer: number, ours: number) => `${(peer / ours).toFixed(2)}x`;

interface EngineRow {
  pipeline: string;
  version: string;
  backend: string;
  inflight: number;
  images: number;
  facesPerPhoto: number[];
  dim: number;
  imagesPerS: number;
  msPerImage: number;
  decodeMsPerImage: number;
}

function runEngine(which: string, rounds: number, inflight = 1): EngineRow {
  const out = execFileSync(process.execPath, [path.join(root, 'dist/bench/peers/engines.js'), which, '--rounds', String(rounds), '--inflight', String(inflight)], {
    env: { ...process.env, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 600_000,
  });
  const line = out.toString().trim().split('\n').find((l) => l.startsWith('{"pipeline"'));
  if (!line) throw new Error(`${which}: no result`);
  return JSON.parse(line) as EngineRow;
}

async function engines() {
  const rounds = num('rounds', 2);
  const rows: EngineRow[] = [];
  for (const [which, inflight] of [
    ['ours', 1],
    ['ours', 6],
    ['face-api', 1],
    ['human', 1],
  ] as const) {
    process.stderr.write(`engines: ${which}, ${inflight} in flight, ${rounds} x 6 photos...\n`);
    rows.push(runEngine(which, rounds, inflight));
  }
  const base = rows[0];
  console.log(`\nengines: detection + descriptor per photo, ${rounds} x 6 demo photos (one untimed warm-up pass)`);
  console.table(
    rows.map((r) => ({
      pipeline: `${r.pipeline}, ${r.inflight} in flight`,
      backend: r.backend,
      version: r.version,
      'faces per photo': r.facesPerPhoto.join(','),
      dim: r.dim,
      'images/s': Number(r.imagesPerS.toFixed(2)),
      'ms/image': Number(r.msPerImage.toFixed(0)),
      'of which jpeg decode ms': Number(r.decodeMsPerImage.toFixed(0)),
      'images/s vs ours (1 in flight)': ratio(r.imagesPerS, base.imagesPerS),
    })),
  );
  return rows;
}

async function httpPeers() {
  const seconds = num('seconds', 5);
  const concurrency = num('concurrency', 16);
  const token = 'bench-token';
  const service = await startBenchService(token);
  const port = await freePort();
  const peer = spawn(process.execPath, [path.join(root, 'dist/bench/peers/node-http.js')], {
    env: { ...process.env, PORT: String(port), DATABASE_URL: service.databaseUrl, FACE_TOKEN: token, LOG_LEVEL: 'silent' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const results: LoadResult[] = [];
  try {
    const peerBase = `http://127.0.0.1:${port}`;
    await waitForHealth(peerBase, 30_000);
    const ours = new Client(service.base, token, demoPhotos());
    const ids = await ours.seed('bench-http');
    const node = new Client(peerBase, token, []);
    for (const [label, c] of [
      ['uWebSockets.js (service)', ours],
      ['node:http (same handler)', node],
    ] as const) {
      // Warm both: the first requests open pool connections and JIT the handlers.
      await runLoad({ name: 'warm', concurrency, requests: 200, seconds: 5, send: (i) => c.status('GET', `/v0/face/id/${ids[i % ids.length]}/`) });
      const bar = progressBar(label);
      results.push(
        await runLoad({
          name: `GET /v0/face/id/<id>/ ${label}`,
          concurrency,
          seconds,
          send: (i) => c.status('GET', `/v0/face/id/${ids[i % ids.length]}/`),
          progress: bar?.update,
        }),
      );
      bar?.done();
    }
  } finally {
    peer.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 200));
    await service.stop();
  }
  console.log(`\nhttp: authenticated GET of one stored face (PostgreSQL read + JSON), ${concurrency} clients, ${seconds} s each`);
  printReport(describeMachine(), results);
  const [u, n] = results;
  console.log(`node:http vs ours: req/s ${ratio(n.perSecond, u.perSecond)}, p50 ${ratio(n.p50, u.p50)}, p99 ${ratio(n.p99, u.p99)}`);
  return results;
}

function search() {
  const n = num('n', 100_000);
  const queries = num('queries', 200);
  const nearAt = argv.indexOf('--near');
  const near = nearAt >= 0 ? ['--near', argv[nearAt + 1]] : [];
  let target = 0.95;
  if (!argv.includes('--no-ours-index')) {
    const cargo = spawnSync('cargo', ['run', '--release', '-q', '-p', 'face-index', '--example', 'bench', '--', '--n', String(n), '--dim', '1024', '--queries', String(queries), '--kinds', 'f32,i8', ...near], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'inherit'],
      timeout: 1_800_000,
    });
    const text = cargo.stdout?.toString() ?? '';
    console.log(text);
    if (cargo.status !== 0) throw new Error('the face-index benchmark failed');
    // The f32 row's recall@10 (10th column) is the recall the peers must reach.
    const row = text.split('\n').find((l) => l.startsWith('| usearch f32'));
    const cells = row?.split('|').map((c) => c.trim());
    if (cells && Number(cells[10]) > 0) target = Number(cells[10]);
  }
  const py = path.join(root, 'bench/.venv/bin/python');
  if (!existsSync(py)) throw new Error('bench/.venv is missing: python3 -m venv bench/.venv && bench/.venv/bin/pip install -r bench/peers/requirements.txt');
  const res = spawnSync(py, [path.join(root, 'bench/peers/search.py'), '--n', String(n), '--queries', String(queries), '--target-recall', String(target), ...near], {
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 1_800_000,
  });
  const out = res.stdout?.toString() ?? '';
  console.log(out.split('\n').filter((l) => !l.startsWith('JSON ')).join('\n'));
  if (res.status !== 0) throw new Error('search.py failed');
  console.log(`peers run at the smallest ef reaching recall@10 ${target} (ours' f32 recall when the Rust benchmark ran)`);
}

async function main() {
  console.log(machineLine(describeMachine({ '@vladmandic/face-api': '1.7.15', '@vladmandic/human': '3.3.6', '@tensorflow/tfjs-backend-wasm': '4.22.0' })));
  if (what === 'engines' || what === 'all') await engines();
  if (what === 'http' || what === 'all') await httpPeers();
  if (what === 'search' || what === 'all') search();
  if (!['engines', 'http', 'search', 'all'].includes(what)) throw new Error(`unknown comparison ${what}`);
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
