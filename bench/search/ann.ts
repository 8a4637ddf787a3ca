/**
 * Our search index next to FAISS (HNSW, PQ fast scan, IVF-PQ fast scan, 8-bit scalar, exact) and
 * hnswlib on the same vectors, every method at the recall@1 target, in one run:
 *
 *   npm run bench:ann -- [--data random|sface] [--n 100000] [--dim 128] [--queries N]
 *       [--kinds scan,f32,f16,i8] [--ef 16,32,64,128,256,512,1024,2048,4096,8192] [--rerank 40,64,128,256,512,1024]
 *       [--target-recall1 0.99]
 *       [--batch 64] [--shards N] [--threads N] [--connectivity M] [--expansion-add EFC] [--near SIGMA]
 *       [--seed N] [--oversample N] [--no-exact] [--base scan] [--full-sweep]
 *       [--methods LIST] [--k-factors 1,2,4,...] [--nlist N] [--nprobes 1,2,4,...] [--ivf-k-factors 16,64]
 *       [--scan-queries 200] [--dump DIR] [--no-ours] [--out FILE_STEM] [-- <more options of the Rust example>]
 *
 * 1. Ours: `cargo run --release -p face-index --example bench -- ... --expansion-search <--ef>
 *    --rerank <--rerank> --batch <--batch> --target-recall1 <--target-recall1> --dump DIR` builds
 *    our shards for each kind (`scan`, or a graph of a scalar kind), sweeps the graphs' candidate
 *    list and the scan's re-ranked candidates, ending a sweep once recall@1 reaches the target
 *    (--full-sweep drops the stop), prints a JSON line per result, and writes the gallery,
 *    the queries and their exact top 10 into DIR (default .bench-out/ann/random-<n>x<dim> or
 *    sface-<n>; kept, for `--no-ours` reruns). --data, --n, --dim (random only; default 128,
 *    SFace's), --queries (default the example's: random 1000, sface every query photo), --kinds,
 *    --shards, --threads, --connectivity, --expansion-add, --near, --seed, --oversample and
 *    --no-exact go to it, and everything after `--` unchanged. Set CARGO_TARGET_DIR as for any
 *    cargo command.
 * 2. Peers: `bench/.venv/bin/python bench/search/ann-peers.py DIR` runs every method of --methods
 *    (default all: faiss-flat, numpy, faiss-hnsw, hnswlib, faiss-pqfs32-refine, faiss-pqfs64-refine,
 *    faiss-ivfpqfs32-refine, faiss-sq8, faiss-sq8-refine), each in a child process, each swept until
 *    its recall@1 reaches --target-recall1: HNSW graphs over the --ef list (M and efConstruction as
 *    ours: usearch's 16 and 128, or --connectivity / --expansion-add), IndexRefineFlat's k_factor
 *    over --k-factors, IVF's nprobe over --nprobes at each k_factor of --ivf-k-factors. Batch 1 is one
 *    query per call on one thread (the exhaustive scans time --scan-queries of the queries);
 *    batch --batch is calls of that many rows on --threads threads. Setup once:
 *    `sh bench/search/ann-setup.sh`.
 * 3. One table at equal recall: every method, ours and the peers', at its chosen setting (the
 *    smallest swept one whose recall@1 reaches the target; a method that never does is listed at
 *    its best and says so), with recall@1/@10, rank-1, q/s at batch 1 and at batch --batch, p50/p99
 *    at batch 1, CPU per query, bytes per face (RSS growth over the build, and the index's own),
 *    build faces/s and training time, and ratios to --base (a method name such as `faiss-hnsw`, or
 *    one of our kinds: `ours-<kind>` as the service configures it, default scan). Then every swept
 *    setting of every method. Printed, and written as markdown to <out>.md (default next to the
 *    dump, for bench/RESULTS.md) with every result line in <out>.json.
 *
 * Methods are told apart by their result lines' "method" ("engine" in the Rust example's) and
 * settings by "setting" (the Rust example's lines: `ef` and any other number not a measurement,
 * e.g. `rerank`), so a new kind or method needs nothing here.
 *
 * --no-ours skips step 1 and runs the peers alone on an existing --dump.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot } from '../../src/config/index.js';
import { parseOptions, runAsScript } from '../lib/args.js';
import { describeMachine, machineLine, type Machine } from '../../test/harness/machine.js';

const USAGE = `npm run bench:ann -- [--data random|sface] [--n 100000] [--dim 128] [--queries N] [--kinds scan,f32,f16,i8] [--rerank 40,64,...]
    [--ef 16,32,64,128,256,512,1024,2048,4096,8192] [--target-recall1 0.99] [--batch 64] [--shards N] [--threads N]
    [--connectivity M] [--expansion-add EFC] [--near SIGMA] [--seed N] [--oversample N] [--no-exact] [--base scan]
    [--full-sweep] [--methods LIST] [--k-factors 1,2,4,...] [--nlist N] [--nprobes 1,2,4,...] [--ivf-k-factors 16,64]
    [--scan-queries 200] [--dump DIR] [--no-ours] [--out FILE_STEM] [-- <more options of the Rust example>]`;

const VALUED = [
  'n',
  'dim',
  'queries',
  'data',
  'kinds',
  'ef',
  'rerank',
  'target-recall1',
  'batch',
  'shards',
  'near',
  'seed',
  'oversample',
  'connectivity',
  'expansion-add',
  'threads',
  'scan-queries',
  'exact-queries',
  'base',
  'methods',
  'k-factors',
  'nlist',
  'nprobes',
  'ivf-k-factors',
  'dump',
  'out',
];
const FLAGS = ['no-exact', 'no-ours', 'full-sweep'];
const DEFAULT_EF = '16,32,64,128,256,512,1024,2048,4096,8192';
/** Our kinds: the scan, and graphs of each scalar kind. */
const DEFAULT_KINDS = 'scan,f32,f16,i8';
/** The scan's re-ranked candidates per query (at least 4 x the 10 results asked: 40). */
const DEFAULT_RERANK = '40,64,128,256,512,1024';

