/**
 * Fuzzing the HTTP service against its contract: `runFuzz`, the run behind
 * `npm run fuzz` (bench/reliability/fuzz.ts, whose options are named below)
 * and the short fuzz of test/integration/fuzz-chaos-soak.test.ts.
 *
 * Every route comes from the OpenAPI document the service serves. Cases are
 * grouped in categories (routes, auth, methods, ids, json, multipart, text,
 * dates, numbers, images, urls, headers, oversize; see fuzz/cases.ts); the
 * run picks categories by weight and walks each one's cases in a seeded
 * order, so a run with the same --seed sends the same requests. Costly cases
 * (image bombs, big bodies) run at most --heavy-cap times each (default 3)
 * and --heavy-budget times in all (default: no limit).
 *
 * Without --url the service is started here (embedded PostgreSQL in a
 * temporary directory, FACE_TOKEN set, `node dist/src/main.js` as a child).
 * With --url the run writes to that service's data (a gallery `fuzz`, faces
 * with meta `fuzz-seed` and empty metas, shards taken offline and back): point
 * it at a disposable instance. --pid gives the process whose RSS is reported.
 * The table counts, per category, requests, statuses and unexpected
 * outcomes: the service dying, a 5xx other than 503 with Retry-After, an
 * error body that is not JSON {code, reason, error}, an answer slower than
 * 5 s, a connection dropped where an answer was due, a status the contract
 * rules out or the OpenAPI document does not list, and extra answers on a
 * connection (smuggling). The exit code is 1 when there is any.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { findProjectRoot } from '../../../src/config/index.js';
import { startBenchService, type BenchService } from '../load-service.js';
import { readOperations } from './fuzz/api.js';
import { buildCases, CATEGORY_WEIGHTS, type Case, type FuzzContext } from './fuzz/cases.js';
import { uniformPng } from './images.js';
import { isUnexpected, mib, PROBLEM_KINDS, Rng, rssKiB, type Problem, type ProblemKind } from './outcome.js';

export interface FuzzOptions {
  requests: number;
  seconds: number;
  concurrency: number;
  seed: number;
  heavyCap: number;
  /** Most heavy case runs in all (default: no limit beyond heavyCap). */
  heavyBudget?: number;
  categories?: string[];
  url?: string;
  token: string;
  pid?: number;
  /** Extra environment for a service started here. */
  env?: Record<string, string>;
  /** Progress lines on stderr. */
  quiet?: boolean;
}

export interface CategoryReport {
  category: string;
  requests: number;
  statuses: Record<string, number>;
  unexpected: number;
  byKind: Partial<Record<ProblemKind, number>>;
}

export interface ProblemGroup {
  category: string;
  case: string;
  kind: ProblemKind;
  count: number;
  detail: string;
}

export interface FuzzReport {
  target: string;
  options: Omit<FuzzOptions, 'token' | 'env'>;
  seconds: number;
  requests: number;
  unexpected: number;
  /** `warmKiB`: after the first tenth of the requests, when lazily built engine buffers exist; the end is compared with it. */
  rss: { startKiB?: number; warmKiB?: number; endKiB?: number; peakKiB?: number };
  categories: CategoryReport[];
  problems: ProblemGroup[];
  /** Where the run's time went: the cases with the most exchange time in all. */
  slowestCases: { case: string; runs: number; totalS: number; maxS: number }[];
  notes: string[];
}

function demoJpeg(n = 1): Buffer {
  return readFileSync(path.join(findProjectRoot(), 'node_modules/@vladmandic/face-api/demo', `sample${n}.jpg`));
}

