/**
 * HTTP load generation for the benchmarks, in two shapes:
 *
 * - closed loop (`runLoad`): `concurrency` clients each send the next request
 *   as soon as their last one is answered. Throughput is what the server
 *   sustains at that concurrency.
 * - open loop (`runRate`): request i is due at start + i/rate whatever the
 *   answers do, so a slow server sees a queue build up instead of fewer
 *   clients. Latency is counted from when a request was due, not from when it
 *   was sent (otherwise stalls would hide themselves); a request sent more
 *   than `LATE_MS` after it was due is a late start, the generator's own lag.
 *
 * Both stop when `requests` have been sent or `seconds` have passed,
 * whichever comes first, and keep every sample for the charts.
 */

/** A request is a late start when it leaves this much after its due time. */
export const LATE_MS = 5;

export interface Sample {
  /** ms since the run started at which the request was due (closed loop: sent). */
  at: number;
  /** ms, from due time to the end of the answer's body. */
  latency: number;
  /** HTTP status; 0 for a network error. */
  status: number;
  /** What kind of request it was, when the run mixes kinds (`LoadOptions.kindOf`). */
  kind?: string;
}

export interface LoadResult {
  name: string;
  requests: number;
  errors: number;
  seconds: number;
  perSecond: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  /** Answers by status ("0" for network errors). */
  statuses?: Record<string, number>;
  /** Open loop: the rate asked for, and requests that left late. */
  targetRate?: number;
  lateStarts?: number;
  concurrency?: number;
  samples?: Sample[];
}

export interface LoadOptions {
  name: string;
  concurrency: number;
  requests?: number;
  seconds?: number;
  /** Sends request number `i`; resolves to the HTTP status once the body is read. */
  send: (i: number) => Promise<number>;
  /** Statuses that count as success (default: 2xx). */
  ok?: (status: number) => boolean;
  /** Labels request `i` in its sample, so a mixed run can be broken down by kind (`byKind`). */
  kindOf?: (i: number) => string;
  /** Called about every 200 ms with the requests done so far. */
  progress?: (p: Progress) => void;
}

export interface RateOptions extends Omit<LoadOptions, 'concurrency'> {
  /** Requests per second to start. */
  rate: number;
  /** Most requests in flight; beyond it, due requests wait (and count as late). */
  maxInflight?: number;
}

export interface Progress {
  done: number;
  errors: number;
  elapsedS: number;
  /** 0..1 of the request count or the duration, whichever is nearer its end. */
  fraction: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function summarise(name: string, samples: Sample[], seconds: number, isOk: (s: number) => boolean) {
  const latencies = samples.map((s) => s.latency).sort((a, b) => a - b);
  return {
    name,
    requests: latencies.length,
    errors: samples.filter((s) => !isOk(s.status)).length,
    seconds,
    perSecond: latencies.length / seconds,
    p50: percentile(latencies, 50),
    p90: percentile(latencies, 90),
    p99: percentile(latencies, 99),
    max: latencies[latencies.length - 1] ?? NaN,
  };
}

/** One row per request kind of a mixed run (samples labelled by `kindOf`), over the run's duration. */
export function byKind(r: LoadResult, ok: (s: number) => boolean = (s) => s >= 200 && s < 300): LoadResult[] {
  const kinds = new Map<string, Sample[]>();
  for (const s of r.samples ?? []) {
    if (s.kind === undefined) continue;
    const list = kinds.get(s.kind);
    if (list) list.push(s);
    else kinds.set(s.kind, [s]);
  }
  return [...kinds.entries()].map(([kind, samples]) => ({ ...summarise(`${r.name}: ${kind}`, samples, r.seconds, ok), concurrency: r.concurrency, targetRate: r.targetRate }));
}

function checkBounds(requests: number, seconds: number): void {
  if (!Number.isFinite(requests) && !Number.isFinite(seconds)) throw new Error('a load run needs a request count or a duration');
}

class Recorder {
  readonly samples: Sample[] = [];
  readonly statuses: Record<string, number> = {};
  errors = 0;
  readonly start = performance.now();
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly isOk: (s: number) => boolean,
    private readonly requests: number,
    private readonly seconds: number,
    progress?: (p: Progress) => void,
  ) {
    if (progress) {
      this.timer = setInterval(() => progress(this.progress()), 200);
      this.timer.unref();
    }
  }