export interface AnnOptions {
  n: number;
  dim?: number;
  queries?: number;
  data?: string;
  kinds: string;
  ef: string;
  targetRecall1: number;
  batch: number;
  connectivity?: number;
  expansionAdd?: number;
  threads?: number;
  base: string;
  dump: string;
  out: string;
  ours: boolean;
  fullSweep: boolean;
  /** Options for the Rust example: the ones named above that it takes, then everything after `--`. */
  rustArgs: string[];
  /** Options for ann-peers.py after the dump folder. */
  peerArgs: string[];
}

export function parseCli(argv: string[]): AnnOptions {
  const cut = argv.indexOf('--');
  const extra = cut >= 0 ? argv.slice(cut + 1) : [];
  const o = parseOptions(cut >= 0 ? argv.slice(0, cut) : argv, VALUED, USAGE, FLAGS);
  const int = (k: string, fallback?: number) => {
    if (o[k] === undefined) return fallback;
    const v = Number(o[k]);
    if (!Number.isInteger(v) || v < 0) throw new Error(`--${k} must be a whole number, got ${o[k]}`);
    return v;
  };
  const list = (k: string) => {
    if (o[k] !== undefined && !/^\d+(,\d+)*$/.test(o[k])) throw new Error(`--${k} must be a list like 1,2,4, got ${o[k]}`);
    return o[k];
  };
  const root = findProjectRoot();
  const n = int('n', 100_000)!;
  const data = o.data;
  if (data !== undefined && data !== 'random' && data !== 'sface') throw new Error(`--data must be random or sface, got ${data}`);
  // Random vectors default to SFace's 128 dimensions; face data has its own.
  const dim = int('dim', data === 'sface' ? undefined : 128);
  const stem = data === 'sface' ? `sface-${n}` : `random-${n}x${dim}`;
  const dump = path.resolve(o.dump ?? path.join(root, '.bench-out', 'ann', stem));
  const ef = list('ef') ?? DEFAULT_EF;
  const target = Number(o['target-recall1'] ?? 0.99);
  if (!(target > 0 && target <= 1)) throw new Error(`--target-recall1 must be in (0, 1], got ${o['target-recall1']}`);
  const batch = int('batch', 64)!;
  const fullSweep = Boolean(o['full-sweep']);

  const rerank = list('rerank') ?? DEFAULT_RERANK;
  const rustArgs = ['--n', String(n), '--kinds', o.kinds ?? DEFAULT_KINDS, '--expansion-search', ef, '--rerank', rerank, '--batch', String(batch)];
  if (!fullSweep) rustArgs.push('--target-recall1', String(target));
  if (dim !== undefined) rustArgs.push('--dim', String(dim));
  for (const k of ['data', 'queries', 'shards', 'near', 'seed', 'oversample', 'connectivity', 'expansion-add', 'threads']) if (o[k] !== undefined) rustArgs.push(`--${k}`, o[k]);
  if (o['no-exact']) rustArgs.push('--no-exact');
  rustArgs.push(...extra, '--dump', dump);

  const scanQueries = int('scan-queries', int('exact-queries', 200))!;
  const peerArgs = ['--efs', ef, '--target-recall1', String(target), '--batch', String(batch), '--scan-queries', String(scanQueries)];
  const connectivity = int('connectivity');
  const expansionAdd = int('expansion-add');
  const threads = int('threads');
  if (connectivity) peerArgs.push('--m', String(connectivity));
  if (expansionAdd) peerArgs.push('--ef-construction', String(expansionAdd));
  if (threads) peerArgs.push('--threads', String(threads));
  if (o.methods !== undefined) peerArgs.push('--methods', o.methods);
  for (const k of ['k-factors', 'nprobes', 'ivf-k-factors']) if (list(k) !== undefined) peerArgs.push(`--${k}`, o[k]);
  if (int('nlist') !== undefined) peerArgs.push('--nlist', o.nlist);
  if (fullSweep) peerArgs.push('--full-sweep');
  return {
    n,
    dim,
    queries: int('queries'),
    data,
    kinds: o.kinds ?? DEFAULT_KINDS,
    ef,
    targetRecall1: target,
    batch,
    connectivity,
    expansionAdd,
    threads,
    base: o.base ?? 'scan',
    dump,
    out: path.resolve(o.out ?? path.join(root, '.bench-out', 'ann', stem)),
    ours: !o['no-ours'],
    fullSweep,
    rustArgs,
    peerArgs,
  };
}

