/**
 * A long mixed load at a fixed request rate, watching the service's memory
 * and latency over time: `runSoak`, the run behind `npm run soak`
 * (bench/reliability/soak.ts, whose options are named below) and the 20 s
 * soak of test/integration/fuzz-chaos-soak.test.ts.
 *
 * The mix (by request number modulo 20): 3 detect, 3 add, 4 identify, 5 get a
 * face, 3 list faces (limit 50), 2 delete a face added during the soak. It is
 * an open loop (autocannon's, test/harness/http/http-load.ts): each second's requests
 * start whatever the answers do, at the start of the second. `--rate auto`
 * first runs the same mix in a closed loop for --probe-seconds (default 15)
 * and soaks at 80% of the throughput measured (whole requests per second). Every --interval seconds (default 10) the service's RSS
 * (/proc/<pid>/status) is sampled; afterwards requests, p50 and p99 are
 * computed per interval.
 *
 * Unexpected outcomes, which make the exit code 1: the service dying, a
 * connection error, a 5xx other than 503 with Retry-After, an error body
 * that is not JSON {code, reason, error}, an answer slower than 5 s, or a
 * status the request's kind never gives (e.g. a 404 for a face never deleted).
 */
import { Client, demoPhotos } from '../http/client.js';
import { byKind, runLoad, type Answer, type HttpRequest, type LoadResult } from '../http/http-load.js';
import { startBenchService, type BenchService } from '../load-service.js';
import { answerProblems, mib, rssKiB, type Problem } from './outcome.js';

export interface SoakOptions {
  seconds: number;
  /** Requests per second, or 'auto': 80% of a closed-loop probe's throughput. */
  rate: number | 'auto';
  intervalS: number;
  probeSeconds: number;
  probeConcurrency: number;
  url?: string;
  token: string;
  pid?: number;
  quiet?: boolean;
}

export interface IntervalStats {
  /** Seconds into the soak at the interval's start. */
  startS: number;
  requests: number;
  errors: number;
  p50: number;
  p99: number;
  max: number;
  rssKiB?: number;
}

export interface SoakReport {
  target: string;
  rate: number;
  probe?: { perSecond: number; concurrency: number; seconds: number };
  seconds: number;
  result: Omit<LoadResult, 'samples'>;
  byKind: Omit<LoadResult, 'samples'>[];
  intervals: IntervalStats[];
  rss: { startKiB?: number; endKiB?: number; maxKiB?: number };
  unexpected: { kind: string; count: number; detail: string }[];
  unexpectedTotal: number;
  samples: LoadResult['samples'];
}

/** Statuses each kind of request may answer with under load (503 with Retry-After is always allowed). */
const ALLOWED: Record<string, number[]> = {
  detect: [200],
  add: [200],
  identify: [200],
  get: [200],
  list: [200],
  delete: [204],
};

const KIND_OF = ['detect', 'detect', 'detect', 'add', 'add', 'add', 'identify', 'identify', 'identify', 'identify', 'get', 'get', 'get', 'get', 'get', 'list', 'list', 'list', 'delete', 'delete'];

