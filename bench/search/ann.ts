/**
 * Our search index next to FAISS HNSW, hnswlib and exact search, on the same vectors, in one run:
 *
 *   npm run bench:ann -- [--data random|sface] [--n 100000] [--dim 128] [--queries N]
 *       [--kinds f32,f16,i8] [--ef 16,32,64,128,256,512,1024] [--target-recall1 0.99]
 *       [--shards N] [--threads N] [--connectivity M] [--expansion-add EFC] [--near SIGMA]
 *       [--seed N] [--oversample N] [--no-exact] [--exact-queries 200] [--base f16]
 *       [--dump DIR] [--no-ours] [--out FILE_STEM] [-- <more options of the Rust example>]
 *
 * 1. `cargo run --release -p face-index --example bench -- ... --expansion-search <--ef> --dump DIR`
 *    builds our shards for each kind, sweeps the candidate list over the same graphs, prints a
 *    JSON line per result, and writes the gallery, the queries and their exact top 10 into DIR
 *    (default .bench-out/ann/random-<n>x<dim> or sface-<n>; kept, for `--no-ours` reruns).
 *    --data, --n, --dim (random only; default 128, SFace's), --queries (default the example's:
 *    random 1000, sface every query photo), --kinds, --shards, --threads, --connectivity,
 *    --expansion-add, --near, --seed, --oversample and --no-exact go to it, and everything after
 *    `--` unchanged. Set CARGO_TARGET_DIR as for any cargo command.
 * 2. `bench/.venv/bin/python bench/search/ann-peers.py DIR` builds FAISS IndexHNSWFlat and hnswlib
 *    (inner product) with the same M and efConstruction as ours (usearch's defaults, 16 and
 *    128, or --connectivity / --expansion-add), on --threads threads (default all cores),
 *    sweeps the same efs, and times exact search (numpy, FAISS IndexFlatIP; --exact-queries of
 *    the queries one at a time). Setup once: `sh bench/search/ann-setup.sh`.
 * 3. One table at equal recall: every graph at the smallest swept ef whose recall@1 reaches
 *    --target-recall1, with build faces/s, queries/s one at a time and in a batch, CPU per
 *    query, recall@1/@10 and rank-1, and ratios to ours (--base: `ours-<kind>` as the service
 *    configures it, default f16; else that kind with re-ranking). Then recall and queries/s at
 *    every swept ef. Printed, and written as markdown to <out>.md (default next to the dump,
 *    for bench/RESULTS.md) with every result in <out>.json.
 *
 * --no-ours skips step 1 and runs the peers alone on an existing --dump.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot } from '../../src/config.js';
import { parseOptions, runAsScript } from '../lib/args.js';
import { describeMachine, machineLine, type Machine } from '../lib/machine.js';

const USAGE = `npm run bench:ann -- [--data random|sface] [--n 100000] [--dim 128] [--queries N] [--kinds f32,f16,i8]
    [--ef 16,32,64,128,256,512,1024] [--target-recall1 0.99] [--shards N] [--threads N] [--connectivity M]
    [--expansion-add EFC] [--near SIGMA] [--seed N] [--oversample N] [--no-exact] [--exact-queries 200] [--base f16]
    [--dump DIR] [--no-ours] [--out FILE_STEM] [-- <more options of the Rust example>]`;

const VALUED = ['n', 'dim', 'queries', 'data', 'kinds', 'ef', 'target-recall1', 'shards', 'near', 'seed', 'oversample', 'connectivity', 'expansion-add', 'threads', 'exact-queries', 'base', 'dump', 'out'];
const FLAGS = ['no-exact', 'no-ours'];

export interface AnnOptions {
  n: number;
  dim?: number;
  queries?: number;
  data?: string;
  kinds: string;
  ef: string;
  targetRecall1: number;
  connectivity?: number;
  expansionAdd?: number;
  threads?: number;
  exactQueries: number;
  base: string;
  dump: string;
  out: string;
  ours: boolean;
  /** Options for the Rust example: the ones named above that it takes, then everything after `--`. */
  rustArgs: string[];
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
  const root = findProjectRoot();
  const n = int('n', 100_000)!;
  const data = o.data;
  if (data !== undefined && data !== 'random' && data !== 'sface') throw new Error(`--data must be random or sface, got ${data}`);
  // Random vectors default to SFace's 128 dimensions; face data has its own.
  const dim = int('dim', data === 'sface' ? undefined : 128);
  const stem = data === 'sface' ? `sface-${n}` : `random-${n}x${dim}`;
  const dump = path.resolve(o.dump ?? path.join(root, '.bench-out', 'ann', stem));
  const ef = o.ef ?? '16,32,64,128,256,512,1024';
  if (!/^\d+(,\d+)*$/.test(ef)) throw new Error(`--ef must be a list like 64,128,256, got ${ef}`);
  const target = Number(o['target-recall1'] ?? 0.99);
  if (!(target > 0 && target <= 1)) throw new Error(`--target-recall1 must be in (0, 1], got ${o['target-recall1']}`);
  const rustArgs = ['--n', String(n), '--kinds', o.kinds ?? 'f32,f16,i8', '--expansion-search', ef];
  if (dim !== undefined) rustArgs.push('--dim', String(dim));
  for (const k of ['data', 'queries', 'shards', 'near', 'seed', 'oversample', 'connectivity', 'expansion-add', 'threads']) if (o[k] !== undefined) rustArgs.push(`--${k}`, o[k]);
  if (o['no-exact']) rustArgs.push('--no-exact');
  rustArgs.push(...extra, '--dump', dump);
  return {
    n,
    dim,
    queries: int('queries'),
    data,
    kinds: o.kinds ?? 'f32,f16,i8',
    ef,
    targetRecall1: target,
    connectivity: int('connectivity'),
    expansionAdd: int('expansion-add'),
    threads: int('threads'),
    exactQueries: int('exact-queries', 200)!,
    base: o.base ?? 'f16',
    dump,
    out: path.resolve(o.out ?? path.join(root, '.bench-out', 'ann', stem)),
    ours: !o['no-ours'],
    rustArgs,
  };
}

