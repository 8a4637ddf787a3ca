/**
 * Our service and engine next to their peers, same photos, same machine, in
 * one run; every peer is reported as a ratio to ours:
 *
 *   npm run bench:peers -- [engines|http|search|all] [--rounds N] [--seconds S]
 *                          [--concurrency N] [--cpu-prof DIR] [--n N] [--queries Q] [--near SIGMA]
 *                          [--ef 64,128,...] [--target-recall R] [--kinds f32,i8] [--no-ours-index]
 *
 * - engines: detection + descriptor per demo photo: ours (addon) against
 *   face-api.js (SSD-MobileNetV1 + 128-d) and Human (the same blazeface-back +
 *   faceres our models are converted from), both on TFJS's WASM backend.
 * - http: GET /v0/face/id/<id>/ through the service (uWebSockets.js) against
 *   the same token check, query and rendering on bare uWebSockets.js and on
 *   node:http, same PostgreSQL, with CPU per request of every process (/proc).
 *   The load is autocannon's (--concurrency connections, default 32), in
 *   --rounds (default 3) of --seconds (default 5) per server, interleaved;
 *   each server's median round is reported. --cpu-prof DIR has every server
 *   write a V8 CPU profile into DIR.
 * - search: `cargo run --release -p face-index --example bench` (ours) then
 *   bench/peers/search.py (numpy, FAISS, hnswlib) on the same vectors, at the
 *   recall@10 ours reached, in one table with each row's latency as a ratio to
 *   ours (f32). --ef sweeps our candidate list up to --target-recall (0.95).
 *   Needs bench/.venv (see bench/README.md).
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot } from '../../src/config/index.js';
import { Client, demoPhotos, readPaths } from '../../test/harness/http/client.js';
import { generatorLine, printReport, progressBar, runLoad, type LoadResult } from '../../test/harness/http/http-load.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { cpuDelta, cpuSnapshot, type Groups } from '../../test/harness/proc-cpu.js';
import { cpuProfArgs, freePort, startBenchService, waitForHealth } from '../../test/harness/load-service.js';

const root = findProjectRoot();
const argv = process.argv.slice(2);
const what = argv[0] && !argv[0].startsWith('--') ? argv[0] : 'all';
const num = (name: string, fallback: number) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const str = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
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
  const concurrency = num('concurrency', 32);
  const rounds = Math.max(1, Math.round(num('rounds', 3)));
  const token = 'bench-token';
  // --cpu-prof DIR: every server writes a V8 CPU profile there when it stops (read it with dist/bench/http/flame.js).
  const profDir = str('cpu-prof');
  if (profDir) mkdirSync(profDir, { recursive: true });
  const service = await startBenchService(token, {}, cpuProfArgs(profDir, 'service-uws'));
  // Two peers with the service's own token check, query and rendering: bare uWebSockets.js and node:http.
  const peers: { label: string; base: string; child: ChildProcess; prof: string }[] = [];
  const servers = () => [{ label: 'uWebSockets.js (service)', base: service.base, pid: service.child.pid }, ...peers.map((p) => ({ label: p.label, base: p.base, pid: p.child.pid }))];
  // Per server, one entry per round: the load result and the CPU by process group over it.
  const runs = new Map<string, { r: LoadResult; cpu?: Groups }[]>();
  try {
    for (const [label, file, prof] of [
      ['uWebSockets.js bare (same handler)', 'uws-http', 'peer-uws-bare'],
      ['node:http (same handler)', 'node-http', 'peer-node-http'],
    ]) {
      // One at a time: a port is only free until someone listens on it.
      const port = await freePort();
      const child = spawn(process.execPath, [...cpuProfArgs(profDir, prof), path.join(root, `dist/bench/peers/${file}.js`)], {
        env: { ...process.env, PORT: String(port), DATABASE_URL: service.databaseUrl, FACE_TOKEN: token, LOG_LEVEL: 'silent' },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      peers.push({ label, base: `http://127.0.0.1:${port}`, child, prof });
      await waitForHealth(peers.at(-1)!.base, 30_000);
    }
    const ours = new Client(service.base, token, demoPhotos());
    const ids = await ours.seed('bench-http');
    const fixed = readPaths(ids).map((p) => ({ path: p }));
    const named: Record<number, string> = { [process.pid]: 'load generator' };
    for (const s of servers()) if (s.pid) named[s.pid] = s.label;
    for (const s of servers()) {
      // Warm each (2 s): the first requests open pool connections and JIT the handlers.
      await runLoad({ name: 'warm', base: s.base, headers: ours.auth, fixed, connections: concurrency, seconds: 2 });
      runs.set(s.label, []);
    }
    // Rounds interleave the servers, so that a change in the machine's other load hits all of them alike.
    for (let round = 0; round < rounds; round++) {
      for (const s of servers()) {
        const bar = progressBar(`${s.label}, round ${round + 1}/${rounds}`);
        const before = cpuSnapshot(named);
        const r = await runLoad({ name: `GET /v0/face/id/<id>/ ${s.label}`, base: s.base, headers: ours.auth, fixed, connections: concurrency, seconds, progress: bar?.update });
        bar?.done();
        const after = cpuSnapshot(named);
        runs.get(s.label)!.push({ r, cpu: before && after ? cpuDelta(before, after) : undefined });
      }
    }
  } finally {
    // A profile is written at exit, so wait for the peers (bounded: a stuck one must not hang the run).
    await Promise.all(
      peers.map(async ({ child }) => {
        const exited = new Promise((r) => (child.exitCode !== null ? r(undefined) : child.once('exit', r)));
        child.kill('SIGTERM');
        await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      }),
    );
    await service.stop();
  }
  if (profDir) console.log(`cpu profiles in ${profDir}: service-uws, ${peers.map((p) => p.prof).join(', ')} (.cpuprofile; node dist/bench/http/flame.js <file>)`);
  console.log(`\nhttp: authenticated GET of one stored face (PostgreSQL read + JSON), autocannon, ${concurrency} connections, ${rounds} round(s) of ${seconds} s per server, interleaved`);
  // Each server's middle round by req/s stands for it (with 1 or 2 rounds, the first).
  const median = (label: string) => {
    const list = [...runs.get(label)!].sort((a, b) => a.r.perSecond - b.r.perSecond);
    return list[Math.floor((list.length - 1) / 2)];
  };
  const labels = servers().map((s) => s.label);
  const chosen = labels.map(median);
  const results = chosen.map((c) => c.r);
  printReport(describeMachine(), results);
  if (rounds > 1) for (const l of labels) console.log(`${l}: req/s by round ${runs.get(l)!.map((x) => x.r.perSecond.toFixed(0)).join(', ')}`);
  const [u, ...others] = results;
  for (const o of others) console.log(`${o.name.replace('GET /v0/face/id/<id>/ ', '')} vs ours: req/s ${ratio(o.perSecond, u.perSecond)}, p50 ${ratio(o.p50, u.p50)}, p99 ${ratio(o.p99, u.p99)}`);
  for (const [i, r] of results.entries()) console.log(`${labels[i]} run: ${generatorLine(r.generator)}`);
  if (chosen.every((c) => c.cpu)) {
    // CPU microseconds per request, by process group, during each chosen run (from /proc).
    const groups = ['load generator', ...labels, 'PostgreSQL', 'other processes', 'machine busy', 'machine idle'];
    const us = (g: Groups, r: LoadResult, k: string) => Math.round(((g[k] ?? 0) * 1e6) / r.requests);
    console.log('\nCPU per request (µs, from /proc; "machine" rows are all cores together)');
    console.table(groups.map((k) => Object.fromEntries([['process', k], ...labels.map((l, i) => [`${l} run`, us(chosen[i].cpu!, results[i], k)])])));
  }
  return results;
}

interface SearchRow {
  method: string;
  param: string;
  buildS: number;
  p50: number;
  p99: number;
  recall1: number;
  recall10: number;
}

/** Rows of the face-index benchmark's markdown table (method, build s, 4 memory columns, p50, p99, recall@1, recall@10, vs brute). */
function parseRustRows(text: string): SearchRow[] {
  return text
    .split('\n')
    .filter((l) => /^\| (brute|usearch)/.test(l))
    .map((l) => {
      const c = l.split('|').map((x) => x.trim());
      const ef = /ef (\d+)$/.exec(c[1]);
      const method = `ours: ${c[1].replace(/ ef \d+$/, '').replace('brute f32 (1 thread)', 'brute force f32, 1 thread')}`;
      return { method, param: ef ? `ef ${ef[1]}` : '', buildS: Number(c[2]), p50: Number(c[7]), p99: Number(c[8]), recall1: Number(c[9]), recall10: Number(c[10]) };
    });
}