/** What a method was searched with: `{"ef": 512}`, `{"k_factor": 16}`, `{"nprobe": 64, "k_factor": 16}`; `{}` for none. */
export type Setting = Record<string, number>;

/** A built index, from ann-peers.py or the Rust example. */
export interface BuildLine {
  type: 'build';
  method: string;
  label: string;
  n?: number;
  dims?: number;
  threads?: number | null;
  train_s?: number | null;
  add_s?: number | null;
  build_s: number;
  /** Faces added per second (after any training). */
  faces_per_s?: number | null;
  build_cpu_s?: number | null;
  /** Resident-set growth over the build, per face. */
  rss_bytes_per_face?: number | null;
  /** What the index holds per face by its own sizes (the peers: codes, refine vectors, links, ids). */
  code_bytes_per_face?: number | null;
  /** Ours: the shards' memory by usearch, per face. */
  memory_bytes_per_face?: number | null;
  version?: string;
  call_us?: number | null;
}

/** One method at one setting. */
export interface SearchLine {
  type: 'search';
  method: string;
  label: string;
  setting: Setting;
  recall1: number;
  recall10: number;
  /** Identification rate where the dump names persons: the top hit is the query's own person. */
  rank1?: number | null;
  /** Batch 1: one query per call. */
  qps1?: number | null;
  p50_ms: number;
  p99_ms: number;
  cpu_s_per_query1?: number | null;
  /** Threads one query may use (ours searches its shards in parallel). */
  threads1?: number | null;
  /** Rows per call of the batched pass, and its figures. */
  batch?: number | null;
  qps_batch?: number | null;
  batch_p50_ms?: number | null;
  batch_p99_ms?: number | null;
  cpu_s_per_query_batch?: number | null;
  threads_batch?: number | null;
  /** Queries/s from two client threads (ours). */
  qps2?: number | null;
}