/** One result line, as bench/search/ann-peers.py prints it (and as the Rust example's JSON lines are read). */
export interface BuildLine {
  type: 'build';
  engine: string;
  label: string;
  n?: number;
  dims?: number;
  threads?: number | null;
  build_s: number;
  faces_per_s?: number | null;
  build_cpu_s?: number | null;
  rss_bytes_per_face?: number | null;
  version?: string;
  call_us?: number;
}

export interface SearchLine {
  type: 'search';
  engine: string;
  label: string;
  ef: number | null;
  recall1: number;
  recall10: number;
  qps1?: number | null;
  p50_ms: number;
  p99_ms: number;
  cpu_s_per_query1?: number | null;
  qps_batch?: number | null;
  cpu_s_per_query_batch?: number | null;
  threads_batch?: number | null;
  /** Threads one query may use (ours searches its shards in parallel). */
  threads1?: number | null;
  /** Identification rate where the dump names persons: the top hit is the query's own person. */
  rank1?: number | null;
  /** Queries/s from two client threads (ours). */
  qps2?: number | null;
}

type Line = BuildLine | SearchLine | { type: string; [k: string]: unknown };

/**
 * Engine key of one of our rows from its label, as the Rust example names them: `ours-<kind>` for
 * each kind as the service configures it (f32; f16 without re-ranking; i8 with it), then
 * `ours-f16-rerank`, `ours-i8-norerank`, and `ours-exact` for its exact scan.
 */