/** One face, a gallery, a person and a sighting for the routes that need existing ids. */
async function seedData(base: string, token: string, notes: string[]): Promise<FuzzContext['seed']> {
  const auth = { Authorization: `Token ${token}` };
  const seed = { faceId: 1, personId: 1, eventId: 1, photoHash: '0'.repeat(64), gallery: 'fuzz' };
  await fetch(`${base}/v0/galleries/fuzz/`, { method: 'POST', headers: auth }).catch(() => undefined);
  const fd = new FormData();
  fd.append('photo', new Blob([new Uint8Array(demoJpeg(1))], { type: 'image/jpeg' }), 'seed.jpg');
  fd.append('meta', 'fuzz-seed');
  fd.append('galleries', 'fuzz');
  fd.append('cam_id', 'fuzz-cam');
  try {
    const res = await fetch(`${base}/v0/face/`, { method: 'POST', headers: auth, body: fd });
    const body = (await res.json()) as { results?: { id: number; photo_hash: string }[]; sightings?: { id: number; person_id: number }[] };
    if (res.status !== 200 || !body.results?.length) throw new Error(`POST /v0/face/ answered ${res.status}: ${JSON.stringify(body).slice(0, 200)}`);
    seed.faceId = body.results[0].id;
    seed.photoHash = body.results[0].photo_hash;
    if (body.sightings?.length) {
      seed.eventId = body.sightings[0].id;
      seed.personId = body.sightings[0].person_id;
    }
  } catch (err) {
    notes.push(`seeding failed (${(err as Error).message}); routes needing existing ids get id 1`);
  }
  return seed;
}

/** Categories by weight; within a category its cases in a seeded order, each before any repeats. */
class Schedule {
  private readonly byCategory = new Map<string, Case[]>();
  private readonly cursor = new Map<string, number>();
  private readonly runs = new Map<Case, number>();
  private readonly weights: [string, number][];

  constructor(
    cases: Case[],
    private readonly rng: Rng,
    private readonly heavyCap: number,
    private heavyBudget = Infinity,
  ) {
    for (const c of cases) {
      const list = this.byCategory.get(c.category) ?? [];
      list.push(c);
      this.byCategory.set(c.category, list);
    }
    // Categories of heavy cases keep their order (see buildCases); the others are shuffled.
    for (const list of [...this.byCategory.values()].filter((l) => !l.every((c) => c.heavy))) {
      for (let i = list.length - 1; i > 0; i--) {
        const j = rng.int(i + 1);
        [list[i], list[j]] = [list[j], list[i]];
      }
    }
    this.weights = [...this.byCategory.keys()].map((k) => [k, CATEGORY_WEIGHTS[k] ?? 1]);
  }

  categories(): string[] {
    return [...this.byCategory.keys()];
  }

  private usable(c: Case): boolean {
    return !c.heavy || (this.heavyBudget > 0 && (this.runs.get(c) ?? 0) < this.heavyCap);
  }

  next(): Case | undefined {
    const live = this.weights.filter(([k]) => this.byCategory.get(k)!.some((c) => this.usable(c)));
    if (live.length === 0) return undefined;
    let r = this.rng.next() * live.reduce((s, [, w]) => s + w, 0);
    let category = live[0][0];
    for (const [k, w] of live) {
      if ((r -= w) <= 0) {
        category = k;
        break;
      }
    }
    const list = this.byCategory.get(category)!;
    for (let tries = 0; tries < list.length; tries++) {
      const at = this.cursor.get(category) ?? 0;
      this.cursor.set(category, (at + 1) % list.length);
      const c = list[at];
      if (this.usable(c)) {
        this.runs.set(c, (this.runs.get(c) ?? 0) + 1);
        if (c.heavy) this.heavyBudget--;
        return c;
      }
    }
    return undefined;
  }
}

