/**
 * Cluster mode on one machine: one PostgreSQL, two API nodes (FACE_ROLE=api) and 1, 2 or 4
 * shard servers (FACE_ROLE=shard), every node a child process (`node dist/src/main.js`), over
 * the same F faces. FACE_SHARDS is 4 in every layout: one server holds shards 0-3, two hold
 * 0,1 and 2,3, four hold one each.
 *
 *   npm run bench:cluster -- [--faces 200000] [--layouts 1,2,4] [--seconds 20] [--shard-seconds 20]
 *       [--concurrency 8] [--dump DIR] [--seed 1] [--memory-gib 24] [--os-reserve-gib 2] [--json out.json]
 *   npm run bench:cluster -- --report out.json     # the report of a saved run again
 *
 * The database is filled without the models: F faces are copied straight into `faces` (model
 * sface, 128 float32 little-endian as bytea, one photos row they all point at, no gallery rows:
 * every face is in `default` only), and the change log is left as a deployment leaves it once
 * it has been pruned below the shards' snapshots: positions 1..F drawn and gone, the horizon at
 * F. A shard server with an empty data folder then refills its shards from the faces table
 * (search/index-sync.ts, search/healing.ts) and replays the log after it, so its start time is the refill. The
 * six demo photos (22 faces) are enrolled through API node 1 of the first layout, so identify
 * finds real matches; every layout checks that each of their faces is found as itself through
 * both API nodes.
 *
 * The F faces are synthetic: by default people drawn from an isotropic version of the face
 * generator of docs/face-vectors.md, with its measured scalars (mean centre length 0.2948,
 * centre spread trace 0.5722, centre weight a = 0.8116, within-person trace 0.3405, photos per
 * person with mean 2.16, a spread of photo noise between photos) and a random mean direction;
 * `--dump DIR` takes the first F rows of the generator's `base.fbin` and its `query.fbin`
 * instead (`cargo run --release -p face-index --example bench -- --data sface --n F --dump DIR
 * --dump-only`, which needs bench/data/sface-real). Queries of the shard tier are other photos
 * of people in the gallery.
 *
 * Per layout, in order: the API nodes start (the first layout's record the recogniser), then
 * the shard servers all at once (each timed from spawn to listening); identify through both
 * API nodes at once (the load split over them, autocannon as in bench/http/load.ts, the demo photos
 * in turn, n=5); then the shard tier alone: POST /v0/shard/search to every server of the
 * layout and the top n merged, with the API node's own client and merge
 * (src/search/shard-client.ts, cluster-index.ts), one face per call, from one caller and from
 * `--concurrency` callers; then the memory of every process (/proc VmRSS and VmHWM; PSS summed
 * over PostgreSQL's processes, whose shared buffers RSS counts once per process); then the
 * same shard servers restarted from the snapshots they saved at their stop (start time, and
 * memory after a few searches). Before the layouts, a shard server of each size runs on an
 * empty database for its base memory; after them, the one-server layout's snapshots are loaded
 * into this process (`openFaceIndex`, as FACE_ROLE=all holds them) and searched the same way,
 * for the latency the network hop adds. The report ends with memory against faces held (a
 * least-squares line over every shard server) and what it means for capacity.
 *
 * Node settings: API nodes FACE_INFERENCE_WORKERS=1 and FACE_INTRA_THREADS=1 (two nodes on
 * two cores), shard servers the defaults (f16, index pool one thread per core) with
 * FACE_INDEX_SNAPSHOT_SECONDS=3600, so the only snapshots are the one after the refill (waited
 * for before measuring) and the one at stop.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { mergeMatches } from '../../src/search/cluster-index.js';
import { ShardClient } from '../../src/search/shard-client.js';
import { findProjectRoot } from '../../src/config/index.js';
import { FIRST_TENANT } from '../../src/auth.js';
import { connect, type Database } from '../../src/db/client.js';
import { claimLayout, SHARD_RULE } from '../../src/db/layout.js';
import { migrate } from '../../src/db/migrate.js';
import { openDatabase, type OpenDatabase } from '../../src/db/open.js';
import { searchScope } from '../../src/db/tenants.js';
import { openFaceIndex } from '../../src/native/face-index.js';
import { parseOptions, runAsScript, saveJson } from '../lib/args.js';
import { Rng } from '../../test/harness/reliability/outcome.js';
import { Client, demoPhotos } from '../../test/harness/http/client.js';
import { generatorLine, runLoad, type GeneratorCpu, type LoadResult, type Sample } from '../../test/harness/http/http-load.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { busiestThreadSeconds, cpuDelta, cpuSnapshot, threadCpuSeconds, type Groups } from '../../test/harness/proc-cpu.js';
import { freePort } from '../../test/harness/load-service.js';

const USAGE =
  'npm run bench:cluster -- [--faces 200000] [--layouts 1,2,4] [--seconds 20] [--shard-seconds 20] [--concurrency 8] ' +
  '[--dump DIR] [--seed 1] [--memory-gib 24] [--os-reserve-gib 2] [--json out.json] | --report out.json';

interface Options {
  faces: number;
  layouts: number[];
  seconds: number;
  shardSeconds: number;
  concurrency: number;
  dump?: string;
  seed: number;
  memoryGiB: number;
  osReserveGiB: number;
  json?: string;
  /** Print the report of a run saved with --json instead of running. */
  report?: string;
}

const SHARDS = 4;
const TOKEN = 'cluster-bench-operator-token';
const AUTH = { Authorization: `Token ${TOKEN}` };
/** Matches per face, as bench/http/load.ts's identify asks. */
const N = 5;
/** The API node's default FACE_SHARD_DEADLINE_MS, for the shard tier's calls. */
const DEADLINE_MS = 1000;
const QUERIES = 1000;
const MiB = 2 ** 20;
const GiB = 2 ** 30;

function parse(argv = process.argv.slice(2)): Options {
  const o = parseOptions(argv, ['faces', 'layouts', 'seconds', 'shard-seconds', 'concurrency', 'dump', 'seed', 'memory-gib', 'os-reserve-gib', 'json', 'report'], USAGE);
  const num = (k: string, fallback: number, min = 1) => {
    const v = o[k] === undefined ? fallback : Number(o[k]);
    if (!Number.isFinite(v) || v < min) throw new Error(`--${k} must be a number of at least ${min}\n${USAGE}`);
    return v;
  };
  const layouts = (o.layouts ?? '1,2,4').split(',').map(Number);
  for (const s of layouts) if (![1, 2, 4].includes(s)) throw new Error(`--layouts takes 1, 2 and 4 (servers for ${SHARDS} shards)\n${USAGE}`);
  const concurrency = Math.round(num('concurrency', 8, 2));
  if (concurrency % 2) throw new Error(`--concurrency is split over the two API nodes: give an even number\n${USAGE}`);
  return {
    faces: Math.round(num('faces', 200_000, 1000)),
    layouts,
    seconds: num('seconds', 20),
    shardSeconds: num('shard-seconds', 20),
    concurrency,
    dump: o.dump,
    seed: Math.round(num('seed', 1, 0)),
    memoryGiB: num('memory-gib', 24),
    osReserveGiB: num('os-reserve-gib', 2, 0),
    json: o.json,
    report: o.report,
  };
}

