/**
 * Load test of the HTTP service with real photos:
 *
 *   npm run bench -- <scenario> [--url http://host:port] [--token T]
 *                    [--concurrency N | --rate R] [--seconds S | --requests N]
 *                    [--max-inflight N] [--json out.json] [--svg out.svg] [--cpu-prof DIR]
 *
 * Scenarios: detect (POST /v1/detect/), verify (POST /v0/verify/), add
 * (POST /v0/face/), identify (POST /v0/identify/ after adding every face of
 * the demo photos), mixed (60% GET /v0/face/id/<id>/, 20% add, 20% identify,
 * or detect where the service has no identify).
 *
 * Without --url the service is started here (embedded PostgreSQL in a
 * temporary directory, `node dist/src/main.js` as a child) and stopped after,
 * so a run never touches ./data. --concurrency runs a closed loop (default 4
 * clients); --rate an open loop at R requests/s. Runs stop at --requests or
 * --seconds, whichever comes first (default 10 s; at most 300 s when only a
 * count is given). --cpu-prof DIR has the started service write a V8 CPU
 * profile into DIR when it stops (read it with `node dist/bench/flame.js`).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot } from '../src/config.js';
import { LATE_MS, byKind, progressBar, runLoad, runRate, type LoadResult } from './http-load.js';
import { describeMachine, machineLine, type Machine } from './machine.js';
import { cpuProfArgs, startBenchService, type BenchService } from './service.js';
import { latencySvg } from './svg.js';

const SCENARIOS = ['detect', 'verify', 'add', 'identify', 'mixed'] as const;
type Scenario = (typeof SCENARIOS)[number];

export interface Cli {
  scenario: Scenario;
  url?: string;
  token: string;
  concurrency: number;
  rate?: number;
  maxInflight: number;
  seconds: number;
  requests: number;
  json?: string;
  svg?: string;
  cpuProf?: string;
}

const USAGE =
  'usage: npm run bench -- <detect|verify|add|identify|mixed> [--url http://host:port] [--token T] ' +
  '[--concurrency N | --rate R] [--seconds S | --requests N] [--max-inflight N] [--json out.json] [--svg out.svg]';

function parseCli(argv: string[]): Cli {
  const opts: Record<string, string> = {};
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-h' || a === '--help') {
      console.log(USAGE);
      process.exit(0);
    }
    if (a.startsWith('--')) {
      const [k, inline] = a.slice(2).split('=', 2);
      const v = inline ?? argv[++i];
      if (v === undefined) throw new Error(`--${k} needs a value\n${USAGE}`);
      opts[k] = v;
    } else positional.push(a);
  }
  const known = new Set(['url', 'token', 'concurrency', 'rate', 'seconds', 'requests', 'max-inflight', 'json', 'svg', 'cpu-prof']);
  for (const k of Object.keys(opts)) if (!known.has(k)) throw new Error(`unknown option --${k}\n${USAGE}`);
  const scenario = positional[0] as Scenario;
  if (!SCENARIOS.includes(scenario)) throw new Error(`unknown or missing scenario ${positional[0] ?? ''}\n${USAGE}`);
  const num = (k: string, fallback: number) => {
    if (opts[k] === undefined) return fallback;
    const v = Number(opts[k]);
    if (!(v > 0)) throw new Error(`--${k} must be a positive number`);
    return v;
  };
  if (opts.concurrency !== undefined && opts.rate !== undefined) throw new Error('give --concurrency or --rate, not both');
  const requests = num('requests', Infinity);
  const seconds = num('seconds', Number.isFinite(requests) ? 300 : 10);
  const token = opts.token ?? process.env.FACE_TOKEN ?? 'bench-token';
  if (opts.url && !opts.token && !process.env.FACE_TOKEN) throw new Error('--url needs --token (or FACE_TOKEN)');
  if (opts.url && opts['cpu-prof']) throw new Error('--cpu-prof profiles the service this tool starts; it does not go with --url');
  return {
    scenario,
    url: opts.url?.replace(/\/+$/, ''),
    token,
    concurrency: Math.round(num('concurrency', 4)),
    rate: opts.rate !== undefined ? num('rate', 1) : undefined,
    maxInflight: Math.round(num('max-inflight', 256)),
    seconds,
    requests,
    json: opts.json,
    svg: opts.svg,
    cpuProf: opts['cpu-prof'],
  };
}

/** The six demo group photos of @vladmandic/face-api (22 faces). */
export function demoPhotos(): Buffer[] {
  const dir = path.join(findProjectRoot(), 'node_modules/@vladmandic/face-api/demo');
  return [1, 2, 3, 4, 5, 6].map((i) => readFileSync(path.join(dir, `sample${i}.jpg`)));
}

