/**
 * HTTP load for the benchmarks, driven by autocannon (used as a library): a
 * generator written in JavaScript on top of `fetch` measured itself at a few
 * thousand requests per second, far below what the server answers, so the
 * sockets, the HTTP framing and the timing are autocannon's.
 *
 * Two shapes:
 * - closed loop (no `rate`): `connections` keep-alive connections, one
 *   request in flight on each (pipelining 1); each sends its next request as
 *   soon as its last is answered. Throughput is what the server sustains at
 *   that concurrency.
 * - open loop (`rate`, autocannon's `overallRate`): the rate is split over
 *   the connections, each allowed its share per one-second window whatever
 *   the answers do. Arrivals come at the start of each second rather than
 *   spread evenly, and a connection still waits for its answer, so `rate`
 *   needs enough connections (at most `rate`, autocannon's rule) to cover
 *   rate × latency; `sent` below `rate × seconds` shows where it fell short.
 *
 * Requests are either fixed (`fixed`: built once, the generator only writes
 * buffers, which is how it outruns the server) or built per request number
 * (`request(i)`, from autocannon's `setupRequest`). `check` sees every
 * answer's status, body and headers and may turn it into a failure.
 *
 * Every run reports the generator's own CPU (this process, all threads) and
 * its busiest thread: a thread near one core means the generator, not the
 * server, set the pace. Latency is from sending a request to the end of its
 * answer, kept per request (with its kind and start) for the per-kind rows
 * and the charts, except with `workers`, where only autocannon's histograms
 * (whole milliseconds) come back.
 */
import autocannon, { type AutocannonClient, type AutocannonContext, type AutocannonRequest, type AutocannonResult } from 'autocannon';
import { machineLine, type Machine } from '../machine.js';
import { busiestThreadSeconds, threadCpuSeconds } from '../proc-cpu.js';

export interface Sample {
  /** ms since the run started at which the request was sent. */
  at: number;
  /** ms, from sending the request to the end of the answer's body. */
  latency: number;
  /** HTTP status (or what `check` made of it). */
  status: number;
  /** What kind of request it was, when the run mixes kinds. */
  kind?: string;
}

export interface GeneratorCpu {
  /** CPU of this process over the run, all threads, in cores (1 = one core busy the whole time). */
  cores: number;
  /** The busiest single thread, in cores: near 1 the generator is the bottleneck. */
  busiestThread: number;
  /** Cores per 10,000 requests per second: the generator's cost per unit of load. */
  coresPer10k: number;
  /** The busiest thread above `SATURATED` of a core. */
  saturated: boolean;
}

/** A generator thread busier than this (of one core) may be what limits the run. */
export const SATURATED = 0.8;

export interface LoadResult {
  name: string;
  /** Answers received. */
  requests: number;
  /** Answers that failed `ok` or `check`, plus connection errors and timeouts. */
  errors: number;
  seconds: number;
  perSecond: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  /** Answers by status; "0" counts connection errors and timeouts. */
  statuses?: Record<string, number>;
  /** Open loop: the rate asked for, and the requests sent. */
  targetRate?: number;
  sent?: number;
  /** Connections (one request in flight on each). */
  concurrency?: number;
  generator?: GeneratorCpu;
  samples?: Sample[];
}

export interface HttpRequest {
  method?: string;
  /** Path and query, from the root of `base`. */
  path: string;
  headers?: Record<string, string>;
  body?: Buffer | string;
  /** Reported separately in mixed runs (`byKind`). */
  kind?: string;
}