// ---------------------------------------------------------------------------------------------
// Vectors

interface Vectors {
  dims: number;
  /** rows × dims, unit rows: face r + 1 of the database. */
  base: Float32Array;
  /** Other photos of people in `base`, unit rows. */
  queries: Float32Array;
  source: string;
}

function gaussian(uniform: () => number): () => number {
  let spare: number | undefined;
  return () => {
    if (spare !== undefined) {
      const s = spare;
      spare = undefined;
      return s;
    }
    const u = Math.max(uniform(), 1e-12);
    const v = uniform();
    const r = Math.sqrt(-2 * Math.log(u));
    spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  };
}

function normalise(v: Float32Array | Float64Array, out: Float32Array, at = 0): void {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i] * v[i];
  const inv = 1 / Math.sqrt(s);
  for (let i = 0; i < v.length; i++) out[at + i] = v[i] * inv;
}

/**
 * People as clusters on the sphere, with the scalars docs/face-vectors.md measured on SFace
 * (isotropic covariances of the measured traces instead of the full ones).
 */
function synthetic(count: number, queryCount: number, seed: number): Vectors {
  const dims = 128;
  const seeded = new Rng(seed);
  const uniform = () => seeded.next();
  const g = gaussian(uniform);
  const MEAN_LENGTH = 0.2948;
  const centreSd = Math.sqrt(0.5722 / dims);
  const withinSd = Math.sqrt(0.3405 / dims);
  const A = 0.8116;
  // Photos per person: 1 + floor(Exp(λ)), mean 1 + 1/(e^λ − 1) = 2.16.
  const LAMBDA = Math.log(1 + 1 / 1.16);
  const mu = new Float64Array(dims).map(() => g());
  const muLen = Math.hypot(...mu);
  for (let i = 0; i < dims; i++) mu[i] *= MEAN_LENGTH / muLen;

  const ordered = new Float32Array(count * dims);
  const centre = new Float64Array(dims);
  const unitCentre = new Float32Array(dims);
  const photo = new Float64Array(dims);
  const people: Float32Array[] = [];
  const drawPhoto = (u: Float32Array, out: Float32Array, at: number, scale: number) => {
    // Photos stray from their person by different amounts (docs/face-vectors.md: p10 0.77, p90 1.22).
    const s = scale * Math.exp(0.18 * g());
    for (let i = 0; i < dims; i++) photo[i] = A * u[i] + s * withinSd * g();
    normalise(photo, out, at);
  };
  const personScale: number[] = [];
  for (let r = 0; r < count; ) {
    for (let i = 0; i < dims; i++) centre[i] = mu[i] + centreSd * g();
    normalise(centre, unitCentre);
    const scale = Math.exp(0.15 * g());
    const photos = Math.min(50, 1 + Math.floor(-Math.log(Math.max(uniform(), 1e-12)) / LAMBDA));
    for (let k = 0; k < photos && r < count; k++, r++) drawPhoto(unitCentre, ordered, r * dims, scale);
    people.push(Float32Array.from(unitCentre));
    personScale.push(scale);
  }
  // Enrolled in random order, as a gallery fills.
  const order = Array.from({ length: count }, (_, i) => i);
  for (let i = count - 1; i > 0; i--) {
    const j = Math.floor(uniform() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const base = new Float32Array(count * dims);
  order.forEach((from, to) => base.set(ordered.subarray(from * dims, (from + 1) * dims), to * dims));
  const queries = new Float32Array(queryCount * dims);
  for (let q = 0; q < queryCount; q++) {
    const p = Math.floor(uniform() * people.length);
    drawPhoto(people[p], queries, q * dims, personScale[p]);
  }
  return {
    dims,
    base,
    queries,
    source:
      `${count} synthetic faces of ${people.length} people (isotropic face model with the SFace scalars of docs/face-vectors.md, seed ${seed}); ` +
      `${queryCount} queries: new photos of people in the gallery`,
  };
}

async function readBin(file: string): Promise<{ rows: number; cols: number; data: Float32Array }> {
  const bytes = await readFile(file);
  const rows = bytes.readUInt32LE(0);
  const cols = bytes.readUInt32LE(4);
  const body = bytes.subarray(8, 8 + rows * cols * 4);
  return { rows, cols, data: new Float32Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.length)) };
}

/** The face generator's dump (crates/index/examples/bench.rs `--dump`): its first `count` gallery rows and its queries. */
async function fromDump(dir: string, count: number): Promise<Vectors> {
  const base = await readBin(path.join(dir, 'base.fbin'));
  const query = await readBin(path.join(dir, 'query.fbin'));
  if (base.rows < count) throw new Error(`${dir}/base.fbin holds ${base.rows} rows, fewer than --faces ${count}`);
  if (base.cols !== 128) throw new Error(`${dir}/base.fbin has ${base.cols} dims; the service's recogniser makes 128`);
  return {
    dims: base.cols,
    base: base.data.subarray(0, count * base.cols),
    queries: query.data,
    source: `the face generator's dump ${dir}: first ${count} of ${base.rows} gallery rows, ${query.rows} queries (other real photos of enrolled people)`,
  };
}

// ---------------------------------------------------------------------------------------------
// The database

/** The one photo row every synthetic face points at (its blob is never read). */
const SYNTHETIC_PHOTO = 'b'.repeat(64);

/**
 * Copies `vectors.base` into `faces` as faces 1..F of `model`, then leaves the change log as a
 * deployment whose log was pruned below every shard's snapshot: positions 1..F drawn, none left,
 * the horizon at F. Shards without a snapshot are then refilled from the faces table.
 */