export type Line = BuildLine | SearchLine | { type: string; [k: string]: unknown };

/** Fields of a search line that are measurements or bookkeeping; any other number in a line without `setting` is a setting. */
const MEASURED = new Set([
  'recall1',
  'recall10',
  'recall1_batch',
  'recall10_batch',
  'rank1',
  'rank1_exact',
  'qps1',
  'qps2',
  'qps_batch',
  'p50_ms',
  'p99_ms',
  'batch_p50_ms',
  'batch_p99_ms',
  'cpu_s_per_query1',
  'cpu_s_per_query_batch',
  'threads1',
  'threads_batch',
  'threads',
  'batch',
  'queries',
  'timed_single',
  'n',
  'dims',
]);

/** The setting of a result line: its `setting`, else `ef` and every other number that is not a measurement. */
export function settingOf(line: Record<string, unknown>): Setting {
  if (line.setting && typeof line.setting === 'object') return line.setting as Setting;
  const s: Setting = {};
  for (const [k, v] of Object.entries(line)) if (typeof v === 'number' && Number.isFinite(v) && !MEASURED.has(k)) s[k] = v;
  return s;
}

/**
 * Method name of one of our rows from its label, for output without JSON lines: `ours-<kind>` for
 * each kind as the service configures it (f32; f16 without re-ranking; i8 with it), then
 * `ours-f16-rerank`, `ours-i8-norerank`, and `ours-exact` for its exact scan.
 */
function oursMethod(label: string): string {
  if (/exact scan|brute/.test(label)) return 'ours-exact';
  const m = /usearch (f32|f16|i8)( \+rerank)?/.exec(label);
  if (!m) return `ours-${label}`;
  const [, kind, rerank] = m;
  if (kind === 'f16' && rerank) return 'ours-f16-rerank';
  if (kind === 'i8' && !rerank) return 'ours-i8-norerank';
  return `ours-${kind}`;
}

/** A result line as the tables read it: `method` (from the Rust example's `engine`) and `setting` filled in. */
export function normalise(l: Line): Line {
  if (l.type !== 'build' && l.type !== 'search' && l.type !== 'chosen') return l;
  const raw = l as Record<string, unknown>;
  const named = String(raw.method ?? raw.engine ?? raw.label);
  const ours = raw.method === undefined && !named.startsWith('ours') ? oursMethod(String(raw.label ?? named)) : named;
  const out: Record<string, unknown> = { ...raw, method: ours };
  delete out.engine;
  if (l.type === 'search') {
    out.setting = settingOf(raw);
    delete out.ef;
  }
  return out as Line;
}

/** Rows of the markdown tables in `text` whose header's first cell is `first`, as column name → cell. */
function tableRows(text: string, first: string): Record<string, string>[] {
  const rows: Record<string, string>[] = [];
  let head: string[] | null = null;
  for (const line of text.split('\n')) {
    if (!line.startsWith('|')) {
      head = null;
      continue;
    }
    const cells = line.split('|').slice(1, -1).map((c) => c.trim());
    if (cells[0] === first) head = cells;
    else if (head && !/^-+$/.test(cells[0])) rows.push(Object.fromEntries(head.map((h, i) => [h, cells[i]])));
  }
  return rows;
}

/**
 * Our numbers from the Rust example's stdout. JSON lines (`{"type": "build" | "search", "engine":
 * "ours-...", ...}`) are used when it prints them; otherwise its two markdown tables:
 * `| index | build s | faces/s | RSS B/f | ...` and `| search | ef | p50 ms 1c | p99 ms 1c | QPS 1c |
 * ... | QPS batch | recall@1 | recall@10 | rank-1 |`, which give no CPU time.
 */