const REQUEST_TIMEOUT_MS = 60_000;

export class Client {
  private readonly blobs: Blob[];
  constructor(
    readonly base: string,
    private readonly token: string,
    photos: Buffer[],
  ) {
    this.blobs = photos.map((p) => new Blob([new Uint8Array(p)], { type: 'image/jpeg' }));
  }

  get auth() {
    return { Authorization: `Token ${this.token}` };
  }

  form(fields: Record<string, string | number>): FormData {
    const fd = new FormData();
    for (const [k, v] of Object.entries(fields)) {
      if (typeof v === 'number') fd.append(k, this.blobs[v % this.blobs.length], `${k}.jpg`);
      else fd.append(k, v);
    }
    return fd;
  }

  /** Sends and drains the answer, so that latency covers the whole body. */
  async status(method: string, p: string, body?: FormData): Promise<number> {
    const res = await fetch(`${this.base}${p}`, { method, headers: this.auth, body, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    await res.arrayBuffer();
    return res.status;
  }

  async json<T>(method: string, p: string, body?: FormData): Promise<{ status: number; body: T }> {
    const res = await fetch(`${this.base}${p}`, { method, headers: this.auth, body, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
    return { status: res.status, body: parsed as T };
  }

  /** Adds every face of every demo photo; the new face ids. */
  async seed(tag: string): Promise<number[]> {
    const ids: number[] = [];
    for (let i = 0; i < this.blobs.length; i++) {
      const r = await this.json<{ results?: { id: number }[] }>('POST', '/v0/face/', this.form({ photo: i, meta: `${tag}-${i + 1}`, mf_selector: 'all' }));
      if (r.status !== 200) throw new Error(`seeding: POST /v0/face/ answered ${r.status}: ${JSON.stringify(r.body).slice(0, 300)}`);
      ids.push(...(r.body.results ?? []).map((f) => f.id));
    }
    return ids;
  }

  async hasIdentify(): Promise<boolean> {
    const r = await this.json<{ error?: { code?: string } }>('POST', '/v0/identify/', this.form({ photo: 0 }));
    return r.status !== 404;
  }
}

interface Plan {
  name: string;
  send: (i: number) => Promise<number>;
  /** For mixed runs: the kind of request `i`, reported separately too. */
  kindOf?: (i: number) => string;
  note?: string;
}

async function plan(scenario: Scenario, c: Client): Promise<Plan | string> {
  switch (scenario) {
    case 'detect':
      return { name: 'POST /v1/detect/', send: (i) => c.status('POST', '/v1/detect/', c.form({ photo: i })) };
    case 'verify':
      return { name: 'POST /v0/verify/', send: (i) => c.status('POST', '/v0/verify/', c.form({ photo1: i, photo2: i + 1 })) };
    case 'add':
      return { name: 'POST /v0/face/', send: (i) => c.status('POST', '/v0/face/', c.form({ photo: i, meta: `bench-${i}` })) };
    case 'identify': {
      if (!(await c.hasIdentify())) return 'the service answers 404 for POST /v0/identify/: it has no identify endpoint; nothing measured';
      const ids = await c.seed('bench-identify');
      return {
        name: 'POST /v0/identify/',
        note: `collection seeded with ${ids.length} faces from the demo photos`,
        send: (i) => c.status('POST', '/v0/identify/', c.form({ photo: i, n: '5' })),
      };
    }
    case 'mixed': {
      const identify = await c.hasIdentify();
      const ids = await c.seed('bench-mixed');
      // Request i's kind by i % 10: 0-5 read a face, 6-7 add one, 8-9 search.
      const kinds: { name: string; send: (i: number) => Promise<number> }[] = [
        { name: 'GET /v0/face/id/<id>/', send: (i) => c.status('GET', `/v0/face/id/${ids[i % ids.length]}/`) },
        { name: 'POST /v0/face/', send: (i) => c.status('POST', '/v0/face/', c.form({ photo: i, meta: `bench-mixed-${i}` })) },
        identify
          ? { name: 'POST /v0/identify/', send: (i) => c.status('POST', '/v0/identify/', c.form({ photo: i })) }
          : { name: 'POST /v1/detect/', send: (i) => c.status('POST', '/v1/detect/', c.form({ photo: i })) },
      ];
      const kindAt = (i: number) => kinds[i % 10 < 6 ? 0 : i % 10 < 8 ? 1 : 2];
      return {
        name: `mixed 60% GET face, 20% add, 20% ${identify ? 'identify' : 'detect'}`,
        note: `${ids.length} faces seeded${identify ? '' : '; no identify endpoint (404), detect stands in'}`,
        kindOf: (i) => kindAt(i).name,
        send: (i) => kindAt(i).send(i),
      };
    }

  }
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
      load: r.targetRate !== undefined ? `${r.targetRate} req/s open` : `${r.concurrency} clients`,
      requests: r.requests,
      'req/s': Number(r.perSecond.toFixed(1)),
      errors: r.errors,
      'errors by status': statusSummary(r) || '-',
      ...(r.lateStarts !== undefined ? { [`late >${LATE_MS}ms`]: r.lateStarts } : {}),
      'p50 ms': Number(r.p50.toFixed(1)),
      'p90 ms': Number(r.p90.toFixed(1)),
      'p99 ms': Number(r.p99.toFixed(1)),
      'max ms': Number(r.max.toFixed(1)),
    })),
  );
}