async function fill(db: Database, vectors: Vectors, model: string): Promise<number> {
  // As the tables' owner: COPY is not taken under row-level security.
  const sql = db.owner;
  const { dims, base } = vectors;
  const count = base.length / dims;
  const started = performance.now();
  await sql`INSERT INTO photos (hash, size, content_type) VALUES (${SYNTHETIC_PHOTO}, 0, 'image/jpeg')`;
  const bytes = Buffer.from(base.buffer, base.byteOffset, base.byteLength);
  function* rows(): Generator<string> {
    const page = 2000;
    for (let from = 0; from < count; from += page) {
      let text = '';
      for (let r = from; r < Math.min(count, from + page); r++) {
        const hex = bytes.toString('hex', r * dims * 4, (r + 1) * dims * 4);
        // COPY text format: the bytea's \x doubles its backslash.
        text += `${r + 1}\t${FIRST_TENANT}\tsynthetic\t${SYNTHETIC_PHOTO}\t0\t0\t112\t112\t${dims}\t\\\\x${hex}\t${model}\n`;
      }
      yield text;
    }
  }
  const copy = await sql`COPY faces (id, tenant_id, meta, photo_hash, x1, y1, x2, y2, dim, embedding, model) FROM STDIN`.writable();
  await pipeline(Readable.from(rows()), copy);
  await sql`SELECT setval(pg_get_serial_sequence('faces', 'id'), ${count})`;
  await sql`SELECT setval(pg_get_serial_sequence('face_changes', 'position'), ${count})`;
  await sql`UPDATE face_changes_horizon SET pruned_through = ${count}`;
  await sql`ANALYZE faces`;
  return (performance.now() - started) / 1000;
}

// ---------------------------------------------------------------------------------------------
// Processes

interface Node {
  name: string;
  child: ChildProcess;
  pid: number;
  base: string;
  /** ms from spawn to the "listening" log line. */
  startMs: number;
  /** The JSON log lines so far (the last 2,000). */
  logs: () => Record<string, unknown>[];
  exited: Promise<number | null>;
}

const running = new Set<ChildProcess>();
const root = findProjectRoot();
/**
 * The recogniser the synthetic faces are filed under, named to every node: left to choose, a node
 * takes the processor's (`accurate` with AVX-512) and would re-embed them from photos they lack.
 */
const RECOGNIZER = (JSON.parse(readFileSync(path.join(root, 'models/manifest.json'), 'utf8')) as { defaults: { recognizer: string } }).defaults.recognizer;