export async function runSoak(opts: SoakOptions): Promise<SoakReport> {
  const log = (s: string) => {
    if (!opts.quiet) process.stderr.write(`${s}\n`);
  };
  let service: BenchService | undefined;
  const problems = new Map<string, { kind: string; count: number; detail: string }>();
  const note = (p: Problem, where: string) => {
    const key = `${p.kind}\u0000${where}`;
    const g = problems.get(key);
    if (g) g.count++;
    else problems.set(key, { kind: p.kind, count: 1, detail: `${where}: ${p.detail}` });
  };
  try {
    if (!opts.url) {
      log('soak: starting the service (embedded PostgreSQL, node dist/src/main.js)...');
      service = await startBenchService(opts.token);
    }
    const base = opts.url ?? service!.base;
    const pid = service?.child.pid ?? opts.pid;
    let died = false;
    service?.child.once('exit', (code, signal) => {
      died = true;
      note({ kind: 'crash', detail: `exited with code ${code}, signal ${signal}` }, 'service');
    });
    const client = new Client(base, opts.token, demoPhotos());
    const seeded = await client.seed('soak');
    log(`soak: ${seeded.length} faces seeded`);
    const added: number[] = [];

    // Every answer is judged here; an add's new ids feed the deletes.
    const check = (a: Answer): number | void => {
      const kind = a.kind ?? 'get';
      for (const pr of answerProblems({ status: a.status, headers: a.headers, body: a.body, ms: a.ms })) note(pr, kind);
      const okStatus = ALLOWED[kind].includes(a.status) || (a.status === 503 && a.headers['retry-after'] !== undefined);
      if (!okStatus) note({ kind: 'contract', detail: `${a.status} ${a.body.slice(0, 160)}` }, kind);
      if (kind === 'add' && a.status === 200) {
        try {
          for (const f of (JSON.parse(a.body).results ?? []) as { id: number }[]) added.push(f.id);
        } catch {
          // a 200 without JSON is an error-body problem, noted above
        }
      }
    };
    const onError = (err: Error) => note({ kind: died ? 'crash' : 'connection', detail: err.message }, 'network');
    const request = (i: number): HttpRequest => {
      let kind = KIND_OF[i % KIND_OF.length];
      if (kind === 'delete' && added.length === 0) kind = 'get';
      switch (kind) {
        case 'detect':
          return client.upload('POST', '/v1/detect/', { photo: i }, kind);
        case 'add':
          return client.upload('POST', '/v0/face/', { photo: i, meta: `soak-${i}` }, kind);
        case 'identify':
          return client.upload('POST', '/v0/identify/', { photo: i, n: '3' }, kind);
        case 'get':
          return { path: `/v0/face/id/${seeded[i % seeded.length]}/`, kind };
        case 'list':
          return { path: '/v0/faces/?limit=50', kind };
        default: {
          const id = added.splice(i % added.length, 1)[0];
          return { method: 'DELETE', path: `/v0/face/id/${id}/`, kind };
        }
      }
    };
    // A dead service ends the load at once instead of a storm of refused connections.
    const stop = new AbortController();
    service?.child.once('exit', () => stop.abort());
    const common = { base, headers: client.auth, request, check, onError, signal: stop.signal };

    let rate: number;
    let probe: SoakReport['probe'];
    if (opts.rate === 'auto') {
      log(`soak: measuring capacity (closed loop, ${opts.probeConcurrency} clients, ${opts.probeSeconds} s)...`);
      const r = await runLoad({ ...common, name: 'probe', connections: opts.probeConcurrency, seconds: opts.probeSeconds });
      probe = { perSecond: r.perSecond, concurrency: opts.probeConcurrency, seconds: r.seconds };
      rate = Math.max(1, Math.round(r.perSecond * 0.8));
      log(`soak: capacity ${r.perSecond.toFixed(1)} req/s, soaking at ${rate} req/s`);
      // The probe's requests count as any others, but its problems are the same service's: keep them.
    } else rate = opts.rate;

    const rssSamples: { at: number; kib?: number }[] = [];
    const started = performance.now();
    rssSamples.push({ at: 0, kib: rssKiB(pid) });
    const sampler = setInterval(() => rssSamples.push({ at: (performance.now() - started) / 1000, kib: rssKiB(pid) }), opts.intervalS * 1000);
    log(`soak: ${rate} req/s for ${opts.seconds} s`);
    const result = await runLoad({ ...common, name: `soak mix at ${rate} req/s`, rate, seconds: opts.seconds, connections: 512 });
    clearInterval(sampler);
    rssSamples.push({ at: (performance.now() - started) / 1000, kib: rssKiB(pid) });

    // Per-interval percentiles with the load code's own summary: label each sample with its interval.
    const samples = result.samples ?? [];
    const slot = (atMs: number) => Math.floor(atMs / 1000 / opts.intervalS);
    const slots = byKind({ ...result, samples: samples.map((s) => ({ ...s, kind: String(slot(s.at)) })) });
    const intervals: IntervalStats[] = slots
      .map((r) => {
        const k = Number(r.name.slice(r.name.lastIndexOf(': ') + 2));
        const startS = k * opts.intervalS;
        const rss = rssSamples.filter((x) => x.at >= startS && x.at <= startS + opts.intervalS && x.kib !== undefined).map((x) => x.kib!);
        return { startS, requests: r.requests, errors: r.errors, p50: r.p50, p99: r.p99, max: r.max, rssKiB: rss.length ? Math.max(...rss) : undefined };
      })
      .sort((a, b) => a.startS - b.startS);
    const known = rssSamples.filter((x) => x.kib !== undefined).map((x) => x.kib!);
    const { samples: _s, ...summary } = result;
    const unexpected = [...problems.values()].sort((a, b) => b.count - a.count);
    return {
      target: `${base}${opts.url ? '' : ' (started by the tool)'}`,
      rate,
      probe,
      seconds: result.seconds,
      result: summary,
      byKind: byKind(result).map(({ samples: _x, ...rest }) => rest),
      intervals,
      rss: { startKiB: known[0], endKiB: known[known.length - 1], maxKiB: known.length ? Math.max(...known) : undefined },
      unexpected,
      unexpectedTotal: unexpected.reduce((s, u) => s + u.count, 0),
      samples,
    };
  } finally {
    await service?.stop();
  }
}