export async function runFuzz(opts: FuzzOptions): Promise<FuzzReport> {
  const notes: string[] = [];
  const log = (s: string) => {
    if (!opts.quiet) process.stderr.write(`${s}\n`);
  };
  let service: BenchService | undefined;
  try {
    if (!opts.url) {
      log('fuzz: starting the service (embedded PostgreSQL, node dist/src/main.js)...');
      service = await startBenchService(opts.token, { FACE_FETCH_TIMEOUT_MS: '2000', ...opts.env });
    }
    const base = opts.url ?? service!.base;
    const url = new URL(base);
    const pid = service?.child.pid ?? opts.pid;
    const child: ChildProcess | undefined = service?.child;

    const ops = await readOperations(base);
    const seed = await seedData(base, opts.token, notes);
    const ctx: FuzzContext = { host: url.hostname, port: Number(url.port || 80), token: opts.token, ops, seed, blankPng: uniformPng(96, 96), demoJpeg: demoJpeg(2) };
    let cases = buildCases(ctx);
    if (opts.categories) {
      const unknown = opts.categories.filter((c) => !cases.some((x) => x.category === c));
      if (unknown.length) throw new Error(`unknown categories: ${unknown.join(', ')}`);
      cases = cases.filter((c) => opts.categories!.includes(c.category));
    }
    const rng = new Rng(opts.seed);
    const schedule = new Schedule(cases, rng, opts.heavyCap, opts.heavyBudget);
    log(`fuzz: ${ops.length} operations from the OpenAPI documents, ${cases.length} cases in ${schedule.categories().length} categories`);

    const reports = new Map<string, CategoryReport>();
    const timing = new Map<string, { case: string; runs: number; totalS: number; maxS: number }>();
    const groups = new Map<string, ProblemGroup>();
    const record = (category: string, name: string, problems: Problem[], requests: number, statuses: number[]) => {
      let r = reports.get(category);
      if (!r) reports.set(category, (r = { category, requests: 0, statuses: {}, unexpected: 0, byKind: {} }));
      r.requests += requests;
      for (const s of statuses) r.statuses[s] = (r.statuses[s] ?? 0) + 1;
      r.unexpected += problems.filter((p) => isUnexpected(p.kind)).length;
      for (const p of problems) {
        r.byKind[p.kind] = (r.byKind[p.kind] ?? 0) + 1;
        const key = `${category}\u0000${name}\u0000${p.kind}`;
        const g = groups.get(key);
        if (g) g.count++;
        else groups.set(key, { category, case: name, kind: p.kind, count: 1, detail: p.detail });
      }
    };

    let died = false;
    const onExit = (code: number | null, signal: string | null) => {
      died = true;
      record('service', 'service process', [{ kind: 'crash', detail: `the service exited (code ${code}, signal ${signal}) during the run` }], 0, []);
    };
    child?.once('exit', onExit);

    const rss = { startKiB: rssKiB(pid), warmKiB: undefined as number | undefined, endKiB: undefined as number | undefined, peakKiB: rssKiB(pid) };
    const sampler = setInterval(() => {
      const now = rssKiB(pid);
      if (now !== undefined) rss.peakKiB = Math.max(rss.peakKiB ?? 0, now);
    }, 500);
    const started = performance.now();
    const deadline = started + opts.seconds * 1000;
    let sent = 0;
    let lastLog = started;
    const worker = async () => {
      while (!died && sent < opts.requests && performance.now() < deadline) {
        const c = schedule.next();
        if (!c) return;
        sent++;
        if (rss.warmKiB === undefined && sent >= opts.requests / 10) rss.warmKiB = rssKiB(pid);
        let result;
        const t0 = performance.now();
        try {
          result = await c.run(ctx);
        } catch (err) {
          result = { requests: 1, statuses: [], problems: [{ kind: 'connection' as const, detail: `${c.name}: the tool failed: ${(err as Error).message}` }] };
        }
        const spent = (performance.now() - t0) / 1000;
        const t = timing.get(c.name) ?? { case: c.name, runs: 0, totalS: 0, maxS: 0 };
        t.runs++;
        t.totalS += spent;
        t.maxS = Math.max(t.maxS, spent);
        timing.set(c.name, t);
        sent += result.requests - 1;
        record(c.category, c.name, result.problems, result.requests, result.statuses);
        if (performance.now() - lastLog > 5000) {
          lastLog = performance.now();
          const bad = [...reports.values()].reduce((s, r) => s + r.unexpected, 0);
          log(`fuzz: ${sent} requests, ${bad} unexpected, ${((lastLog - started) / 1000).toFixed(0)} s`);
        }
      }
    };
    await Promise.all(Array.from({ length: opts.concurrency }, worker));
    const seconds = (performance.now() - started) / 1000;
    clearInterval(sampler);
    rss.endKiB = rssKiB(pid);
    child?.off('exit', onExit);

    if (!died) {
      // Whatever the service did with the last requests, it must still answer.
      const alive = await fetch(`${base}/health`, { signal: AbortSignal.timeout(10_000) }).then((r) => r.status, () => 0);
      if (alive !== 200) record('service', 'service process', [{ kind: 'crash', detail: `GET /health after the run answered ${alive || 'nothing'}` }], 1, alive ? [alive] : []);
    }
    const categories = [...reports.values()].sort((a, b) => a.category.localeCompare(b.category));
    const problems = [...groups.values()].sort((a, b) => a.category.localeCompare(b.category) || b.count - a.count);
    const { token: _t, env: _e, ...shown } = opts;
    return {
      target: `${base}${opts.url ? '' : ' (started by the tool)'}`,
      options: shown,
      seconds,
      requests: categories.reduce((s, r) => s + r.requests, 0),
      unexpected: categories.reduce((s, r) => s + r.unexpected, 0),
      rss,
      categories,
      problems,
      slowestCases: [...timing.values()].sort((a, b) => b.totalS - a.totalS).slice(0, 15),
      notes,
    };
  } finally {
    await service?.stop();
  }
}