  progress(): Progress {
    const elapsedS = (performance.now() - this.start) / 1000;
    const byCount = Number.isFinite(this.requests) ? this.samples.length / this.requests : 0;
    const byTime = Number.isFinite(this.seconds) ? elapsedS / this.seconds : 0;
    return { done: this.samples.length, errors: this.errors, elapsedS, fraction: Math.min(1, Math.max(byCount, byTime)) };
  }

  async one(send: () => Promise<number>, due: number, kind?: string): Promise<void> {
    let status = 0;
    try {
      status = await send();
    } catch {
      status = 0;
    }
    const end = performance.now();
    this.samples.push(kind === undefined ? { at: due - this.start, latency: end - due, status } : { at: due - this.start, latency: end - due, status, kind });
    this.statuses[status] = (this.statuses[status] ?? 0) + 1;
    if (!this.isOk(status)) this.errors++;
  }

  finish(name: string, extra: Partial<LoadResult>): LoadResult {
    if (this.timer) clearInterval(this.timer);
    const elapsed = (performance.now() - this.start) / 1000;
    return {
      ...summarise(name, this.samples, elapsed, this.isOk),
      statuses: this.statuses,
      samples: this.samples,
      ...extra,
    };
  }
}

export async function runLoad({ name, concurrency, requests = Infinity, seconds = Infinity, send, ok, progress, kindOf }: LoadOptions): Promise<LoadResult> {
  checkBounds(requests, seconds);
  const rec = new Recorder(ok ?? ((s) => s >= 200 && s < 300), requests, seconds, progress);
  const deadline = rec.start + seconds * 1000;
  let next = 0;
  const client = async () => {
    while (next < requests && performance.now() < deadline) {
      const i = next++;
      await rec.one(() => send(i), performance.now(), kindOf?.(i));
    }
  };
  await Promise.all(Array.from({ length: concurrency }, client));
  return rec.finish(name, { concurrency });
}

export async function runRate({ name, rate, maxInflight = 256, requests = Infinity, seconds = Infinity, send, ok, progress, kindOf }: RateOptions): Promise<LoadResult> {
  checkBounds(requests, seconds);
  if (!(rate > 0)) throw new Error('--rate must be positive');
  const rec = new Recorder(ok ?? ((s) => s >= 200 && s < 300), requests, seconds, progress);
  const total = Math.min(requests, Number.isFinite(seconds) ? Math.floor(rate * seconds) : Infinity);
  const interval = 1000 / rate;
  const pending = new Set<Promise<void>>();
  let late = 0;
  for (let i = 0; i < total; i++) {
    const due = rec.start + i * interval;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    // The cap keeps a dead server from costing unbounded sockets; waiting here is lateness we report.
    while (pending.size >= maxInflight) await Promise.race(pending);
    if (performance.now() - due > LATE_MS) late++;
    const p = rec.one(() => send(i), due, kindOf?.(i)).finally(() => pending.delete(p));
    pending.add(p);
  }
  await Promise.all(pending);
  return rec.finish(name, { targetRate: rate, lateStarts: late, concurrency: maxInflight });
}

export function printLoadTable(rows: LoadResult[]): void {
  console.table(
    rows.map((r) => ({
      scenario: r.name,
      requests: r.requests,
      errors: r.errors,
      'req/s': r.perSecond.toFixed(1),
      'p50 ms': r.p50.toFixed(1),
      'p90 ms': r.p90.toFixed(1),
      'p99 ms': r.p99.toFixed(1),
      'max ms': r.max.toFixed(1),
    })),
  );
}

/** The progress line on stderr, only on a terminal: one line rewritten with \r. */
export function progressBar(label: string): { update: (p: Progress) => void; done: () => void } | undefined {
  if (!process.stderr.isTTY) return undefined;
  const width = 30;
  return {
    update(p) {
      const filled = Math.round(p.fraction * width);
      const rate = p.elapsedS > 0 ? p.done / p.elapsedS : 0;
      process.stderr.write(
        `\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(p.fraction * 100).toFixed(0).padStart(3)}% ` +
          `${p.done} req, ${rate.toFixed(1)} req/s, ${p.errors} errors, ${p.elapsedS.toFixed(1)} s   `,
      );
    },
    done() {
      process.stderr.write('\r\x1b[2K');
    },
  };
}