function oursEngine(label: string): string {
  if (/exact scan|brute/.test(label)) return 'ours-exact';
  const m = /usearch (f32|f16|i8)( \+rerank)?/.exec(label);
  if (!m) return `ours-${label}`;
  const [, kind, rerank] = m;
  if (kind === 'f16' && rerank) return 'ours-f16-rerank';
  if (kind === 'i8' && !rerank) return 'ours-i8-norerank';
  return `ours-${kind}`;
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
 * Our numbers from the Rust example's stdout. JSON lines (`{"type": "build" | "search", ...}` with
 * the fields of BuildLine and SearchLine) are used when it prints them; otherwise its two
 * markdown tables: `| index | build s | faces/s | RSS B/f | ...` and `| search | ef | p50 ms 1c |
 * p99 ms 1c | QPS 1c | ... | QPS batch | recall@1 | recall@10 | rank-1 |`, which give no CPU time.
 */
export function parseOurs(text: string): Line[] {
  const json = text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Line)
    .filter((l) => l.type === 'build' || l.type === 'search');
  if (json.length) {
    return json.map((l) => (typeof l.engine === 'string' && l.engine.startsWith('ours') ? l : { ...l, engine: oursEngine(String(l.label ?? l.engine)) }));
  }
  // "faces N dims D queries Q cores C shards S, ...": one query fans out over the shards, a batch over the cores.
  const head = /faces (\d+) dims (\d+) queries (\d+) cores (\d+) shards (\d+)/.exec(text);
  const [n, dims, , cores, shards] = head ? head.slice(1).map(Number) : [NaN, NaN, NaN, NaN, NaN];
  const value = (v: string | undefined) => (v === undefined || v === '-' || v === '' ? null : Number(v));
  const out: Line[] = [];
  for (const r of tableRows(text, 'index')) {
    out.push({
      type: 'build',
      engine: oursEngine(r.index),
      label: `ours: ${r.index}`,
      n,
      dims,
      threads: cores,
      build_s: Number(r['build s']),
      faces_per_s: value(r['faces/s']),
      rss_bytes_per_face: value(r['RSS B/f']),
      memory_bytes_per_face: value(r['memory B/f']),
    } as BuildLine);
  }
  for (const r of tableRows(text, 'search')) {
    const engine = oursEngine(r.search);
    out.push({
      type: 'search',
      engine,
      label: engine === 'ours-exact' ? 'ours: exact scan f32' : `ours: ${r.search}`,
      ef: engine === 'ours-exact' ? null : value(r.ef),
      recall1: Number(r['recall@1']),
      recall10: Number(r['recall@10']),
      rank1: value(r['rank-1']),
      qps1: value(r['QPS 1c']),
      p50_ms: Number(r['p50 ms 1c']),
      p99_ms: Number(r['p99 ms 1c']),
      qps_batch: value(r['QPS batch']),
      threads_batch: engine === 'ours-exact' ? null : cores,
      threads1: engine === 'ours-exact' ? 1 : shards,
      qps2: value(r['QPS 2c']),
    } as SearchLine);
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
  reached: boolean;
}

/**
 * The recall@1 the graphs are compared at: the target, or, when some graph stays below it at
 * every swept ef, the best recall@1 of the weakest graph, so that every graph is still taken at
 * (about) the same recall rather than each at its own best.
 */
export function commonRecall1(lines: Line[], target: number): number {
  const graphs = lines.filter((l): l is SearchLine => l.type === 'search' && l.ef !== null);
  const best = new Map<string, number>();
  for (const s of graphs) best.set(s.engine, Math.max(best.get(s.engine) ?? 0, s.recall1));
  return Math.min(target, ...best.values());
}

/** Per engine: the smallest ef whose recall@1 reaches `bar` (else its best row); exact rows as they are. */
export function choose(lines: Line[], bar: number): Map<string, Chosen> {
  const searches = lines.filter((l): l is SearchLine => l.type === 'search');
  const builds = lines.filter((l): l is BuildLine => l.type === 'build');
  const chosen = new Map<string, Chosen>();
  for (const engine of [...new Set(searches.map((s) => s.engine))]) {
    const mine = searches.filter((s) => s.engine === engine).sort((a, b) => (a.ef ?? 0) - (b.ef ?? 0));
    const hit = mine.find((s) => s.recall1 >= bar);
    const best = hit ?? [...mine].sort((a, b) => b.recall1 - a.recall1 || b.recall10 - a.recall10)[0];
    chosen.set(engine, { search: best, build: builds.find((b) => b.engine === engine), reached: hit !== undefined });
  }
  return chosen;
}