/** RSS and p50/p99 per interval: the soak's own chart, next to the latency chart of bench/lib/svg.ts. */
export function intervalSvg(r: SoakReport, title: string): string {
  const W = 900;
  const H = 300;
  const m = { left: 70, right: 70, top: 36, bottom: 40 };
  const x0 = m.left;
  const x1 = W - m.right;
  const y0 = H - m.bottom;
  const y1 = m.top;
  const n = r.intervals.length;
  const tmax = Math.max(1, ...r.intervals.map((i) => i.startS)) || 1;
  const xs = (t: number) => x0 + (t / tmax) * (x1 - x0);
  const rssMax = Math.max(1, ...r.intervals.map((i) => i.rssKiB ?? 0)) / 1024;
  const latMax = Math.max(1, ...r.intervals.map((i) => (Number.isFinite(i.p99) ? i.p99 : 0)));
  const yr = (mb: number) => y0 - (mb / rssMax) * (y0 - y1);
  const yl = (ms: number) => y0 - (ms / latMax) * (y0 - y1);
  const line = (pts: [number, number][], color: string, dash = '') =>
    pts.length ? `<polyline points="${pts.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' ')}" fill="none" stroke="${color}" stroke-width="1.5"${dash}/>` : '';
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${x0}" y="18" font-size="14" font-weight="bold">${title.replace(/&/g, '&amp;').replace(/</g, '&lt;')}</text>`,
    `<rect x="${x0}" y="${y1}" width="${x1 - x0}" height="${y0 - y1}" fill="none" stroke="#999"/>`,
  ];
  for (let k = 0; k <= 4; k++) {
    const y = y0 - (k / 4) * (y0 - y1);
    parts.push(`<line x1="${x0}" x2="${x1}" y1="${y}" y2="${y}" stroke="#eee"/>`);
    parts.push(`<text x="${x0 - 6}" y="${y}" text-anchor="end" dy="3" fill="#1f77b4">${((latMax * k) / 4).toFixed(0)}</text>`);
    parts.push(`<text x="${x1 + 6}" y="${y}" dy="3" fill="#2ca02c">${((rssMax * k) / 4).toFixed(0)}</text>`);
  }
  for (let k = 0; k <= 5; k++) parts.push(`<text x="${xs((tmax * k) / 5).toFixed(1)}" y="${y0 + 14}" text-anchor="middle">${((tmax * k) / 5).toFixed(0)}</text>`);
  parts.push(`<text x="${(x0 + x1) / 2}" y="${y0 + 30}" text-anchor="middle">seconds into the soak (interval start)</text>`);
  parts.push(`<text transform="translate(16 ${(y0 + y1) / 2}) rotate(-90)" text-anchor="middle" fill="#1f77b4">latency ms (line p50, dashed p99)</text>`);
  parts.push(`<text transform="translate(${W - 14} ${(y0 + y1) / 2}) rotate(90)" text-anchor="middle" fill="#2ca02c">service RSS MiB</text>`);
  if (n) {
    parts.push(line(r.intervals.filter((i) => Number.isFinite(i.p50)).map((i) => [xs(i.startS), yl(i.p50)]), '#1f77b4'));
    parts.push(line(r.intervals.filter((i) => Number.isFinite(i.p99)).map((i) => [xs(i.startS), yl(i.p99)]), '#1f77b4', ' stroke-dasharray="5 3"'));
    parts.push(line(r.intervals.filter((i) => i.rssKiB !== undefined).map((i) => [xs(i.startS), yr(i.rssKiB! / 1024)]), '#2ca02c'));
  }
  parts.push('</svg>');
  return parts.join('\n');
}

export function printSoakReport(r: SoakReport): void {
  console.log(`soak ${r.target}: ${r.result.requests} requests in ${r.seconds.toFixed(0)} s at ${r.rate} req/s${r.probe ? ` (80% of ${r.probe.perSecond.toFixed(1)} req/s measured)` : ''}`);
  console.log(`service RSS: start ${mib(r.rss.startKiB)}, end ${mib(r.rss.endKiB)}, max ${mib(r.rss.maxKiB)}`);
  console.table(
    [r.result, ...r.byKind].map((k) => ({
      requests: k.name,
      n: k.requests,
      errors: k.errors,
      'p50 ms': Number(k.p50.toFixed(1)),
      'p99 ms': Number(k.p99.toFixed(1)),
      'max ms': Number(k.max.toFixed(1)),
      ...(k.sent !== undefined ? { sent: k.sent } : {}),
    })),
  );
  console.table(
    r.intervals.map((i) => ({
      's from': i.startS,
      requests: i.requests,
      errors: i.errors,
      'p50 ms': Number(i.p50.toFixed(1)),
      'p99 ms': Number(i.p99.toFixed(1)),
      'RSS MiB': i.rssKiB !== undefined ? Math.round(i.rssKiB / 1024) : '-',
    })),
  );
  if (r.unexpectedTotal === 0) console.log('no unexpected outcomes');
  else {
    console.log(`unexpected outcomes (${r.unexpectedTotal}):`);
    for (const u of r.unexpected.slice(0, 40)) console.log(`  ${u.count} × ${u.kind}: ${u.detail}`);
  }
}