export interface LoadOptions {
  name: string;
  /** http://host:port */
  base: string;
  /** Sent with every request (the token). */
  headers?: Record<string, string>;
  /** Requests cycled over on each connection, built once. */
  fixed?: HttpRequest[];
  /** Or request number `i` (0, 1, 2, ... across all connections), built when it is sent. */
  request?: (i: number) => HttpRequest;
  /**
   * Sees every answer (its body is collected for it); a number returned is
   * the status to record instead, e.g. 599 for a 200 whose body is wrong.
   */
  check?: (answer: Answer) => number | void;
  /** Connection errors and timeouts (counted as status 0). */
  onError?: (err: Error) => void;
  /** Ends the run early (e.g. when the server under test died). */
  signal?: AbortSignal;
  /** Closed loop: connections. Open loop: most connections (default 256). */
  connections?: number;
  /** Open loop: requests per second (whole, at least 1). */
  rate?: number;
  /** Stop after this many answers, or after `seconds`, whichever comes first. */
  requests?: number;
  seconds?: number;
  /** Statuses that count as success (default: 2xx). */
  ok?: (status: number) => boolean;
  /** autocannon worker threads: only with `fixed` requests and no `check`; no per-request samples. */
  workers?: number;
  /** Seconds before a request counts as timed out (default 60: a detection can queue). */
  timeoutS?: number;
  /** Called about every 200 ms with the answers so far. */
  progress?: (p: Progress) => void;
}

export interface Answer {
  /** The request number (built requests; undefined for fixed ones). */
  i?: number;
  kind?: string;
  status: number;
  body: string;
  /** Lower-case names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  /** ms from sending (built requests; NaN for fixed ones). */
  ms: number;
}

export interface Progress {
  done: number;
  errors: number;
  elapsedS: number;
  /** 0..1 of the request count or the duration, whichever is nearer its end. */
  fraction: number;
}

const is2xx = (s: number) => s >= 200 && s < 300;

