/**
 * A self-contained SVG of one or more load runs: latency of every request over
 * the run (errors in red) above a latency histogram. Hand-written so that the
 * file opens in any browser and the benchmark pulls in nothing to draw it.
 */
import type { LoadResult } from '../../test/harness/http/http-load.js';

const W = 900;
const PANEL_H = 260;
const M = { left: 64, right: 20, top: 36, bottom: 40 };
const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#9467bd', '#8c564b', '#17becf'];

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const fmt = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

/** Latency axes are logarithmic: one slow outlier must not flatten everything else. */
function logScale(min: number, max: number, from: number, to: number) {
  const lo = Math.log10(Math.max(min, 0.01));
  const hi = Math.log10(Math.max(max, min * 1.01, 0.02));
  return (v: number) => from + ((Math.log10(Math.max(v, 0.01)) - lo) / (hi - lo)) * (to - from);
}

function decades(min: number, max: number): number[] {
  const out: number[] = [];
  for (let e = Math.floor(Math.log10(Math.max(min, 0.01))); e <= Math.ceil(Math.log10(max)); e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (v >= min && v <= max) out.push(v);
    }
  }
  return out;
}

export function latencySvg(runs: LoadResult[], title: string, subtitle = ''): string {
  const all = runs.flatMap((r) => r.samples ?? []);
  const parts: string[] = [];
  const height = M.top + PANEL_H + M.bottom + 30 + PANEL_H + M.bottom + 20 + runs.length * 16;
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${height}" viewBox="0 0 ${W} ${height}" font-family="sans-serif" font-size="11">`);
  parts.push(`<rect width="100%" height="100%" fill="white"/>`);
  parts.push(`<text x="${M.left}" y="18" font-size="14" font-weight="bold">${esc(title)}</text>`);
  if (subtitle) parts.push(`<text x="${M.left}" y="31" fill="#555">${esc(subtitle)}</text>`);
  if (all.length === 0) {
    parts.push(`<text x="${M.left}" y="${M.top + 40}">no samples</text></svg>`);
    return parts.join('\n');
  }
  // Loops, not Math.min(...xs): a fast run has more samples than a call may take arguments.
  let lmin = Infinity;
  let lmax = 0;
  let tmax = 1;
  for (const s of all) {
    lmin = Math.min(lmin, s.latency);
    lmax = Math.max(lmax, s.latency);
    tmax = Math.max(tmax, s.at + s.latency);
  }
  lmin = Math.max(0.05, lmin);
  const x0 = M.left;
  const x1 = W - M.right;

  // Panel 1: latency over time.
  const top1 = M.top;
  const bot1 = top1 + PANEL_H;
  const ys = logScale(lmin, lmax, bot1, top1);
  const xs = (t: number) => x0 + (t / tmax) * (x1 - x0);
  parts.push(`<rect x="${x0}" y="${top1}" width="${x1 - x0}" height="${PANEL_H}" fill="none" stroke="#999"/>`);
  for (const v of decades(lmin, lmax)) {
    const y = ys(v).toFixed(1);
    parts.push(`<line x1="${x0}" x2="${x1}" y1="${y}" y2="${y}" stroke="#eee"/><text x="${x0 - 6}" y="${y}" text-anchor="end" dy="3">${fmt(v)}</text>`);
  }
  for (let k = 0; k <= 5; k++) {
    const t = (tmax * k) / 5;
    parts.push(`<text x="${xs(t).toFixed(1)}" y="${bot1 + 14}" text-anchor="middle">${(t / 1000).toFixed(1)}</text>`);
  }
  parts.push(`<text x="${(x0 + x1) / 2}" y="${bot1 + 30}" text-anchor="middle">seconds into the run (request sent)</text>`);
  parts.push(`<text transform="translate(16 ${(top1 + bot1) / 2}) rotate(-90)" text-anchor="middle">latency ms (log)</text>`);
  runs.forEach((r, k) => {
    const color = COLORS[k % COLORS.length];
    // Thin large runs: a few thousand dots show the shape; more only make the file heavy.
    const samples = r.samples ?? [];
    const step = Math.max(1, Math.ceil(samples.length / 4000));
    for (let i = 0; i < samples.length; i += step) {
      const s = samples[i];
      const bad = s.status < 200 || s.status >= 300;
      parts.push(`<circle cx="${xs(s.at).toFixed(1)}" cy="${ys(s.latency).toFixed(1)}" r="${bad ? 2.2 : 1.5}" fill="${bad ? '#d62728' : color}" fill-opacity="0.6"/>`);
    }
    for (const [p, dash] of [
      [r.p50, ''],
      [r.p99, ' stroke-dasharray="5 3"'],
    ] as const) {
      if (Number.isFinite(p)) parts.push(`<line x1="${x0}" x2="${x1}" y1="${ys(p).toFixed(1)}" y2="${ys(p).toFixed(1)}" stroke="${color}"${dash}/>`);
    }
  });

  // Panel 2: histogram over log-spaced bins, one outline per run.
  const top2 = bot1 + M.bottom + 30;
  const bot2 = top2 + PANEL_H;
  const bins = 60;
  const xb = logScale(lmin, lmax, x0, x1);
  const lo = Math.log10(lmin);
  const hi = Math.log10(Math.max(lmax, lmin * 1.01));
  const counts = runs.map((r) => {
    const c = new Array<number>(bins).fill(0);
    for (const s of r.samples ?? []) c[Math.min(bins - 1, Math.max(0, Math.floor(((Math.log10(Math.max(s.latency, lmin)) - lo) / (hi - lo)) * bins)))]++;
    const n = Math.max(1, r.samples?.length ?? 1);
    return c.map((v) => v / n);
  });
  const cmax = Math.max(...counts.flat(), 1e-9);
  parts.push(`<rect x="${x0}" y="${top2}" width="${x1 - x0}" height="${PANEL_H}" fill="none" stroke="#999"/>`);
  for (const v of decades(lmin, lmax)) {
    const x = xb(v).toFixed(1);
    parts.push(`<line x1="${x}" x2="${x}" y1="${top2}" y2="${bot2}" stroke="#eee"/><text x="${x}" y="${bot2 + 14}" text-anchor="middle">${fmt(v)}</text>`);
  }
  for (let k = 0; k <= 4; k++) {
    const y = bot2 - (k / 4) * PANEL_H;
    parts.push(`<text x="${x0 - 6}" y="${y.toFixed(1)}" text-anchor="end" dy="3">${((cmax * k * 100) / 4).toFixed(0)}%</text>`);
  }
  parts.push(`<text x="${(x0 + x1) / 2}" y="${bot2 + 30}" text-anchor="middle">latency ms (log bins)</text>`);
  parts.push(`<text transform="translate(16 ${(top2 + bot2) / 2}) rotate(-90)" text-anchor="middle">share of requests</text>`);
  counts.forEach((c, k) => {
    const color = COLORS[k % COLORS.length];
    const pts: string[] = [`${x0},${bot2}`];
    c.forEach((v, b) => {
      const xa = x0 + (b / bins) * (x1 - x0);
      const xz = x0 + ((b + 1) / bins) * (x1 - x0);
      const y = bot2 - (v / cmax) * PANEL_H;
      pts.push(`${xa.toFixed(1)},${y.toFixed(1)}`, `${xz.toFixed(1)},${y.toFixed(1)}`);
    });
    pts.push(`${x1},${bot2}`);
    parts.push(`<polyline points="${pts.join(' ')}" fill="${color}" fill-opacity="0.15" stroke="${color}"/>`);
  });

  // Legend: one line per run with its headline numbers.
  let y = bot2 + M.bottom + 10;
  runs.forEach((r, k) => {
    const color = COLORS[k % COLORS.length];
    const late = r.sent !== undefined && r.targetRate !== undefined ? `, ${r.sent} sent of ${Math.round(r.targetRate * r.seconds)} due` : '';
    parts.push(
      `<rect x="${x0}" y="${y - 9}" width="10" height="10" fill="${color}"/><text x="${x0 + 16}" y="${y}">${esc(r.name)}: ` +
        `${r.perSecond.toFixed(1)} req/s, p50 ${fmt(r.p50)} ms, p99 ${fmt(r.p99)} ms, max ${fmt(r.max)} ms, ${r.errors} errors${late} (line: p50, dashed: p99; red: errors)</text>`,
    );
    y += 16;
  });
  parts.push('</svg>');
  return parts.join('\n');
}
