/**
 * Reads a V8 CPU profile (`node --cpu-prof`, or `npm run bench:peers -- http
 * --cpu-prof DIR`) and reports where the time went:
 *
 *   node dist/bench/http/flame.js <file.cpuprofile> [--top N] [--svg out.svg] [--title T]
 *                            [--inclusive name,name,...] [--window S] [--callers name [--depth D]]
 *
 * --window S keeps only the busiest S seconds (the load run, without start-up,
 * seeding or the idle tail).
 * - the top N functions by self time, as a share of the busy time (samples
 *   that are not "(idle)");
 * - self time by package or file group (node internals, zod, pino, postgres,
 *   uWebSockets.js, our src/, ...);
 * - with --inclusive, the share of busy samples whose stack contains each
 *   named function (counted once per sample, so recursion does not inflate it);
 * - with --callers, who calls the named function, by its self time;
 * - with --svg, a flame graph (root at the bottom, width = total time) with a
 *   tooltip per frame, drawn here without any library.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** Frames that are not JavaScript work of the program. */
const IDLE = '(idle)';

export interface Tree {
  nodes: Map<number, ProfileNode>;
  parent: Map<number, number>;
  /** Microseconds attributed to each node itself. */
  self: Map<number, number>;
  rootId: number;
  /** Total and busy (not idle) microseconds. */
  total: number;
  busy: number;
  samples: number[];
  weights: number[];
}

/**
 * Keeps the samples of the busiest `seconds`-long stretch of the profile: the
 * load run, without start-up, seeding and the idle tail.
 */
function busiestWindow(p: CpuProfile, idle: Set<number>, seconds: number): CpuProfile {
  const at: number[] = [];
  let t = 0;
  for (const d of p.timeDeltas) at.push((t += d));
  const span = seconds * 1e6;
  let best = 0;
  let bestFrom = 0;
  let sum = 0;
  let from = 0;
  for (let i = 0; i < p.samples.length; i++) {
    if (!idle.has(p.samples[i])) sum += p.timeDeltas[i + 1] ?? 0;
    while (at[i] - at[from] > span) {
      if (!idle.has(p.samples[from])) sum -= p.timeDeltas[from + 1] ?? 0;
      from++;
    }
    if (sum > best) {
      best = sum;
      bestFrom = from;
    }
  }
  let to = bestFrom;
  while (to < p.samples.length && at[to] - at[bestFrom] <= span) to++;
  return { ...p, samples: p.samples.slice(bestFrom, to), timeDeltas: p.timeDeltas.slice(bestFrom, to + 1) };
}

export function loadProfile(file: string, windowS?: number): Tree {
  let p = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  if (windowS) p = busiestWindow(p, new Set(p.nodes.filter((n) => n.callFrame.functionName === IDLE).map((n) => n.id)), windowS);
  const nodes = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const rootId = p.nodes.find((n) => !parent.has(n.id))!.id;
  // timeDeltas[i] is the time from sample i-1 to sample i: sample i stands for the
  // interval that ends at the next sample, so it takes timeDeltas[i + 1].
  const deltas = p.timeDeltas;
  const weights = p.samples.map((_, i) => Math.max(0, deltas[i + 1] ?? deltas[i] ?? 0));
  const self = new Map<number, number>();
  let total = 0;
  let busy = 0;
  p.samples.forEach((id, i) => {
    const w = weights[i];
    self.set(id, (self.get(id) ?? 0) + w);
    total += w;
    if (nodes.get(id)!.callFrame.functionName !== IDLE) busy += w;
  });
  return { nodes, parent, self, rootId, total, busy, samples: p.samples, weights };
}

/** A short location: package name or path below the project root, and the 1-based line. */
export function where(cf: CallFrame): string {
  if (!cf.url) return '';
  let u = cf.url.replace(/^file:\/\//, '');
  const nm = u.lastIndexOf('node_modules/');
  if (nm >= 0) u = u.slice(nm + 'node_modules/'.length);
  else {
    const marks = ['/dist/', '/src/'];
    for (const m of marks) {
      const at = u.lastIndexOf(m);
      if (at >= 0) {
        u = u.slice(at + 1);
        break;
      }
    }
  }
  return `${u}:${cf.lineNumber + 1}`;
}

/** The group a frame's self time is charged to in the by-module table. */
export function groupOf(cf: CallFrame): string {
  const u = cf.url;
  if (!u) return cf.functionName.startsWith('(') ? cf.functionName : '(native / builtins)';
  if (u.startsWith('node:')) return `node: ${u.slice(5).split('/').slice(0, 2).join('/')}`;
  const nm = u.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const rest = u.slice(nm + 'node_modules/'.length).split('/');
    return rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0];
  }
  const d = u.lastIndexOf('/dist/');
  if (d >= 0) return path.dirname(u.slice(d + '/dist/'.length)) + '/';
  return u;
}