function percentile(sorted: Float64Array | number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function summarise(name: string, samples: Sample[], seconds: number, isOk: (s: number) => boolean) {
  const latencies = Float64Array.from(samples, (s) => s.latency).sort();
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

/** One row per request kind of a mixed run, over the run's duration. */
export function byKind(r: LoadResult, ok: (s: number) => boolean = is2xx): LoadResult[] {
  const kinds = new Map<string, Sample[]>();
  for (const s of r.samples ?? []) {
    if (s.kind === undefined) continue;
    const list = kinds.get(s.kind);
    if (list) list.push(s);
    else kinds.set(s.kind, [s]);
  }
  return [...kinds.entries()].map(([kind, samples]) => ({ ...summarise(`${r.name}: ${kind}`, samples, r.seconds, ok), concurrency: r.concurrency, targetRate: r.targetRate }));
}

/** What the generator's CPU says about a run, for the reports. */
export function generatorLine(g: GeneratorCpu | undefined): string {
  if (!g) return 'generator CPU: not measured';
  const flag = g.saturated ? ` SATURATED: a generator thread used ${g.busiestThread.toFixed(2)} of a core, so the generator may have set this pace` : '';
  // % of a core per 10k req/s is numerically µs of generator CPU per request.
  return `generator CPU: ${g.cores.toFixed(2)} cores (${(g.coresPer10k * 100).toFixed(0)}% of a core per 10k req/s, i.e. µs per request; busiest thread ${g.busiestThread.toFixed(2)} of a core)${flag}`;
}

export async function runLoad(o: LoadOptions): Promise<LoadResult> {
  const requests = o.requests ?? Infinity;
  const seconds = o.seconds ?? Infinity;
  if (!Number.isFinite(requests) && !Number.isFinite(seconds)) throw new Error('a load run needs a request count or a duration');
  if (!o.fixed === !o.request) throw new Error('give fixed requests or a request builder, one of them');
  if (o.workers && (o.request || o.check)) throw new Error('workers take fixed requests only (functions stay in this thread)');
  const isOk = o.ok ?? is2xx;
  const rate = o.rate !== undefined ? Math.max(1, Math.round(o.rate)) : undefined;
  let connections = o.connections ?? (rate !== undefined ? 256 : 4);
  if (rate !== undefined) connections = Math.min(connections, rate);
  if (Number.isFinite(requests)) connections = Math.min(connections, requests);

  let next = 0;
  const toAutocannon = (r: HttpRequest, base: AutocannonRequest): AutocannonRequest => ({
    ...base,
    method: r.method ?? 'GET',
    path: r.path,
    headers: { ...base.headers, ...r.headers },
    // No body field at all without a body: requests handed to workers are structured-cloned,
    // which turns a Buffer into a Uint8Array that autocannon refuses.
    ...(r.body !== undefined ? { body: r.body } : {}),
  });
  const check = o.check;
  const onResponse = check
    ? (status: number, body: string, ctx: AutocannonContext, raw: Record<string, string | string[]>) => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(raw)) headers[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
        const ms = typeof ctx.sentAt === 'number' ? performance.now() - ctx.sentAt : NaN;
        const replaced = check({ i: ctx.i as number | undefined, kind: ctx.kind as string | undefined, status, body, headers, ms });
        ctx.status = typeof replaced === 'number' ? replaced : undefined;
      }
    : undefined;
  const list: AutocannonRequest[] = o.fixed
    ? o.fixed.map((r) => ({ ...toAutocannon(r, {}), ...(r.kind !== undefined ? { kind: r.kind } : {}), ...(onResponse ? { onResponse } : {}) }))
    : [
        {
          // autocannon calls this on the connection that sends next; the context is that
          // connection's, and with one request in flight it still describes the request
          // when the answer comes.
          setupRequest: (req, ctx) => {
            const i = next++;
            const r = o.request!(i);
            ctx.i = i;
            ctx.kind = r.kind;
            ctx.status = undefined;
            ctx.sentAt = performance.now();
            return toAutocannon(r, req);
          },
          ...(onResponse ? { onResponse } : {}),
        },
      ];

  const samples: Sample[] = [];
  const statuses: Record<string, number> = {};
  let failed = 0;
  let netErrors = 0;
  const threads0 = threadCpuSeconds();
  // Worker threads come and go within the run: read them while they live (their last
  // quarter second may be missed).
  const threadsSeen = new Map(threads0);
  const threadTimer = o.workers
    ? setInterval(() => {
        for (const [tid, sec] of threadCpuSeconds()) threadsSeen.set(tid, sec);
      }, 250)
    : undefined;
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const instance = autocannon({
    url: o.base,
    headers: o.headers ?? {},
    requests: list,
    connections,
    pipelining: 1,
    timeout: o.timeoutS ?? 60,
    ...(Number.isFinite(requests) ? { amount: requests } : { duration: seconds }),
    ...(rate !== undefined ? { overallRate: rate } : {}),
    ...(o.workers ? { workers: o.workers } : {}),
  });
  instance.on('response', (client: AutocannonClient, status: number, _bytes: number, ms: number) => {
    const ctx = client.requestIterator.context;
    const recorded = (ctx.status as number | undefined) ?? status;
    // Built per request: the kind is in the context; fixed: on the request itself.
    const kind = (ctx.kind ?? client.requestIterator.currentRequest?.kind) as string | undefined;
    const end = performance.now();
    samples.push(kind === undefined ? { at: end - ms - start, latency: ms, status: recorded } : { at: end - ms - start, latency: ms, status: recorded, kind });
    statuses[recorded] = (statuses[recorded] ?? 0) + 1;
    if (!isOk(recorded)) failed++;
  });
  instance.on('reqError', (err: Error) => {
    o.onError?.(err);
    netErrors++;
    statuses[0] = (statuses[0] ?? 0) + 1;
  });
  // A count-limited run would ignore the duration: stop it at the deadline ourselves.
  const deadline = Number.isFinite(requests) && Number.isFinite(seconds) ? setTimeout(() => instance.stop(), seconds * 1000) : undefined;
  const abort = () => instance.stop();
  o.signal?.addEventListener('abort', abort, { once: true });
  if (o.signal?.aborted) abort();
  const timer = o.progress
    ? setInterval(() => {
        const elapsedS = (performance.now() - start) / 1000;
        const done = samples.length + netErrors;
        const fraction = Math.min(1, Math.max(Number.isFinite(requests) ? done / requests : 0, Number.isFinite(seconds) ? elapsedS / seconds : 0));
        o.progress!({ done, errors: failed + netErrors, elapsedS, fraction });
      }, 200)
    : undefined;
  let result: AutocannonResult;
  try {
    result = await instance;
  } finally {
    if (deadline) clearTimeout(deadline);
    o.signal?.removeEventListener('abort', abort);
    if (timer) clearInterval(timer);
  }
  const cpu = process.cpuUsage(cpu0);
  if (threadTimer) clearInterval(threadTimer);
  for (const [tid, sec] of threadCpuSeconds()) threadsSeen.set(tid, sec);
  const busiest = busiestThreadSeconds(threads0, threadsSeen);

  let summary: Omit<LoadResult, 'name'> & { name: string };
  if (o.workers) {
    // Answers counted in the workers: autocannon's own totals and (whole-millisecond) histogram.
    const answered = result['1xx'] + result['2xx'] + result['3xx'] + result['4xx'] + result['5xx'];
    for (const [s, { count }] of Object.entries(result.statusCodeStats ?? {})) statuses[s] = count;
    if (result.errors) statuses[0] = result.errors;
    const bad = Object.entries(statuses).reduce((n, [s, c]) => n + (isOk(Number(s)) ? 0 : c), 0);
    summary = {
      name: o.name,
      requests: answered,
      errors: bad,
      seconds: result.duration,
      perSecond: answered / result.duration,
      p50: result.latency.p50,
      p90: result.latency.p90,
      p99: result.latency.p99,
      max: result.latency.max,
    };
  } else {
    // autocannon ends a run on its next one-second tick; the last answer is the end of the work.
    const last = samples.reduce((m, s) => Math.max(m, s.at + s.latency), 0) / 1000;
    const wall = Number.isFinite(requests) ? Math.max(last, 1e-3) : Math.min(result.duration, Math.max(seconds, last));
    summary = summarise(o.name, samples, wall, isOk);
    summary.errors += netErrors;
  }
  const wallS = (performance.now() - start) / 1000;
  const cores = (cpu.user + cpu.system) / 1e6 / wallS;
  const busiestThread = busiest / wallS;
  return {
    ...summary,
    statuses,
    concurrency: connections,
    ...(rate !== undefined ? { targetRate: rate, sent: result.requests.sent } : {}),
    generator: {
      cores,
      busiestThread,
      coresPer10k: summary.perSecond > 0 ? cores / (summary.perSecond / 10_000) : NaN,
      saturated: busiestThread > SATURATED,
    },
    samples: o.workers ? undefined : samples,
  };
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
      'generator cores': r.generator ? r.generator.cores.toFixed(2) : '-',
    })),
  );
}

export function statusSummary(r: LoadResult): string {
  return Object.entries(r.statuses ?? {})
    .filter(([s]) => !(Number(s) >= 200 && Number(s) < 300))
    .map(([s, n]) => `${s === '0' ? 'network' : s}: ${n}`)
    .join(', ');
}

export function printReport(machine: Machine, results: LoadResult[]): void {
  console.log(machineLine(machine));
  console.table(
    results.map((r) => ({
      scenario: r.name,
      load: r.targetRate !== undefined ? `${r.targetRate} req/s open, ${r.concurrency} conn` : `${r.concurrency} conn`,
      requests: r.requests,
      'req/s': Number(r.perSecond.toFixed(1)),
      errors: r.errors,
      'errors by status': statusSummary(r) || '-',
      ...(r.sent !== undefined ? { sent: r.sent } : {}),
      'p50 ms': Number(r.p50.toFixed(2)),
      'p90 ms': Number(r.p90.toFixed(2)),
      'p99 ms': Number(r.p99.toFixed(2)),
      'max ms': Number(r.max.toFixed(1)),
      'gen cores': r.generator ? Number(r.generator.cores.toFixed(2)) : '-',
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