export function parseOurs(text: string): Line[] {
  const json = text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Line)
    .filter((l) => l.type === 'build' || l.type === 'search');
  if (json.length) return json.map(normalise);
  // "faces N dims D queries Q cores C shards S, ...": one query fans out over the shards, a batch over the cores.
  const head = /faces (\d+) dims (\d+) queries (\d+) cores (\d+) shards (\d+)/.exec(text);
  const [n, dims, , cores, shards] = head ? head.slice(1).map(Number) : [NaN, NaN, NaN, NaN, NaN];
  const value = (v: string | undefined) => (v === undefined || v === '-' || v === '' ? null : Number(v));
  const out: Line[] = [];
  for (const r of tableRows(text, 'index')) {
    out.push({
      type: 'build',
      method: oursMethod(r.index),
      label: `ours: ${r.index}`,
      n,
      dims,
      threads: cores,
      build_s: Number(r['build s']),
      faces_per_s: value(r['faces/s']),
      rss_bytes_per_face: value(r['RSS B/f']),
      memory_bytes_per_face: value(r['memory B/f']),
    } satisfies BuildLine);
  }
  for (const r of tableRows(text, 'search')) {
    const method = oursMethod(r.search);
    const ef = method === 'ours-exact' ? null : value(r.ef);
    out.push({
      type: 'search',
      method,
      label: method === 'ours-exact' ? 'ours: exact scan f32' : `ours: ${r.search}`,
      setting: ef === null ? {} : { ef },
      recall1: Number(r['recall@1']),
      recall10: Number(r['recall@10']),
      rank1: value(r['rank-1']),
      qps1: value(r['QPS 1c']),
      p50_ms: Number(r['p50 ms 1c']),
      p99_ms: Number(r['p99 ms 1c']),
      qps_batch: value(r['QPS batch']),
      threads_batch: method === 'ours-exact' ? null : cores,
      threads1: method === 'ours-exact' ? 1 : shards,
      qps2: value(r['QPS 2c']),
    } satisfies SearchLine);
  }
  return out;
}