const ORDER = ['ours-f32', 'ours-f16', 'ours-f16-rerank', 'ours-i8', 'ours-i8-norerank', 'faiss', 'hnswlib', 'ours-exact', 'numpy', 'faiss-flat'];
const rank = (e: string) => (ORDER.includes(e) ? ORDER.indexOf(e) : ORDER.length);
const num = (v: number | null | undefined, digits: number) => (v === null || v === undefined || !Number.isFinite(v) ? '–' : v.toFixed(digits));
const int = (v: number | null | undefined) => (v === null || v === undefined || !Number.isFinite(v) ? '–' : Math.round(v).toLocaleString('en-US'));
const ratio = (v: number | null | undefined, base: number | null | undefined) => (v && base && Number.isFinite(v) && Number.isFinite(base) ? `${(v / base).toFixed(2)}x` : '–');

/** The equal-recall table and the sweep table, as markdown. */
/** Our engine that ratios are taken against: `ours-<kind>` itself, else that kind with re-ranking. */
export function baseEngine(chosen: Map<string, Chosen>, kind: string): string {
  const exact = `ours-${kind}`;
  return chosen.has(exact) ? exact : [...chosen.keys()].find((k) => k.startsWith(exact)) ?? exact;
}

export function tables(chosen: Map<string, Chosen>, lines: Line[], baseEngine: string, target: number): string {
  const base = chosen.get(baseEngine);
  const out: string[] = [];
  out.push(
    `| method | ef | recall@1 | recall@10 | rank-1 | build faces/s (threads) | RSS B/face | q/s, 1 query at a time | p50 ms | p99 ms | CPU µs/query | q/s, one batch (threads) | CPU µs/query, batch | build vs ours | q/s vs ours | p50 vs ours | batch q/s vs ours | CPU/query vs ours |`,
    `|${'---|'.repeat(18)}`,
  );
  for (const [engine, c] of [...chosen].sort((a, b) => rank(a[0]) - rank(b[0]))) {
    const s = c.search;
    const b = c.build;
    const exact = s.ef === null;
    const ef = exact ? '' : `${s.ef}${c.reached ? '' : ' (below target)'}`;
    const threads1 = s.threads1 && s.threads1 > 1 ? ` (${s.threads1} threads)` : '';
    out.push(
      [
        s.label,
        ef,
        num(s.recall1, 3),
        num(s.recall10, 3),
        num(s.rank1, 3),
        !exact && b && b.faces_per_s ? `${int(b.faces_per_s)}${b.threads ? ` (${b.threads})` : ''}` : '–',
        int(b?.rss_bytes_per_face),
        `${int(s.qps1)}${threads1}`,
        num(s.p50_ms, 3),
        num(s.p99_ms, 3),
        num(s.cpu_s_per_query1 === undefined || s.cpu_s_per_query1 === null ? null : s.cpu_s_per_query1 * 1e6, 1),
        s.qps_batch ? `${int(s.qps_batch)}${s.threads_batch ? ` (${s.threads_batch})` : ''}` : '–',
        num(s.cpu_s_per_query_batch === undefined || s.cpu_s_per_query_batch === null ? null : s.cpu_s_per_query_batch * 1e6, 1),
        engine === baseEngine ? '1.00x' : exact ? '–' : ratio(b?.faces_per_s, base?.build?.faces_per_s),
        engine === baseEngine ? '1.00x' : ratio(s.qps1, base?.search.qps1),
        engine === baseEngine ? '1.00x' : ratio(s.p50_ms, base?.search.p50_ms),
        engine === baseEngine ? '1.00x' : ratio(s.qps_batch, base?.search.qps_batch),
        engine === baseEngine ? '1.00x' : ratio(s.cpu_s_per_query1, base?.search.cpu_s_per_query1),
      ]
        .join(' | ')
        .replace(/^/, '| ')
        .replace(/$/, ' |'),
    );
  }
  // Sweep: one row per ef, one column per graph: recall@1 / recall@10 / q/s one at a time.
  const searches = lines.filter((l): l is SearchLine => l.type === 'search' && l.ef !== null);
  const engines = [...new Set(searches.map((s) => s.engine))].sort((a, b) => rank(a) - rank(b));
  const efs = [...new Set(searches.map((s) => s.ef as number))].sort((a, b) => a - b);
  if (efs.length) {
    const label = (e: string) => searches.find((s) => s.engine === e)!.label;
    out.push('', `Every swept ef: recall@1 / recall@10 / queries/s one at a time (or p50 where a method gives no rate; bold: the ef of the table above, the smallest with recall@1 ≥ ${target.toFixed(3)}).`, '');
    out.push(`| ef | ${engines.map(label).join(' | ')} |`, `|${'---|'.repeat(engines.length + 1)}`);
    for (const ef of efs) {
      const cells = engines.map((e) => {
        const s = searches.find((x) => x.engine === e && x.ef === ef);
        if (!s) return '';
        const speed = s.qps1 ? int(s.qps1) : `p50 ${num(s.p50_ms, 3)} ms`;
        const text = `${s.recall1.toFixed(3)} / ${s.recall10.toFixed(3)} / ${speed}`;
        return chosen.get(e)?.search === s ? `**${text}**` : text;
      });
      out.push(`| ${ef} | ${cells.join(' | ')} |`);
    }
  }
  return out.join('\n');
}