async function main() {
  let cli: Cli;
  try {
    cli = parseCli(process.argv.slice(2));
  } catch (err) {
    console.error((err as Error).message);
    process.exit(2);
  }
  const machine = describeMachine();
  let service: BenchService | undefined;
  const stopOnSignal = () => {
    void service?.stop().finally(() => process.exit(130));
  };
  process.once('SIGINT', stopOnSignal);
  process.once('SIGTERM', stopOnSignal);
  try {
    if (!cli.url) {
      process.stderr.write('starting the service (embedded PostgreSQL, node dist/src/main.js)...\n');
      if (cli.cpuProf) mkdirSync(cli.cpuProf, { recursive: true });
      service = await startBenchService(cli.token, {}, cpuProfArgs(cli.cpuProf, `service-${cli.scenario}`));
    }
    const base = cli.url ?? service!.base;
    const client = new Client(base, cli.token, demoPhotos());
    const p = await plan(cli.scenario, client);
    if (typeof p === 'string') {
      console.log(machineLine(machine));
      console.log(`${cli.scenario}: skipped: ${p}`);
      return;
    }
    if (p.note) process.stderr.write(`${p.note}\n`);
    const bar = progressBar(cli.scenario);
    const common = { name: p.name, requests: cli.requests, seconds: cli.seconds, send: p.send, kindOf: p.kindOf, progress: bar?.update };
    const result =
      cli.rate !== undefined
        ? await runRate({ ...common, rate: cli.rate, maxInflight: cli.maxInflight })
        : await runLoad({ ...common, concurrency: cli.concurrency });
    bar?.done();
    const parts = byKind(result);
    printReport(machine, [result, ...parts]);
    if (p.note) console.log(p.note);
    const target = `${base}${cli.url ? '' : ' (started by the benchmark)'}`;
    if (cli.json) {
      const kinds = parts.map(({ samples: _, ...rest }) => rest);
      writeFileSync(cli.json, JSON.stringify({ machine, target, scenario: cli.scenario, options: { ...cli, token: undefined, requests: Number.isFinite(cli.requests) ? cli.requests : undefined }, result, ...(kinds.length ? { byKind: kinds } : {}) }, null, 1));
      console.log(`json: ${cli.json}`);
    }
    if (cli.svg) {
      const load = cli.rate !== undefined ? `open loop ${cli.rate} req/s` : `${cli.concurrency} clients`;
      writeFileSync(cli.svg, latencySvg([result], `${p.name}, ${load}`, `${machine.cpu}, ${machine.cores} cores, node ${machine.node}, ${machine.date}`));
      console.log(`svg: ${cli.svg}`);
    }
  } finally {
    await service?.stop();
    if (service && cli.cpuProf) console.log(`cpu profile: ${path.join(cli.cpuProf, `service-${cli.scenario}.cpuprofile`)}`);
  }
}

// Run only as the entry point: peers.ts reuses the client and report code.
if (process.argv[1] && path.resolve(process.argv[1]) === new URL(import.meta.url).pathname) {
  main().catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