const label = (cf: CallFrame) => cf.functionName || '(anonymous)';
const pct = (v: number, of: number) => `${((100 * v) / of).toFixed(1)}%`;

export function topSelf(t: Tree, n: number): { fn: string; where: string; self: string }[] {
  const byFrame = new Map<string, { fn: string; where: string; us: number }>();
  for (const [id, us] of t.self) {
    const cf = t.nodes.get(id)!.callFrame;
    if (cf.functionName === IDLE) continue;
    const key = `${label(cf)}@${where(cf)}`;
    const e = byFrame.get(key) ?? { fn: label(cf), where: where(cf), us: 0 };
    e.us += us;
    byFrame.set(key, e);
  }
  return [...byFrame.values()]
    .sort((a, b) => b.us - a.us)
    .slice(0, n)
    .map((e) => ({ fn: e.fn, where: e.where, self: pct(e.us, t.busy) }));
}

export function byGroup(t: Tree): { group: string; self: string }[] {
  const groups = new Map<string, number>();
  for (const [id, us] of t.self) {
    const cf = t.nodes.get(id)!.callFrame;
    if (cf.functionName === IDLE) continue;
    const g = groupOf(cf);
    groups.set(g, (groups.get(g) ?? 0) + us);
  }
  return [...groups.entries()].sort((a, b) => b[1] - a[1]).map(([group, us]) => ({ group, self: pct(us, t.busy) }));
}

/**
 * Share of busy time whose stack contains a frame named `name`; `name@group`
 * narrows it to one group of the by-module table, `@group` takes the whole group.
 */
export function inclusive(t: Tree, names: string[]): { fn: string; inclusive: string }[] {
  const sums = new Map(names.map((n) => [n, 0]));
  const stackCache = new Map<number, Set<string>>();
  const stackOf = (id: number): Set<string> => {
    let s = stackCache.get(id);
    if (s) return s;
    s = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = t.parent.get(at)) {
      const cf = t.nodes.get(at)!.callFrame;
      s.add(label(cf));
      s.add(`${label(cf)}@${groupOf(cf)}`);
      s.add(`@${groupOf(cf)}`);
    }
    stackCache.set(id, s);
    return s;
  };
  t.samples.forEach((id, i) => {
    if (t.nodes.get(id)!.callFrame.functionName === IDLE) return;
    const s = stackOf(id);
    for (const n of names) if (s.has(n)) sums.set(n, sums.get(n)! + t.weights[i]);
  });
  return names.map((n) => ({ fn: n, inclusive: pct(sums.get(n)!, t.busy) }));
}

/** Where the self time of frames named `name` comes from: the stack of up to `depth` callers above it. */
export function callers(t: Tree, name: string, depth = 3): { callers: string; self: string }[] {
  const sums = new Map<string, number>();
  for (const [id, us] of t.self) {
    const n = t.nodes.get(id)!;
    if (label(n.callFrame) !== name) continue;
    const chain: string[] = [];
    for (let at = t.parent.get(id); at !== undefined && chain.length < depth; at = t.parent.get(at)) {
      const cf = t.nodes.get(at)!.callFrame;
      chain.push(`${label(cf)} (${where(cf) || groupOf(cf)})`);
    }
    const key = chain.join(' < ');
    sums.set(key, (sums.get(key) ?? 0) + us);
  }
  return [...sums.entries()].sort((a, b) => b[1] - a[1]).map(([k, us]) => ({ callers: k, self: pct(us, t.busy) }));
}

// ---------------------------------------------------------------- flame graph

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

function colour(cf: CallFrame): string {
  const g = groupOf(cf);
  if (g.startsWith('src/') || g.startsWith('bench/')) return 'hsl(210,70%,70%)';
  if (g.startsWith('node:')) return 'hsl(40,80%,65%)';
  if (g.startsWith('(')) return 'hsl(0,0%,78%)';
  let h = 0;
  for (const ch of g) h = (h * 31 + ch.charCodeAt(0)) % 360;
  return `hsl(${(h % 120) + 0},75%,62%)`;
}