function versionsFrom(lines: Line[]): Record<string, string> {
  const v: Record<string, string> = {};
  for (const l of lines) {
    if (l.type !== 'build' || typeof l.version !== 'string') continue;
    if (l.engine === 'faiss' || l.engine === 'faiss-flat') v['faiss-cpu'] = l.version;
    if (l.engine === 'hnswlib') v.hnswlib = l.version;
    if (l.engine === 'numpy') v.numpy = l.version;
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
  machine: { python: string };
  dataset?: { about?: Record<string, string> };
}

export function markdown(o: AnnOptions, machine: Machine, lines: Line[], target: number): string {
  const meta = lines.find((l) => l.type === 'meta') as PeersMeta | undefined;
  const bar = commonRecall1(lines, target);
  const chosen = choose(lines, bar);
  const short = [...choose(lines, target).values()].filter((c) => !c.reached && c.search.ef !== null).map((c) => c.search.label);
  const base = baseEngine(chosen, o.base);
  const command = ['npm run bench:ann --', ...process.argv.slice(2)].join(' ');
  const calls = lines
    .filter((l): l is BuildLine => l.type === 'build' && typeof l.call_us === 'number' && (l.engine === 'faiss' || l.engine === 'hnswlib'))
    .map((l) => `${l.label} ${l.call_us!.toFixed(1)} µs`)
    .join(', ');
  const ours = [...chosen.values()].find((c) => c.search.engine.startsWith('ours-') && c.search.engine !== 'ours-exact' && c.search.threads1);
  const oursCpu = [...chosen.values()].some((c) => c.search.engine.startsWith('ours-') && typeof c.search.cpu_s_per_query1 === 'number');
  const about = Object.entries(meta?.dataset?.about ?? {})
    .map(([k, v]) => `${k}: ${v}`)
    .join('; ');
  const versions = Object.entries(machine.versions)
    .filter(([k]) => ['faiss-cpu', 'hnswlib', 'numpy'].includes(k))
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  const n = meta?.n ?? o.n;
  const text = [
    `## Search index against FAISS HNSW and hnswlib: \`${command}\``,
    '',
    `${machine.date.slice(0, 16).replace('T', ' ')} UTC, ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB.toFixed(0)} GiB, ${machine.os}, ` +
      `1-minute load ${machine.loadPerCore.toFixed(2)} per core at the start; ${versions}${meta ? `, Python ${meta.machine.python}` : ''}.`,
    '',
    `${n.toLocaleString('en-US')} faces × ${meta?.dims ?? o.dim} dims, ${meta ? meta.queries.toLocaleString('en-US') : '?'} queries, top 10` +
      `${about ? ` (${about})` : ''}. Every method searches the same vectors (the Rust example's \`--dump\`) and is scored against the same exact top 10; ` +
      `rank-1, where the data has persons, counts a query whose top hit is its own person's enrolled photo. ` +
      `Graphs: inner product, M ${meta?.M ?? o.connectivity ?? 16}, efConstruction ${meta?.ef_construction ?? o.expansionAdd ?? 128}. ` +
      (o.ours
        ? `Ours: ${o.kinds} on ${ours?.search.threads1 ?? '?'} shards built in parallel; "1 query at a time" is one client thread, each query searching the shards in parallel ` +
          `(${ours?.search.threads1 ?? '?'} threads), queries/s over the whole pass; "batch" is \`search_batch\` in batches of 64 on the set's pool (${ours?.search.threads_batch ?? '?'} threads); ` +
          (oursCpu ? `CPU per query from /proc (10 ms ticks over the pass). ` : `the example reported no CPU time. `)
        : 'Ours not run here (`--no-ours`). ') +
      `Peers: built on ${meta?.threads ?? machine.cores} threads; "1 query at a time" is one call per query on one thread, queries/s = queries / summed call time ` +
      `(including the Python binding's cost per call: ${calls || 'not measured'}); "batch" is all queries in one call on ${meta?.threads ?? machine.cores} threads; ` +
      `CPU per query is the process's CPU time over the pass. Each graph at the smallest swept ef whose recall@1 reaches ${bar.toFixed(3)}` +
      (bar < target ? ` (the best of the weakest graph: ${short.join(', ')} stayed below the asked ${target} at every swept ef)` : '') +
      '; ' +
      `ratios against ${chosen.get(base)?.search.label ?? `ours ${o.base} (not run)`}.`,
    '',
    tables(chosen, lines, base, bar),
  ];
  return text.join('\n');
}

async function main(o: AnnOptions): Promise<number> {
  const root = findProjectRoot();
  const py = path.join(root, 'bench/.venv/bin/python');
  if (!existsSync(py)) throw new Error('bench/.venv is missing: sh bench/search/ann-setup.sh');
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
  } else if (!existsSync(o.dump)) {
    throw new Error(`--no-ours needs an existing --dump folder, ${o.dump} is missing`);
  }
  const peerArgs = [path.join(root, 'bench/search/ann-peers.py'), o.dump, '--efs', o.ef, '--target-recall1', String(o.targetRecall1), '--exact-queries', String(o.exactQueries)];
  if (o.connectivity) peerArgs.push('--m', String(o.connectivity));
  if (o.expansionAdd) peerArgs.push('--ef-construction', String(o.expansionAdd));
  if (o.threads) peerArgs.push('--threads', String(o.threads));
  process.stderr.write(`peers: ${py} ${peerArgs.join(' ')}\n`);
  const peers = await run(py, peerArgs, root);
  for (const l of peers.split('\n')) if (l.startsWith('{')) lines.push(JSON.parse(l) as Line);

  const machine = { ...start, versions: { ...start.versions, ...versionsFrom(lines) } };
  const md = markdown(o, machine, lines, o.targetRecall1);
  console.log(machineLine(machine));
  console.log();
  console.log(md);
  writeFileSync(`${o.out}.md`, md + '\n');
  writeFileSync(`${o.out}.json`, JSON.stringify({ options: o, machine, results: lines }, null, 1));
  console.log(`\nwritten: ${o.out}.md (for bench/RESULTS.md), ${o.out}.json; vectors in ${o.dump}`);
  const missing = [...choose(lines, o.targetRecall1)].filter(([, c]) => !c.reached && c.search.ef !== null).map(([, c]) => c.search.label);
  if (missing.length) console.log(`below recall@1 ${o.targetRecall1} at every swept ef: ${missing.join(', ')} (sweep larger --ef values)`);
  return 0;
}

runAsScript(import.meta.url, () => parseCli(process.argv.slice(2)), main);