/** Runs a command, its stdout echoed to our stderr as it comes (progress) and returned. */
function run(cmd: string, args: string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (b: Buffer) => {
      out += b.toString();
      process.stderr.write(b);
    });
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.join(' ')}: exit ${code}`))));
  });
}

export interface Chosen {
  search: SearchLine;
  build?: BuildLine;
  /** False: no swept setting reaches the target; `search` is the best one. */
  reached: boolean;
  /** Settings swept, smallest first. */
  swept: SearchLine[];
}

/** Orders settings by their values, key by key in the order written: the smaller setting first. */
function bySetting(a: SearchLine, b: SearchLine): number {
  const av = Object.values(a.setting);
  const bv = Object.values(b.setting);
  for (let i = 0; i < Math.max(av.length, bv.length); i++) {
    const d = (av[i] ?? -Infinity) - (bv[i] ?? -Infinity);
    if (d) return d;
  }
  return 0;
}

/** Per method: the smallest setting whose recall@1 reaches `target`, else its best one. */
export function choose(lines: Line[], target: number): Map<string, Chosen> {
  const searches = lines.filter((l): l is SearchLine => l.type === 'search');
  const builds = lines.filter((l): l is BuildLine => l.type === 'build');
  const chosen = new Map<string, Chosen>();
  for (const method of [...new Set(searches.map((s) => s.method))]) {
    const swept = searches.filter((s) => s.method === method).sort(bySetting);
    const hit = swept.find((s) => s.recall1 >= target);
    const best = hit ?? [...swept].sort((a, b) => b.recall1 - a.recall1 || b.recall10 - a.recall10)[0];
    chosen.set(method, { search: best, build: builds.find((b) => b.method === method), reached: hit !== undefined, swept });
  }
  return chosen;
}

/** Our method that ratios are taken against: `base` itself, else `ours-<base>`, else that kind with a suffix (re-ranking). */
export function baseMethod(chosen: Map<string, Chosen>, base: string): string {
  if (chosen.has(base)) return base;
  const ours = `ours-${base}`;
  return chosen.has(ours) ? ours : [...chosen.keys()].find((k) => k.startsWith(ours)) ?? ours;
}

const EXACT = new Set(['ours-exact', 'numpy', 'faiss-flat']);
/** Ours first, then the peers, then the exact scans; otherwise in the order they ran. */
function group(method: string): number {
  return EXACT.has(method) ? 2 : method.startsWith('ours') ? 0 : 1;
}
const num = (v: number | null | undefined, digits: number, scale = 1) => (v === null || v === undefined || !Number.isFinite(v) ? '–' : (v * scale).toFixed(digits));
const int = (v: number | null | undefined) => (v === null || v === undefined || !Number.isFinite(v) ? '–' : Math.round(v).toLocaleString('en-US'));
const ratio = (v: number | null | undefined, base: number | null | undefined) => (v && base && Number.isFinite(v) && Number.isFinite(base) ? `${(v / base).toFixed(2)}x` : '–');
export const settingText = (s: Setting) =>
  Object.entries(s)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
const row = (cells: string[]) => `| ${cells.join(' | ')} |`;
/** Bytes per face the index itself holds: the peers' codes (and refine vectors, links), ours by usearch. */
const indexBytes = (b: BuildLine | undefined) => b?.code_bytes_per_face ?? b?.memory_bytes_per_face;

/** The equal-recall table and the table of every swept setting, as markdown. */
export function tables(chosen: Map<string, Chosen>, base: string, target: number, batch: number): string {
  const b0 = chosen.get(base);
  const order = [...chosen].sort((a, b) => group(a[0]) - group(b[0]));
  const vsBase = (engine: string, v: number | null | undefined, bv: number | null | undefined) => (engine === base ? '1.00x' : ratio(v, bv));
  const out: string[] = [
    row([
      'method',
      'setting',
      'recall@1',
      'recall@10',
      'rank-1',
      'q/s, batch 1',
      'p50 ms',
      'p99 ms',
      `q/s, batch ${batch} (threads)`,
      'CPU µs/query, batch 1',
      `CPU µs/query, batch ${batch}`,
      'RSS B/face',
      'index B/face',
      'build faces/s (threads)',
      'train s',
      'q/s 1 vs base',
      `q/s ${batch} vs base`,
      'p50 vs base',
      'CPU/query vs base',
      'index B/face vs base',
    ]),
    `|${'---|'.repeat(20)}`,
  ];
  for (const [method, c] of order) {
    const s = c.search;
    const b = c.build;
    const exact = EXACT.has(method);
    const setting = exact ? 'exact' : c.reached ? settingText(s.setting) || '–' : `**never reaches ${target}**${settingText(s.setting) ? `; best: ${settingText(s.setting)}` : ' (one setting)'}`;
    const threads1 = s.threads1 && s.threads1 > 1 ? ` (${s.threads1} threads)` : '';
    out.push(
      row([
        s.label,
        setting,
        num(s.recall1, 3),
        num(s.recall10, 3),
        num(s.rank1, 3),
        `${int(s.qps1)}${threads1}`,
        num(s.p50_ms, 3),
        num(s.p99_ms, 3),
        s.qps_batch ? `${int(s.qps_batch)}${s.threads_batch ? ` (${s.threads_batch})` : ''}` : '–',
        num(s.cpu_s_per_query1, 1, 1e6),
        num(s.cpu_s_per_query_batch, 1, 1e6),
        int(b?.rss_bytes_per_face),
        int(indexBytes(b)),
        b?.faces_per_s ? `${int(b.faces_per_s)}${b.threads ? ` (${b.threads})` : ''}` : '–',
        b?.train_s ? num(b.train_s, 1) : '–',
        vsBase(method, s.qps1, b0?.search.qps1),
        vsBase(method, s.qps_batch, b0?.search.qps_batch),
        vsBase(method, s.p50_ms, b0?.search.p50_ms),
        vsBase(method, s.cpu_s_per_query1, b0?.search.cpu_s_per_query1),
        vsBase(method, indexBytes(b), indexBytes(b0?.build)),
      ]),
    );
  }
  out.push(
    '',
    `Every swept setting, smallest first (bold: the one above; a sweep ends at the first setting reaching recall@1 ${target} unless --full-sweep).`,
    '',
    row(['method', 'setting', 'recall@1', 'recall@10', 'q/s, batch 1', 'p50 ms', `q/s, batch ${batch}`, 'CPU µs/query, batch 1']),
    `|${'---|'.repeat(8)}`,
  );
  for (const [, c] of order) {
    for (const s of c.swept) {
      const cells = [num(s.recall1, 3), num(s.recall10, 3), int(s.qps1), num(s.p50_ms, 3), int(s.qps_batch), num(s.cpu_s_per_query1, 1, 1e6)];
      out.push(row([s.label, settingText(s.setting) || '–', ...(s === c.search ? cells.map((x) => `**${x}**`) : cells)]));
    }
  }
  return out.join('\n');
}

function versionsFrom(lines: Line[]): Record<string, string> {
  const v: Record<string, string> = {};
  for (const l of lines) {
    if (l.type !== 'build' || typeof l.version !== 'string') continue;
    const m = String(l.method);
    if (m.startsWith('faiss')) v['faiss-cpu'] = l.version;
    if (m === 'hnswlib') v.hnswlib = l.version;
    if (m === 'numpy') v.numpy = l.version;
  }
  return v;
}

interface PeersMeta {
  n: number;
  dims: number;
  queries: number;
  M: number;
  ef_construction: number;
  threads: number;
  batch: number;
  scan_queries: number;
  machine: { python: string };
  dataset?: { about?: Record<string, string> };
}

/** Methods that never reach `target` in their sweep, by label. */
export function shortOf(chosen: Map<string, Chosen>): string[] {
  return [...chosen.values()].filter((c) => !c.reached).map((c) => `${c.search.label} (best recall@1 ${c.search.recall1.toFixed(3)} at ${settingText(c.search.setting) || 'its one setting'})`);
}

export function markdown(o: AnnOptions, machine: Machine, lines: Line[]): string {
  const target = o.targetRecall1;
  const meta = lines.find((l) => l.type === 'meta') as PeersMeta | undefined;
  const chosen = choose(lines, target);
  const base = baseMethod(chosen, o.base);
  const short = shortOf(chosen);
  const command = ['npm run bench:ann --', ...process.argv.slice(2)].join(' ');
  const calls = lines
    .filter((l): l is BuildLine => l.type === 'build' && typeof l.call_us === 'number')
    .map((l) => `${l.label} ${l.call_us!.toFixed(1)} µs`)
    .join(', ');
  const ours = [...chosen.values()].find((c) => c.search.method.startsWith('ours-') && c.search.method !== 'ours-exact' && c.search.threads1);
  const oursCpu = [...chosen.values()].some((c) => c.search.method.startsWith('ours-') && typeof c.search.cpu_s_per_query1 === 'number');
  const about = Object.entries(meta?.dataset?.about ?? {})
    .map(([k, v]) => `${k}: ${v}`)
    .join('; ');
  const versions = Object.entries(machine.versions)
    .filter(([k]) => ['faiss-cpu', 'hnswlib', 'numpy'].includes(k))
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  const n = meta?.n ?? o.n;
  const threads = meta?.threads ?? machine.cores;
  const text = [
    `## Search index against FAISS and hnswlib at recall@1 ${target}: \`${command}\``,
    '',
    `${machine.date.slice(0, 16).replace('T', ' ')} UTC, ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB.toFixed(0)} GiB, ${machine.os}, ` +
      `1-minute load ${machine.loadPerCore.toFixed(2)} per core at the start; ${versions}${meta ? `, Python ${meta.machine.python}` : ''}.`,
    '',
    `${n.toLocaleString('en-US')} faces × ${meta?.dims ?? o.dim} dims, ${meta ? meta.queries.toLocaleString('en-US') : '?'} queries, top 10` +
      `${about ? ` (${about})` : ''}. Every method searches the same vectors (the Rust example's \`--dump\`) and is scored against the same exact top 10; ` +
      `rank-1, where the data has persons, counts a query whose top hit is its own person's enrolled photo. ` +
      `Graphs: inner product, M ${meta?.M ?? o.connectivity ?? 16}, efConstruction ${meta?.ef_construction ?? o.expansionAdd ?? 128}. ` +
      `Each method is swept from its cheapest setting up and shown at the first whose recall@1 reaches ${target}` +
      (short.length ? `; these never do within their sweep and are shown at their best: ${short.join('; ')}` : '') +
      '. ' +
      (o.ours
        ? `Ours: ${o.kinds} on ${ours?.search.threads1 ?? '?'} shards built in parallel; batch 1 is one client thread, each query searching the shards in parallel ` +
          `(${ours?.search.threads1 ?? '?'} threads), queries/s over the whole pass; batch ${o.batch} is \`search_batch\` on the set's pool (${ours?.search.threads_batch ?? '?'} threads); ` +
          (oursCpu ? `CPU per query from /proc (10 ms ticks over the pass); index B/face is the shards' memory by usearch. ` : `the example reported no CPU time. `)
        : 'Ours not run here (`--no-ours`). ') +
      `Peers: built on ${threads} threads; batch 1 is one call per query on one thread, queries/s = queries / summed call time ` +
      `(the exhaustive scans time ${meta?.scan_queries ?? '?'} queries; every call includes the Python binding's cost: ${calls || 'not measured'}); ` +
      `batch ${meta?.batch ?? o.batch} is calls of that many rows on ${threads} threads; CPU per query is the process's CPU time over the pass; ` +
      `index B/face is FAISS's code size (plus the f32 vectors of IndexRefineFlat, IVF ids and centroids, HNSW links), hnswlib's index file size. ` +
      `Ratios against ${chosen.get(base)?.search.label ?? `${base} (not run)`}.`,
    '',
    tables(chosen, base, target, o.batch),
  ];
  return text.join('\n');
}

