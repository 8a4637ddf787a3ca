/**
 * The search shards through the addon, as the service calls them: build by `apply` in pages,
 * then search one face per call and one photo's faces per batched call, from one caller and
 * from many at once, with recall@1 against the exact answer. It shows what the N-API hand-over
 * to the index pool adds to the Rust figures of `examples/bench.rs`.
 *
 *   cargo run --release -p face-index --example bench -- --data sface --n 200000 --kinds f16 \
 *       --queries 1000 --dump .bench-out/index-addon/sface-200000 --dump-only
 *   npm run bench:index -- --dump .bench-out/index-addon/sface-200000 [--batch 8] [--concurrency 8]
 *       [--scalar f16] [--shards 0] [--threads 0] [--seconds 5]
 *
 * The dump layout is the example's (`--dump`): `base.fbin` and `query.fbin` (u32 rows, u32
 * columns, then f32 rows), `groundtruth.neighbors.ibin` (i32, 10 per query); gallery row r is
 * face r + 1. Single and batched calls are timed with tinybench (one caller, sequential);
 * throughput with many callers is timed by wall clock over `--seconds`.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Bench } from 'tinybench';
import { openFaceIndex, type FaceIndex, type IndexChange, type IndexScalar } from '../../src/native/face-index.js';
import { parseOptions, runAsScript } from '../lib/args.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';

const USAGE = `npm run bench:index -- --dump DIR [--batch 8] [--concurrency 8] [--scalar f16] [--shards 0] [--threads 0] [--seconds 5]`;

interface Options {
  dump: string;
  batch: number;
  concurrency: number;
  scalar: IndexScalar;
  shards: number;
  threads: number;
  seconds: number;
}

function parse(argv = process.argv.slice(2)): Options {
  const o = parseOptions(argv, ['dump', 'batch', 'concurrency', 'scalar', 'shards', 'threads', 'seconds'], USAGE);
  if (!o.dump) throw new Error(`--dump is required\n${USAGE}`);
  const scalar = (o.scalar ?? 'f16') as IndexScalar;
  if (!['f32', 'f16', 'i8'].includes(scalar)) throw new Error(`--scalar is f32, f16 or i8\n${USAGE}`);
  return {
    dump: o.dump,
    batch: Number(o.batch ?? 8),
    concurrency: Number(o.concurrency ?? 8),
    scalar,
    shards: Number(o.shards ?? 0),
    threads: Number(o.threads ?? 0),
    seconds: Number(o.seconds ?? 5),
  };
}

/** A `.fbin`/`.ibin` file: rows, columns and the values (copied, so they are aligned). */
async function readBin(file: string): Promise<{ rows: number; cols: number; data: Buffer }> {
  const bytes = await readFile(file);
  return { rows: bytes.readUInt32LE(0), cols: bytes.readUInt32LE(4), data: bytes.subarray(8) };
}

const floats = (b: Buffer) => new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
const ints = (b: Buffer) => new Int32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));

const ms = (v: number | undefined) => (v === undefined ? '-' : v.toFixed(3));

async function build(index: FaceIndex, base: Float32Array, rows: number, dims: number): Promise<number> {
  const page = 4096;
  const started = performance.now();
  for (let from = 0; from < rows; from += page) {
    const changes: IndexChange[] = [];
    for (let r = from; r < Math.min(rows, from + page); r++) {
      changes.push({ position: r + 1, op: 'upsert', id: r + 1, vector: base.subarray(r * dims, (r + 1) * dims), galleries: [] });
    }
    await index.apply(changes);
  }
  return (performance.now() - started) / 1000;
}

/** Queries answered per second by `callers` concurrent callers, each `per` faces a call. */
async function throughput(index: FaceIndex, queries: Float32Array, count: number, dims: number, per: number, callers: number, seconds: number) {
  const end = performance.now() + seconds * 1000;
  let done = 0;
  let next = 0;
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (performance.now() < end) {
        const q = next++ % (count - per + 1);
        await index.searchBatch(queries.subarray(q * dims, (q + per) * dims), 10);
        done += per;
      }
    }),
  );
  const wall = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  return { qps: done / wall, cpuMsPerQuery: (used.user + used.system) / 1000 / done };
}

async function main(opts: Options): Promise<number> {
  const base = await readBin(path.join(opts.dump, 'base.fbin'));
  const query = await readBin(path.join(opts.dump, 'query.fbin'));
  const truth = await readBin(path.join(opts.dump, 'groundtruth.neighbors.ibin'));
  const dims = base.cols;
  const gallery = floats(base.data);
  const queries = floats(query.data);
  const top = ints(truth.data);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'index-addon-'));
  console.log(machineLine(describeMachine({ gallery: String(base.rows), queries: String(query.rows), dims: String(dims) })));
  const index = await openFaceIndex({ dir, shards: opts.shards, dims, scalar: opts.scalar, threads: opts.threads });
  try {
    // A new folder has no snapshots: every shard starts empty, at position 0, as the service's follower leaves it.
    for (const s of index.shards()) await index.finishRebuild(s.shard, 0);
    const buildS = await build(index, gallery, base.rows, dims);
    console.log(`build through apply: ${buildS.toFixed(1)} s, ${Math.round(base.rows / buildS)} faces/s; ${index.shards().length} shards, ${index.threads()} index threads`);

    let hits = 0;
    for (let q = 0; q < query.rows; q++) {
      const [r] = await index.searchBatch(queries.subarray(q * dims, (q + 1) * dims), 1);
      if (r.matches[0]?.id === top[q * truth.cols] + 1) hits++;
    }
    console.log(`recall@1 against the exact answer: ${(hits / query.rows).toFixed(4)} (${query.rows} queries)`);

    let q = 0;
    const bench = new Bench({ time: opts.seconds * 1000, iterations: 50 });
    bench
      .add('one face per call', async () => {
        const k = q++ % query.rows;
        await index.searchBatch(queries.subarray(k * dims, (k + 1) * dims), 10);
      })
      .add(`${opts.batch} faces per call (one photo)`, async () => {
        const k = q++ % (query.rows - opts.batch + 1);
        await index.searchBatch(queries.subarray(k * dims, (k + opts.batch) * dims), 10);
      });
    await bench.run();
    console.log('\n| call, one caller | p50 ms | p99 ms | calls/s | faces/s |');
    console.log('|---|---|---|---|---|');
    for (const task of bench.tasks) {
      const r = task.result;
      if (!r || !('latency' in r)) continue;
      const per = task.name.startsWith('one') ? 1 : opts.batch;
      const callsPerS = r.throughput.mean;
      console.log(`| ${task.name} | ${ms(r.latency.p50)} | ${ms(r.latency.p99)} | ${Math.round(callsPerS)} | ${Math.round(callsPerS * per)} |`);
    }

    console.log(`\n| ${opts.concurrency} callers at once | faces/s | CPU ms per face (this process) |`);
    console.log('|---|---|---|');
    for (const per of [1, opts.batch]) {
      const t = await throughput(index, queries, query.rows, dims, per, opts.concurrency, opts.seconds);
      console.log(`| ${per} face${per > 1 ? 's' : ''} per call | ${Math.round(t.qps)} | ${t.cpuMsPerQuery.toFixed(3)} |`);
    }
  } finally {
    index.close();
    await rm(dir, { recursive: true, force: true });
  }
  return 0;
}

runAsScript(import.meta.url, parse, main);