export function flameSvg(t: Tree, title: string): string {
  // Inclusive time per node, without the idle frame.
  const totalOf = new Map<number, number>();
  const visit = (id: number): number => {
    const n = t.nodes.get(id)!;
    if (n.callFrame.functionName === IDLE) {
      totalOf.set(id, 0);
      return 0;
    }
    let sum = t.self.get(id) ?? 0;
    for (const c of n.children ?? []) sum += visit(c);
    totalOf.set(id, sum);
    return sum;
  };
  const rootTotal = visit(t.rootId);
  const W = 1200;
  const ROW = 16;
  const minW = 0.3;
  const rects: { x: number; depth: number; w: number; id: number }[] = [];
  let maxDepth = 0;
  const place = (id: number, x: number, depth: number) => {
    const w = (totalOf.get(id)! / rootTotal) * W;
    if (w < minW) return;
    rects.push({ x, depth, w, id });
    maxDepth = Math.max(maxDepth, depth);
    let cx = x;
    const kids = [...(t.nodes.get(id)!.children ?? [])].sort((a, b) => label(t.nodes.get(a)!.callFrame).localeCompare(label(t.nodes.get(b)!.callFrame)));
    for (const c of kids) {
      place(c, cx, depth + 1);
      cx += (totalOf.get(c)! / rootTotal) * W;
    }
  };
  place(t.rootId, 0, 0);
  const top = 40;
  const H = top + (maxDepth + 1) * ROW + 10;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="monospace" font-size="10">`);
  out.push(`<rect width="100%" height="100%" fill="white"/>`);
  out.push(`<text x="4" y="16" font-family="sans-serif" font-size="13" font-weight="bold">${esc(title)}</text>`);
  out.push(`<text x="4" y="32" font-family="sans-serif" font-size="11">busy ${(t.busy / 1000).toFixed(0)} ms of ${(t.total / 1000).toFixed(0)} ms sampled; width = time on stack, root at the bottom; hover for details</text>`);
  for (const r of rects) {
    const n = t.nodes.get(r.id)!;
    const cf = n.callFrame;
    const y = H - 10 - (r.depth + 1) * ROW;
    const tot = totalOf.get(r.id)!;
    const tip = `${label(cf)} ${where(cf)} — total ${pct(tot, t.busy)}, self ${pct(t.self.get(r.id) ?? 0, t.busy)}`;
    out.push(`<g><title>${esc(tip)}</title><rect x="${r.x.toFixed(2)}" y="${y}" width="${r.w.toFixed(2)}" height="${ROW - 1}" fill="${colour(cf)}"/>`);
    const chars = Math.floor((r.w - 4) / 6);
    if (chars >= 3) {
      const text = label(cf).length > chars ? `${label(cf).slice(0, chars - 1)}…` : label(cf);
      out.push(`<text x="${(r.x + 2).toFixed(2)}" y="${y + ROW - 4}">${esc(text)}</text>`);
    }
    out.push('</g>');
  }
  out.push('</svg>');
  return out.join('\n');
}

function main() {
  const args = process.argv.slice(2);
  const file = args.find((a, i) => !a.startsWith('--') && (i === 0 || !args[i - 1].startsWith('--')));
  if (!file) {
    console.error('usage: node dist/bench/http/flame.js <file.cpuprofile> [--top N] [--svg out.svg] [--title T] [--inclusive a,b,c] [--window S] [--callers name [--depth D]]');
    process.exit(2);
  }
  const opt = (k: string) => {
    const i = args.indexOf(`--${k}`);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const t = loadProfile(file, opt('window') ? Number(opt('window')) : undefined);
  console.log(`${file}: ${(t.total / 1e6).toFixed(2)} s sampled, busy ${(t.busy / 1e6).toFixed(2)} s (${pct(t.busy, t.total)}); shares below are of busy time`);
  console.table(topSelf(t, Number(opt('top') ?? 25)));
  console.table(byGroup(t).slice(0, 20));
  const inc = opt('inclusive');
  if (inc) console.table(inclusive(t, inc.split(',')));
  const who = opt('callers');
  if (who) console.table(callers(t, who, Number(opt('depth') ?? 3)).slice(0, 15));
  const svg = opt('svg');
  if (svg) {
    writeFileSync(svg, flameSvg(t, opt('title') ?? path.basename(file)));
    console.log(`svg: ${svg}`);
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === new URL(import.meta.url).pathname) main();