async function main(o: AnnOptions): Promise<number> {
  const root = findProjectRoot();
  const py = path.join(root, 'bench/.venv/bin/python');
  if (!existsSync(py)) throw new Error('bench/.venv is missing: sh bench/search/ann-setup.sh');
  const real = path.join(root, 'bench/data/sface-real.json');
  if (o.data === 'sface' && o.ours && !existsSync(real)) throw new Error(`${path.relative(root, real)} is missing: node dist/bench/search/face-vectors.js makes it (needs LFW)`);
  mkdirSync(path.dirname(o.out), { recursive: true });
  mkdirSync(o.dump, { recursive: true });
  const start = describeMachine();
  const lines: Line[] = [];
  if (o.ours) {
    process.stderr.write(`ours: cargo run --release -p face-index --example bench -- ${o.rustArgs.join(' ')}\n`);
    const text = await run('cargo', ['run', '--release', '-q', '-p', 'face-index', '--example', 'bench', '--', ...o.rustArgs], root);
    const ours = parseOurs(text);
    if (!ours.length) throw new Error('no result rows in the output of the Rust example');
    lines.push(...ours);
  } else if (!existsSync(path.join(o.dump, 'dataset.json'))) {
    throw new Error(`--no-ours needs an existing --dump folder, ${o.dump} has no dataset.json`);
  }
  const peerArgs = [path.join(root, 'bench/search/ann-peers.py'), o.dump, ...o.peerArgs];
  process.stderr.write(`peers: ${py} ${peerArgs.join(' ')}\n`);
  const peers = await run(py, peerArgs, root);
  for (const l of peers.split('\n')) if (l.startsWith('{')) lines.push(normalise(JSON.parse(l) as Line));

  const machine = { ...start, versions: { ...start.versions, ...versionsFrom(lines) } };
  const md = markdown(o, machine, lines);
  console.log(machineLine(machine));
  console.log();
  console.log(md);
  writeFileSync(`${o.out}.md`, md + '\n');
  writeFileSync(`${o.out}.json`, JSON.stringify({ options: o, machine, results: lines }, null, 1));
  console.log(`\nwritten: ${o.out}.md (for bench/RESULTS.md), ${o.out}.json; vectors in ${o.dump}`);
  const short = shortOf(choose(lines, o.targetRecall1));
  if (short.length) console.log(`never reach recall@1 ${o.targetRecall1} in their sweep: ${short.join('; ')} (sweep further: --ef, --k-factors, --nprobes, --ivf-k-factors)`);
  return 0;
}

runAsScript(import.meta.url, () => parseCli(process.argv.slice(2)), main);