function search() {
  const n = num('n', 100_000);
  const queries = num('queries', 200);
  const nearAt = argv.indexOf('--near');
  const near = nearAt >= 0 ? ['--near', argv[nearAt + 1]] : [];
  // --ef 64,128,...: sweep ours over these candidate lists (one build, reloaded per value) and stop at
  // --target-recall (default 0.95); the peers then sweep theirs to the recall ours reached.
  const efList = str('ef');
  const asked = str('target-recall');
  let target = asked !== undefined ? Number(asked) : 0.95;
  const rows: SearchRow[] = [];
  if (!argv.includes('--no-ours-index')) {
    const sweep = efList ? ['--expansion-search', efList, '--target-recall', String(target)] : [];
    const kinds = str('kinds') ?? 'f32,i8';
    const cargo = spawnSync(
      'cargo',
      ['run', '--release', '-q', '-p', 'face-index', '--example', 'bench', '--', '--n', String(n), '--dim', '1024', '--queries', String(queries), '--kinds', kinds, ...sweep, ...near],
      { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], timeout: 3_600_000 },
    );
    const text = cargo.stdout?.toString() ?? '';
    console.log(text);
    if (cargo.status !== 0) throw new Error('the face-index benchmark failed');
    rows.push(...parseRustRows(text));
    // Peers must reach the recall@10 of our last (swept-to) f32 row, unless a target was given.
    const f32 = rows.filter((r) => r.method.startsWith('ours: usearch f32')).at(-1);
    if (asked === undefined && f32 && f32.recall10 > 0) target = f32.recall10;
  }
  const py = path.join(root, 'bench/.venv/bin/python');
  if (!existsSync(py)) throw new Error('bench/.venv is missing: python3 -m venv bench/.venv && bench/.venv/bin/pip install -r bench/peers/requirements.txt');
  const res = spawnSync(py, [path.join(root, 'bench/peers/search.py'), '--n', String(n), '--queries', String(queries), '--target-recall', String(target), ...near], {
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 3_600_000,
  });
  const out = res.stdout?.toString() ?? '';
  console.log(out.split('\n').filter((l) => !l.startsWith('JSON ')).join('\n'));
  if (res.status !== 0) throw new Error('search.py failed');
  const json = out.split('\n').find((l) => l.startsWith('JSON '));
  if (json) {
    const peers = JSON.parse(json.slice(5)) as { rows: { method: string; param: string; build_s: number; p50_ms: number; p99_ms: number; recall1: number; recall10: number }[] };
    rows.push(...peers.rows.map((r) => ({ method: r.method, param: r.param, buildS: r.build_s, p50: r.p50_ms, p99: r.p99_ms, recall1: r.recall1, recall10: r.recall10 })));
  }
  const ours = rows.filter((r) => r.method.startsWith('ours: usearch f32')).at(-1);
  console.log(`\nsearch: ${n} faces, ${queries} ${near.length ? `near-duplicate (sigma ${near[1]})` : 'random'} queries, top 10, one query at a time; peers at the smallest ef reaching recall@10 ${target}`);
  console.table(
    rows.map((r) => ({
      method: r.method,
      param: r.param,
      'build s': Number(r.buildS.toFixed(1)),
      'p50 ms': Number(r.p50.toFixed(3)),
      'p99 ms': Number(r.p99.toFixed(3)),
      'recall@1': Number(r.recall1.toFixed(3)),
      'recall@10': Number(r.recall10.toFixed(3)),
      ...(ours ? { 'p50 vs ours f32': ratio(r.p50, ours.p50), 'p99 vs ours f32': ratio(r.p99, ours.p99) } : {}),
    })),
  );
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