const statusText = (s: Record<string, number>) =>
  Object.entries(s)
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([k, n]) => `${k}:${n}`)
    .join(' ');

export function printFuzzReport(r: FuzzReport, show = 80): void {
  console.log(`fuzz ${r.target}: ${r.requests} requests in ${r.seconds.toFixed(1)} s, seed ${r.options.seed}, concurrency ${r.options.concurrency}`);
  const growth = r.rss.warmKiB && r.rss.endKiB ? ` (end/warm ${((100 * r.rss.endKiB) / r.rss.warmKiB).toFixed(1)}%)` : '';
  console.log(`service RSS: start ${mib(r.rss.startKiB)}, after warm-up ${mib(r.rss.warmKiB)}, end ${mib(r.rss.endKiB)}${growth}, peak ${mib(r.rss.peakKiB)}`);
  for (const n of r.notes) console.log(`note: ${n}`);
  const kinds = PROBLEM_KINDS.filter((k) => k !== 'loss' && r.categories.some((c) => c.byKind[k]));
  console.table(
    r.categories.map((c) => ({
      category: c.category,
      requests: c.requests,
      statuses: statusText(c.statuses),
      unexpected: c.unexpected,
      ...Object.fromEntries(kinds.map((k) => [k, c.byKind[k] ?? 0])),
    })),
  );
  console.log(`most time spent in: ${r.slowestCases.slice(0, 5).map((t) => `${t.case} (${t.runs} × ${(t.totalS / t.runs).toFixed(1)} s)`).join('; ')}`);
  const limits = r.problems.filter((p) => !isUnexpected(p.kind));
  if (limits.length) {
    console.log(`documented parser limits (uWebSockets.js answers before our code runs; docs/api.md, "HTTP front end"), ${limits.length} cases:`);
    for (const p of limits) console.log(`  [${p.category}] ${p.count} × | ${p.case} | ${p.detail}`);
  }
  const problems = r.problems.filter((p) => isUnexpected(p.kind));
  if (problems.length === 0) {
    console.log('no unexpected outcomes');
    return;
  }
  console.log(`unexpected outcomes (${r.unexpected} in ${problems.length} groups; count × kind | case | first example):`);
  for (const p of problems.slice(0, show)) console.log(`  [${p.category}] ${p.count} × ${p.kind} | ${p.case} | ${p.detail}`);
  if (problems.length > show) console.log(`  … ${problems.length - show} more groups (see --json)`);
}