function spawnNode(name: string, env: Record<string, string>): Promise<Node> {
  const t0 = performance.now();
  const child = spawn(process.execPath, [path.join(root, 'dist/src/main.js')], {
    env: { ...process.env, HOST: '127.0.0.1', FACE_TOKEN: TOKEN, FACE_SHARDS: String(SHARDS), FACE_RECOGNIZER: RECOGNIZER, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  const lines: Record<string, unknown>[] = [];
  let partial = '';
  let tail = '';
  const exited = new Promise<number | null>((r) =>
    child.once('exit', (code) => {
      running.delete(child);
      r(code);
    }),
  );
  return new Promise<Node>((resolve, reject) => {
    let done = false;
    const onData = (d: Buffer) => {
      const text = partial + d.toString('utf8');
      tail = (tail + d.toString('utf8')).slice(-4000);
      const parts = text.split('\n');
      partial = parts.pop() ?? '';
      for (const line of parts) {
        let rec: Record<string, unknown>;
        try {
          rec = JSON.parse(line) as Record<string, unknown>;
        } catch {
          continue;
        }
        lines.push(rec);
        if (lines.length > 2000) lines.shift();
        if (!done && rec.msg === 'listening' && typeof rec.port === 'number') {
          done = true;
          resolve({ name, child, pid: child.pid as number, base: `http://127.0.0.1:${rec.port}`, startMs: performance.now() - t0, logs: () => lines, exited });
        }
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((code) => {
      if (!done) reject(new Error(`${name} exited (${code}) before listening:\n${tail}`));
    });
  });
}

/** SIGTERM (a graceful stop: the shard servers save their snapshots), SIGKILL after 60 s. */
async function stopNode(n: Node): Promise<void> {
  if (n.child.exitCode !== null || n.child.signalCode !== null) return;
  n.child.kill('SIGTERM');
  const timer = setTimeout(() => n.child.kill('SIGKILL'), 60_000);
  await n.exited;
  clearTimeout(timer);
}

function killAll(): void {
  for (const c of running) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
}

async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + ms;
  let last: unknown;
  while (Date.now() < end) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out after ${ms / 1000} s waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
}

async function getJson<T>(base: string, p: string): Promise<T> {
  const res = await fetch(`${base}${p}`, { headers: AUTH, signal: AbortSignal.timeout(5000) });
  if (!res.ok) throw new Error(`${res.status} from ${base}${p}`);
  return (await res.json()) as T;
}

// ---------------------------------------------------------------------------------------------
// Memory and CPU from /proc

interface Memory {
  rss: number;
  hwm: number;
}

function memoryOf(pid: number): Memory {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

function pssOf(pid: number): number {
  try {
    const text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    return Number(/^Pss:\s+(\d+) kB/m.exec(text)?.[1] ?? 0) * 1024;
  } catch {
    return 0;
  }
}

/** The postmaster of `pgDir` and every process it started: RSS summed, PSS summed, and how many. */
function postgresMemory(pgDir: string): { rss: number; pss: number; processes: number } {
  const pm = Number(readFileSync(path.join(pgDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  let rss = 0;
  let pss = 0;
  let processes = 0;
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const pid = Number(e);
    let ppid: number;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      continue;
    }
    if (pid !== pm && ppid !== pm) continue;
    try {
      rss += memoryOf(pid).rss;
      pss += pssOf(pid);
      processes++;
    } catch {
      // ended meanwhile
    }
  }
  return { rss, pss, processes };
}

interface CpuWindow {
  seconds: number;
  groups: Groups;
}

async function withCpu<T>(named: Record<number, string>, run: () => Promise<T>): Promise<{ value: T; cpu?: CpuWindow }> {
  const before = cpuSnapshot(named);
  const t0 = performance.now();
  const value = await run();
  const after = cpuSnapshot(named);
  return { value, cpu: before && after ? { seconds: (performance.now() - t0) / 1000, groups: cpuDelta(before, after) } : undefined };
}

const cores = (cpu: CpuWindow | undefined, group: string) => (cpu ? (cpu.groups[group] ?? 0) / cpu.seconds : NaN);

// ---------------------------------------------------------------------------------------------
// Timed calls from this process (the shard tier, and the index in this process)

interface CallStats {
  calls: number;
  errors: number;
  seconds: number;
  perSecond: number;
  p50: number;
  p99: number;
  generator: GeneratorCpu;
}

function percentile(sorted: Float64Array, p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : NaN;
}

/** `callers` loops calling `call(i)` for `seconds`; latency of each call, and this process's CPU. */
async function timedCalls(callers: number, seconds: number, call: (i: number) => Promise<void>): Promise<CallStats> {
  const latencies: number[] = [];
  let errors = 0;
  let next = 0;
  const threads0 = threadCpuSeconds();
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const end = start + seconds * 1000;
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (performance.now() < end) {
        const t = performance.now();
        try {
          await call(next++);
          latencies.push(performance.now() - t);
        } catch {
          errors++;
        }
      }
    }),
  );
  const wall = (performance.now() - start) / 1000;
  const used = process.cpuUsage(cpu0);
  const busiest = busiestThreadSeconds(threads0, threadCpuSeconds()) / wall;
  const sorted = Float64Array.from(latencies).sort();
  const cpuCores = (used.user + used.system) / 1e6 / wall;
  const perSecond = latencies.length / wall;
  return {
    calls: latencies.length,
    errors,
    seconds: wall,
    perSecond,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    generator: { cores: cpuCores, busiestThread: busiest, coresPer10k: perSecond > 0 ? cpuCores / (perSecond / 10_000) : NaN, saturated: busiest > 0.8 },
  };
}

// ---------------------------------------------------------------------------------------------
// One layout

interface ServerReport {
  shards: number[];
  faces: number;
  startS: number;
  /** Per shard: source and ms of the refill, from the server's log. */
  refills: { shard: number; source: string; ms: number }[];
  memory: Memory;
  indexBytes: number;
}

interface LayoutReport {
  servers: number;
  shardServers: ServerReport[];
  /** From the first spawn to the last server listening. */
  tierStartS: number;
  /** The same servers restarted from their snapshots: the tier's start and each server's memory after a few searches. */
  reload: { startS: number; memory: Memory[] };
  apiStartS: number[];
  identify: { perSecond: number; p50: number; p99: number; requests: number; errors: number; perNode: number[]; generator?: GeneratorCpu; cpu?: CpuWindow };
  shardOne: CallStats;
  shardMany: CallStats & { cpu?: CpuWindow };
  apiMemory: Memory[];
  postgres: { rss: number; pss: number; processes: number };
}

function groups(servers: number): number[][] {
  const per = SHARDS / servers;
  return Array.from({ length: servers }, (_, i) => Array.from({ length: per }, (_, k) => i * per + k));
}

interface Context {
  opts: Options;
  url: string;
  pgDir: string;
  work: string;
  vectors: Vectors;
  photos: Buffer[];
  /** Demo photo i's enrolled face ids (filled by the first layout). */
  demo: Map<number, number[]>;
}

/** The best match of every face of demo photo `i` through `client`, strict. */
async function bestMatches(client: Client, i: number): Promise<{ ids: number[]; live?: string }> {
  const res = await fetch(`${client.base}/v0/identify/`, {
    method: 'POST',
    headers: AUTH,
    body: client.form({ photo: i, mf_selector: 'all', strict: 'true' }),
    signal: AbortSignal.timeout(60_000),
  });
  const body = (await res.json()) as { results?: Record<string, { face: { id: number } }[]> };
  if (res.status !== 200) throw new Error(`identify of demo photo ${i + 1} answered ${res.status}: ${JSON.stringify(body).slice(0, 300)}`);
  return { ids: Object.values(body.results ?? {}).flatMap((m) => (m[0] ? [m[0].face.id] : [])), live: res.headers.get('x-live-servers') ?? undefined };
}

async function runLayout(ctx: Context, servers: number): Promise<LayoutReport> {
  const { opts, vectors } = ctx;
  const layout = groups(servers);
  const ports = await Promise.all(layout.map(() => freePort()));
  const serverList = layout.map((ids, i) => `${ids.join('+')}@http://127.0.0.1:${ports[i]}`).join(',');
  const apiDir = path.join(ctx.work, 'api');
  const nodes: Node[] = [];
  try {
    // API nodes first: on a new database they record the recogniser the shard servers wait for,
    // and they count a server out until it answers, so the shard servers' start is theirs alone.
    const apiEnv = () => ({
      FACE_ROLE: 'api',
      PORT: '0',
      DATABASE_URL: ctx.url,
      FACE_DATA_DIR: apiDir,
      FACE_SHARD_SERVERS: serverList,
      FACE_INFERENCE_WORKERS: '1',
      FACE_INTRA_THREADS: '1',
    });
    const apis = await Promise.all([1, 2].map((n) => spawnNode(`api-${n}`, apiEnv())));
    nodes.push(...apis);
    process.stderr.write(`  API nodes listening (${apis.map((a) => (a.startMs / 1000).toFixed(1)).join(', ')} s); starting ${servers} shard server(s)\n`);
    const t0 = performance.now();
    const startTier = () =>
      Promise.all(
        layout.map((ids, i) =>
          spawnNode(`shard-${ids.join('+')}`, {
            FACE_ROLE: 'shard',
            FACE_SHARD_IDS: ids.join(','),
            PORT: String(ports[i]),
            DATABASE_URL: ctx.url,
            FACE_DATA_DIR: path.join(ctx.work, `layout-${servers}`, `server-${i}`),
            FACE_INDEX_SNAPSHOT_SECONDS: '3600',
          }),
        ),
      );
    const shardNodes = await startTier();
    nodes.push(...shardNodes);
    const tierStartS = (performance.now() - t0) / 1000;
    process.stderr.write(`  shard servers listening after ${tierStartS.toFixed(1)} s\n`);
    for (const a of apis) {
      await until(`${a.name} to see ${servers} live servers`, 20_000, async () => {
        const r = await getJson<{ live: number; total: number }>(a.base, '/v0/admin/shards');
        return r.live === servers && r.total === servers ? true : undefined;
      });
    }
    const clients = apis.map((a) => new Client(a.base, TOKEN, ctx.photos));
    if (ctx.demo.size === 0) {
      for (let i = 0; i < ctx.photos.length; i++) {
        const res = await fetch(`${apis[0].base}/v0/face/`, {
          method: 'POST',
          headers: AUTH,
          body: clients[0].form({ photo: i, meta: `demo-${i + 1}`, mf_selector: 'all' }),
          signal: AbortSignal.timeout(60_000),
        });
        const body = (await res.json()) as { results?: { id: number }[] };
        if (res.status !== 200) throw new Error(`enrolling demo photo ${i + 1}: ${res.status} ${JSON.stringify(body).slice(0, 300)}`);
        if (res.headers.get('x-index-lag')) throw new Error(`enrolling demo photo ${i + 1}: X-Index-Lag ${res.headers.get('x-index-lag')}`);
        ctx.demo.set(i, (body.results ?? []).map((f) => f.id));
      }
    }
    // Every demo face is found as itself, through both API nodes, with every server answering.
    for (const c of clients) {
      for (const [i, ids] of ctx.demo) {
        const found = await bestMatches(c, i);
        const want = [...ids].sort((a, b) => a - b).join(',');
        const got = [...new Set(found.ids)].sort((a, b) => a - b).join(',');
        if (got !== want || found.live !== `${servers}/${servers}`) {
          throw new Error(`demo photo ${i + 1} through ${c.base}: best matches ${got} (X-Live-Servers ${found.live}), expected ${want} (${servers}/${servers})`);
        }
      }
    }
    // The snapshot each server takes after its refill, done before anything is timed.
    await until('the snapshots after the refill', 120_000, async () => {
      const states = await Promise.all(shardNodes.map((s) => getJson<{ shards: { snapshotPosition?: number }[] }>(s.base, '/v0/shard/state')));
      return states.every((st) => st.shards.every((sh) => sh.snapshotPosition !== undefined)) ? true : undefined;
    });

    // Identify through both API nodes at once, the load split between them.
    const named: Record<number, string> = { [process.pid]: 'bench process' };
    for (const a of apis) named[a.pid] = 'API nodes';
    for (const s of shardNodes) named[s.pid] = 'shard servers';
    const live = `${servers}/${servers}`;
    const identifyRun = (name: string, seconds: number) =>
      Promise.all(
        clients.map((c, k) =>
          runLoad({
            name: `${name} via API node ${k + 1}`,
            base: c.base,
            headers: AUTH,
            request: (i) => c.upload('POST', '/v0/identify/', { photo: i + k, n: String(N) }),
            check: (a) => (a.status === 200 && a.headers['x-live-servers'] !== live ? 598 : undefined),
            connections: opts.concurrency / 2,
            seconds,
          }),
        ),
      );
    await identifyRun('warm-up', 2);
    process.stderr.write(`  identify through both API nodes, ${opts.concurrency} connections, ${opts.seconds} s\n`);
    const ident = await withCpu(named, () => identifyRun('identify', opts.seconds));
    const [ra, rb] = ident.value;
    const samples: Sample[] = [...(ra.samples ?? []), ...(rb.samples ?? [])];
    const lat = Float64Array.from(samples, (s) => s.latency).sort();
    const identify = {
      perSecond: ra.perSecond + rb.perSecond,
      p50: percentile(lat, 50),
      p99: percentile(lat, 99),
      requests: ra.requests + rb.requests,
      errors: ra.errors + rb.errors,
      perNode: [ra.perSecond, rb.perSecond],
      // Both runs share this process: each one's figure is the whole process over the same window.
      generator: ra.generator,
      cpu: ident.cpu,
    };
    for (const r of [ra, rb] as LoadResult[]) if (r.errors) process.stderr.write(`  ${r.name}: ${r.errors} errors ${JSON.stringify(r.statuses)}\n`);

    // The shard tier alone: what an API node sends, from this process.
    const shardClients = shardNodes.map((s) => new ShardClient(s.base, TOKEN));
    const dims = vectors.dims;
    const queryRows = vectors.queries.length / dims;
    const fanOut = async (i: number) => {
      const q = vectors.queries.subarray((i % queryRows) * dims, ((i % queryRows) + 1) * dims);
      const answers = await Promise.all(shardClients.map((c, k) => c.search(q, N, searchScope(FIRST_TENANT), layout[k], DEADLINE_MS)));
      for (const a of answers) if (a.results[0].missing.length) throw new Error(`shards ${a.results[0].missing.join(', ')} not searched`);
      const top = mergeMatches(answers.map((a) => a.results[0].matches), N);
      if (top.length !== N) throw new Error(`${top.length} matches`);
    };
    await timedCalls(opts.concurrency, 2, fanOut);
    process.stderr.write(`  shard tier: 1 caller, ${opts.shardSeconds / 2} s; ${opts.concurrency} callers, ${opts.shardSeconds} s\n`);
    const shardOne = await timedCalls(1, opts.shardSeconds / 2, fanOut);
    const many = await withCpu(named, () => timedCalls(opts.concurrency, opts.shardSeconds, fanOut));

    // Memory after the runs.
    const states = await Promise.all(shardNodes.map((s) => getJson<{ shards: { shard: number; size: number; memoryBytes: number }[] }>(s.base, '/v0/shard/state')));
    const shardServers: ServerReport[] = shardNodes.map((s, i) => ({
      shards: layout[i],
      faces: states[i].shards.reduce((n, sh) => n + sh.size, 0),
      startS: s.startMs / 1000,
      refills: s
        .logs()
        .filter((l) => typeof l.msg === 'string' && l.msg.startsWith('search shards refilled'))
        .flatMap((l) => (l.shards as number[]).map((shard) => ({ shard, source: l.source as string, ms: l.ms as number }))),
      memory: memoryOf(s.pid),
      indexBytes: states[i].shards.reduce((n, sh) => n + sh.memoryBytes, 0),
    }));
    const total = shardServers.reduce((n, s) => n + s.faces, 0);
    const stored = opts.faces + [...ctx.demo.values()].reduce((n, ids) => n + ids.length, 0);
    if (total !== stored) throw new Error(`the shard servers hold ${total} faces, the database ${stored}`);
    for (const s of shardServers) {
      if (s.refills.length !== s.shards.length || s.refills.some((r) => r.source !== 'database')) {
        throw new Error(`shard server ${s.shards.join('+')}: expected a refill from the database per shard, its log says ${JSON.stringify(s.refills)}`);
      }
    }
    const apiMemory = apis.map((a) => memoryOf(a.pid));
    const postgres = postgresMemory(ctx.pgDir);

    // The same servers again, from the snapshots they saved at their graceful stop: the start
    // time and memory of loaded shards, against refilled ones.
    await Promise.all(shardNodes.map(stopNode));
    const t1 = performance.now();
    const reloaded = await startTier();
    nodes.push(...reloaded);
    const reloadS = (performance.now() - t1) / 1000;
    for (const s of reloaded) {
      if (s.logs().some((l) => typeof l.msg === 'string' && l.msg.startsWith('search shards refilled'))) throw new Error(`${s.name} refilled instead of loading its snapshots`);
    }
    await timedCalls(opts.concurrency, 2, fanOut);
    const loaded = reloaded.map((s) => memoryOf(s.pid));
    return {
      servers,
      shardServers,
      reload: { startS: reloadS, memory: loaded },
      apiMemory,
      postgres,
      tierStartS,
      apiStartS: apis.map((a) => a.startMs / 1000),
      identify,
      shardOne,
      shardMany: { ...many.value, cpu: many.cpu },
    };
  } finally {
    await Promise.all(nodes.map(stopNode));
  }
}

// ---------------------------------------------------------------------------------------------
// Base memory and the index in this process

/** A shard server holding `ids` of an empty database: its memory after listening and a few searches. */
async function baseMemory(ctx: Context, emptyUrl: string, ids: number[]): Promise<Memory> {
  const port = await freePort();
  const node = await spawnNode(`empty-${ids.join('+')}`, {
    FACE_ROLE: 'shard',
    FACE_SHARD_IDS: ids.join(','),
    PORT: String(port),
    DATABASE_URL: emptyUrl,
    FACE_DATA_DIR: path.join(ctx.work, `empty-${ids.join('-')}`),
    FACE_INDEX_SNAPSHOT_SECONDS: '3600',
  });
  try {
    const client = new ShardClient(node.base, TOKEN);
    const dims = ctx.vectors.dims;
    for (let i = 0; i < 500; i++) await client.search(ctx.vectors.queries.subarray((i % 100) * dims, ((i % 100) + 1) * dims), N, searchScope(FIRST_TENANT), ids, DEADLINE_MS);
    return memoryOf(node.pid);
  } finally {
    await stopNode(node);
  }
}

interface InProcess {
  faces: number;
  indexBytes: number;
  one: CallStats;
  many: CallStats;
  rssBytes: number;
}

/** The first layout's snapshots loaded into this process, searched as FACE_ROLE=all would. */
async function inProcess(ctx: Context, dir: string): Promise<InProcess> {
  const rss0 = memoryOf(process.pid).rss;
  const index = await openFaceIndex({ dir, shards: SHARDS, dims: ctx.vectors.dims, scalar: 'f16', threads: 0 });
  try {
    const shards = index.shards();
    if (shards.some((s) => s.state !== 'live')) throw new Error(`in-process shards not live: ${JSON.stringify(shards.map((s) => s.state))}`);
    const dims = ctx.vectors.dims;
    const queryRows = ctx.vectors.queries.length / dims;
    const search = async (i: number) => {
      const [r] = await index.searchBatch(ctx.vectors.queries.subarray((i % queryRows) * dims, ((i % queryRows) + 1) * dims), N);
      if (r.matches.length !== N) throw new Error(`${r.matches.length} matches`);
    };
    await timedCalls(ctx.opts.concurrency, 2, search);
    const one = await timedCalls(1, ctx.opts.shardSeconds / 2, search);
    const many = await timedCalls(ctx.opts.concurrency, ctx.opts.shardSeconds, search);
    return {
      faces: shards.reduce((n, s) => n + s.size, 0),
      indexBytes: index.shards().reduce((n, s) => n + s.memoryBytes, 0),
      one,
      many,
      rssBytes: memoryOf(process.pid).rss - rss0,
    };
  } finally {
    index.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Report

const f0 = (v: number) => (Number.isFinite(v) ? Math.round(v).toLocaleString('en-US') : '-');
const f1 = (v: number) => (Number.isFinite(v) ? v.toFixed(1) : '-');
const f2 = (v: number) => (Number.isFinite(v) ? v.toFixed(2) : '-');
const mib = (b: number) => f0(b / MiB);

/** Everything a run measured: what `--json` writes and `--report` reads back. */
interface Run {
  machine: string;
  options: Options;
  source: string;
  demoFaces: number;
  fillS: number;
  /** Base memory by shards held. */
  base: Record<string, Memory>;
  layouts: LayoutReport[];
  local?: InProcess;
  loads: number[][];
}

/** Least squares y = intercept + slope · x. */
function fitLine(points: [number, number][]): { slope: number; intercept: number } {
  const n = points.length;
  const mx = points.reduce((a, [x]) => a + x, 0) / n;
  const my = points.reduce((a, [, y]) => a + y, 0) / n;
  const sxx = points.reduce((a, [x]) => a + (x - mx) ** 2, 0);
  const slope = sxx > 0 ? points.reduce((a, [x, y]) => a + (x - mx) * (y - my), 0) / sxx : NaN;
  return { slope, intercept: my - slope * mx };
}

function report(run: Run): string {
  const { options: opts, layouts, local, loads, fillS } = run;
  const base = new Map(Object.entries(run.base).map(([k, m]) => [Number(k), m]));
  const out: string[] = [];
  const line = (s = '') => out.push(s);
  line(run.machine);
  line(`faces: ${run.source}; + ${run.demoFaces} demo faces enrolled through the API`);
  line(`fill: ${f0(opts.faces)} faces copied into PostgreSQL in ${f1(fillS)} s`);
  line(`load average (1, 5, 15 min) at the start of each layout: ${loads.map((l) => l.map(f2).join(' ')).join(' | ')}`);
  line();
  line(`| shard servers | faces per server | tier start s (refill) | identify req/s (both API nodes) | identify p50 / p99 ms | shard tier q/s, ${opts.concurrency} callers | p50 / p99 ms | shard tier, 1 caller p50 / p99 ms | network hop p50 ms |`);
  line('|---|---|---|---|---|---|---|---|---|');
  for (const l of layouts) {
    const per = l.shardServers.map((s) => s.faces);
    const hop = local ? l.shardOne.p50 - local.one.p50 : NaN;
    line(
      `| ${l.servers} | ${per.map(f0).join(' / ')} | ${f1(l.tierStartS)} | ${f1(l.identify.perSecond)} (${l.identify.perNode.map(f1).join(' + ')}) | ${f1(l.identify.p50)} / ${f1(l.identify.p99)} | ` +
        `${f0(l.shardMany.perSecond)} | ${f2(l.shardMany.p50)} / ${f2(l.shardMany.p99)} | ${f2(l.shardOne.p50)} / ${f2(l.shardOne.p99)} | ${f2(hop)} |`,
    );
  }
  if (local) {
    line(
      `| in this process (FACE_ROLE=all's index, the first layout's snapshots) | ${f0(local.faces)} | | | | ${f0(local.many.perSecond)} | ${f2(local.many.p50)} / ${f2(local.many.p99)} | ${f2(local.one.p50)} / ${f2(local.one.p99)} | 0 |`,
    );
  }
  line();
  line('| shard servers | during identify, cores: API nodes / shard servers / PostgreSQL / bench process / other processes / idle | API node CPU ms per identify | during the shard tier, cores: shard servers / bench process / other processes / idle | shard server CPU ms per query |');
  line('|---|---|---|---|---|');
  for (const l of layouts) {
    const c = l.identify.cpu;
    const s = l.shardMany.cpu;
    const during = (w: CpuWindow | undefined, names: string[]) => names.map((n) => f2(cores(w, n))).join(' / ');
    const msPer = (w: CpuWindow | undefined, group: string, count: number) => f2(w ? ((w.groups[group] ?? 0) * 1000) / count : NaN);
    line(
      `| ${l.servers} | ${during(c, ['API nodes', 'shard servers', 'PostgreSQL', 'bench process', 'other processes', 'machine idle'])} | ${msPer(c, 'API nodes', l.identify.requests)} | ` +
        `${during(s, ['shard servers', 'bench process', 'other processes', 'machine idle'])} | ${msPer(s, 'shard servers', l.shardMany.calls)} |`,
    );
  }
  line();
  for (const l of layouts) {
    line(`${l.servers} server(s): identify ${generatorLine(l.identify.generator)}; ${l.identify.requests} answers, ${l.identify.errors} errors`);
    line(`${l.servers} server(s): shard tier, ${opts.concurrency} callers: ${generatorLine(l.shardMany.generator)}; ${l.shardMany.calls} calls, ${l.shardMany.errors} errors`);
  }
  if (local) {
    line(
      `in this process, ${opts.concurrency} callers: ${f2(local.many.generator.cores)} cores, the searches included (they run here, on the index pool; ` +
        `its busiest thread ${f2(local.many.generator.busiestThread)} of a core)`,
    );
  }
  line();
  line('| process | faces | start s | RSS MiB | peak RSS (VmHWM) MiB | index memory MiB (its own count) | refill ms per shard |');
  line('|---|---|---|---|---|---|---|');
  for (const [size, m] of base) line(`| shard server, ${size} shard(s) of an empty database | 0 | | ${mib(m.rss)} | ${mib(m.hwm)} | | |`);
  for (const l of layouts) {
    for (const s of l.shardServers) {
      line(
        `| shard server ${s.shards.join('+')} (${l.servers} server layout) | ${f0(s.faces)} | ${f1(s.startS)} | ${mib(s.memory.rss)} | ${mib(s.memory.hwm)} | ${mib(s.indexBytes)} | ${s.refills.map((r) => `${r.shard}: ${f0(r.ms)}`).join(', ')} |`,
      );
    }
    l.reload.memory.forEach((m, i) =>
      line(`| shard server ${l.shardServers[i].shards.join('+')} restarted from its snapshots (${l.servers} server layout) | ${f0(l.shardServers[i].faces)} | ${i === 0 ? `tier ${f1(l.reload.startS)}` : ''} | ${mib(m.rss)} | ${mib(m.hwm)} | | |`),
    );
    l.apiMemory.forEach((m, k) => line(`| API node ${k + 1} (${l.servers} server layout) | | ${f1(l.apiStartS[k])} | ${mib(m.rss)} | ${mib(m.hwm)} | | |`));
    line(`| PostgreSQL, ${l.postgres.processes} processes (${l.servers} server layout) | ${f0(opts.faces)} | | ${mib(l.postgres.rss)} (PSS ${mib(l.postgres.pss)}) | | | |`);
  }
  if (local) line(`| this process after loading the snapshots (RSS growth) | ${f0(local.faces)} | | ${mib(local.rssBytes)} | | ${mib(local.indexBytes)} | |`);
  line();

  // Bytes per face: (RSS − the base RSS of a server with as many shards) / faces, per layout.
  const perFace = layouts.map((l) => {
    const b = base.get(SHARDS / l.servers);
    const faces = l.shardServers.reduce((n, s) => n + s.faces, 0);
    const rss = l.shardServers.reduce((n, s) => n + s.memory.rss - (b?.rss ?? NaN), 0) / faces;
    const hwm = l.shardServers.reduce((n, s) => n + s.memory.hwm - (b?.rss ?? NaN), 0) / faces;
    const index = l.shardServers.reduce((n, s) => n + s.indexBytes, 0) / faces;
    const loaded = l.reload.memory.reduce((n, m) => n + m.rss - (b?.rss ?? NaN), 0) / faces;
    const loadedHwm = l.reload.memory.reduce((n, m) => n + m.hwm - (b?.rss ?? NaN), 0) / faces;
    return { servers: l.servers, rss, hwm, index, loaded, loadedHwm, facesPerServer: faces / l.servers };
  });
  line('| layout | faces per server | refilled: RSS B/face above base | refilled: peak RSS B/face | index\'s own count B/face | restarted from snapshots: RSS B/face | its peak B/face |');
  line('|---|---|---|---|---|---|---|');
  for (const p of perFace) line(`| ${p.servers} server(s) | ${f0(p.facesPerServer)} | ${f0(p.rss)} | ${f0(p.hwm)} | ${f0(p.index)} | ${f0(p.loaded)} | ${f0(p.loadedHwm)} |`);
  if (local) line(`| in this process, loaded from snapshots | ${f0(local.faces)} | | | ${f0(local.indexBytes / local.faces)} | ${f0(local.rssBytes / local.faces)} | |`);
  line();

  // Refill: a server heals its shards one after another, each from a scan of the whole faces table.
  for (const l of layouts) {
    const rates = l.shardServers.map((s) => s.faces / (s.refills.reduce((n, r) => n + r.ms, 0) / 1000));
    line(`refill, ${l.servers} server(s) at once: ${rates.map(f0).join(' / ')} faces/s per server (faces held / summed refill time of its shards); the tier listening after ${f1(l.tierStartS)} s`);
  }
  line();

  // Memory against faces held, over every shard server measured: a fixed part per server and a
  // part per face. The refilled servers' peak is what a server must have room for (a refill
  // leaves its scratch resident); restarted from snapshots they hold less.
  const refilled = fitLine(layouts.flatMap((l) => l.shardServers.map((s): [number, number] => [s.faces, s.memory.hwm])));
  const loaded = fitLine(layouts.flatMap((l) => l.shardServers.map((s, i): [number, number] => [s.faces, l.reload.memory[i].hwm])));
  const servers = layouts.reduce((n, l) => n + l.servers, 0);
  line(`peak RSS of a shard server against the faces it holds, least squares over the ${servers} servers above (${f0(Math.min(...layouts.map((l) => opts.faces / l.servers)))} to ${f0(Math.max(...layouts.map((l) => opts.faces / l.servers)))} faces each):`);
  line(`- refilled from the database: **${mib(refilled.intercept)} MiB + ${f0(refilled.slope)} B per face**`);
  line(`- restarted from its snapshots: **${mib(loaded.intercept)} MiB + ${f0(loaded.slope)} B per face**`);
  line();

  // Capacity: 4 shard servers beside PostgreSQL and 2 API nodes on this machine; 100M faces on
  // nodes that run shard servers only.
  const api = Math.max(...layouts.flatMap((l) => l.apiMemory.map((m) => m.hwm)));
  const pg = Math.max(...layouts.map((l) => l.postgres.pss));
  const budget = opts.memoryGiB * GiB - opts.osReserveGiB * GiB - pg - 2 * api;
  line(
    `capacity assumptions: this machine ${opts.memoryGiB} GiB; kept for the OS and page cache ${opts.osReserveGiB} GiB; PostgreSQL ${mib(pg)} MiB (PSS, as measured: ` +
      `its shared buffers do not grow with the faces); 2 API nodes × ${mib(api)} MiB (peak); left for 4 shard servers ${f1(budget / GiB)} GiB. ` +
      `Nodes for 100M faces run shard servers only (PostgreSQL and the API nodes elsewhere), ${opts.osReserveGiB} GiB kept for the OS, one server per node ` +
      `(a server holds several shards; each more server per node costs its fixed part again).`,
  );
  line();
  line('| shard server memory | faces in 4 shard servers on this machine | faces per 64 GiB node | nodes of 64 GiB for 100M | faces per 128 GiB node | nodes of 128 GiB for 100M |');
  line('|---|---|---|---|---|---|');
  for (const [what, m] of [
    ['refilled (peak): the room a server needs', refilled],
    ['restarted from snapshots (peak)', loaded],
  ] as const) {
    const fit = (budget - 4 * m.intercept) / m.slope;
    const node = (gib: number) => (gib * GiB - opts.osReserveGiB * GiB - m.intercept) / m.slope;
    line(
      `| ${what}: ${mib(m.intercept)} MiB + ${f0(m.slope)} B/face | ${f1(fit / 1e6)}M (${f1(fit / 4 / 1e6)}M each) | ${f1(node(64) / 1e6)}M | ${Math.ceil(1e8 / node(64))} | ` +
        `${f1(node(128) / 1e6)}M | ${Math.ceil(1e8 / node(128))} |`,
    );
  }
  return out.join('\n');
}

// ---------------------------------------------------------------------------------------------

async function main(opts: Options): Promise<number> {
  if (opts.report) {
    console.log(report(JSON.parse(readFileSync(opts.report, 'utf8')) as Run));
    return 0;
  }
  if (os.endianness() !== 'LE') throw new Error('the embeddings are written as this machine\'s float32: little-endian only');
  const machine = machineLine(describeMachine({ faces: String(opts.faces), shards: String(SHARDS) }));
  const loadAtStart = os.loadavg();
  process.stderr.write(`${machine}\nload average ${loadAtStart.map(f2).join(' ')}\n`);
  const work = mkdtempSync(path.join(os.tmpdir(), 'face-cluster-bench-'));
  // As root the embedded PostgreSQL runs as the postgres user, which must pass through this folder.
  chmodSync(work, 0o711);
  let database: OpenDatabase | undefined;
  let empty: Database | undefined;
  const stopAll = () => {
    killAll();
    void empty?.close(1);
    void database?.db.close(1).finally(() => database?.embedded?.stop());
  };
  const onSignal = () => {
    stopAll();
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const recognizer = RECOGNIZER;
    process.stderr.write(`vectors: ${opts.dump ? `reading ${opts.dump}` : 'generating'}...\n`);
    const vectors = opts.dump ? await fromDump(opts.dump, opts.faces) : synthetic(opts.faces, QUERIES, opts.seed);

    const pgDataDir = path.join(work, 'postgres');
    database = await openDatabase({ dataDir: pgDataDir, dbPool: 4 });
    const url = database.embedded!.url;
    process.stderr.write(`filling ${opts.faces} faces...\n`);
    const fillS = await fill(database.db, vectors, recognizer);
    process.stderr.write(`  ${fillS.toFixed(1)} s\n`);

    const ctx: Context = { opts, url, pgDir: path.join(pgDataDir, 'pg'), work, vectors, photos: demoPhotos(), demo: new Map() };

    // Base memory: shard servers of an empty database of the same deployment shape.
    await database.db.owner`CREATE DATABASE face_empty`;
    const emptyUrl = url.replace(/\/face$/, '/face_empty');
    empty = connect({ url: emptyUrl, max: 2 });
    await migrate(empty.owner);
    // What an API node records on its first start.
    await claimLayout(empty.sql, { shards: SHARDS, rule: SHARD_RULE, recognizer, dims: vectors.dims });
    const base = new Map<number, Memory>();
    for (const size of [...new Set(opts.layouts.map((s) => SHARDS / s))].sort((a, b) => a - b)) {
      process.stderr.write(`base memory: a shard server holding ${size} empty shard(s)\n`);
      base.set(size, await baseMemory(ctx, emptyUrl, Array.from({ length: size }, (_, k) => k)));
    }
    await empty.close();
    empty = undefined;

    const layouts: LayoutReport[] = [];
    const loads: number[][] = [];
    for (const servers of opts.layouts) {
      loads.push(os.loadavg());
      process.stderr.write(`layout: ${servers} shard server(s), load average ${os.loadavg().map(f2).join(' ')}\n`);
      layouts.push(await runLayout(ctx, servers));
    }
    // The one-server layout's snapshots hold every shard.
    let local: InProcess | undefined;
    if (opts.layouts.includes(1)) {
      process.stderr.write('in this process: the one-server layout\'s snapshots\n');
      local = await inProcess(ctx, path.join(work, 'layout-1', 'server-0', 'index'));
    }
    const run: Run = {
      machine,
      options: opts,
      source: vectors.source,
      demoFaces: [...ctx.demo.values()].reduce((n, ids) => n + ids.length, 0),
      fillS,
      base: Object.fromEntries(base),
      layouts,
      local,
      loads,
    };
    console.log(report(run));
    saveJson(opts.json, run);
    return 0;
  } finally {
    killAll();
    await empty?.close();
    await database?.db.close();
    await database?.embedded?.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

runAsScript(import.meta.url, parse, main);
