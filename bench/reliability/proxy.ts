/**
 * What the shipped front proxy (container/haproxy.cfg) changes for clients:
 *
 *   npm run bench:proxy -- [--rounds N] [--concurrency C] [--seed S] [--ab-requests N]
 *                          [--writers W] [--after-kill-s S] [--json out.json]
 *
 * One PostgreSQL (embedded, in a temporary directory), one shard server and two API nodes, with
 * Debian's haproxy ($HAPROXY or /usr/sbin/haproxy) in front (test/harness/reliability/proxy-cluster.ts). Three runs:
 *
 * - headers: the fuzz's header category (test/harness/reliability/fuzz/cases.ts: framing tricks over raw sockets,
 *   HTTP/1.0, split request lines, malformed and oversized header blocks), every case --rounds
 *   times in a seeded order, against API node 1 directly and through the proxy. Each exchange is
 *   counted by who answered and how: JSON or a 2xx (the service's own answer, or the proxy's JSON
 *   error), an HTML answer of the uWS parser inside the node (505, 400, 431), an HTML answer of
 *   haproxy's own request parser (which haproxy 2.6 cannot render from the error files), a
 *   connection closed without an answer after the parser's idle timeout or at once, fewer answers
 *   than requests, or more (smuggling).
 * - HTTP/1.0: ApacheBench (`ab`, which speaks only HTTP/1.0; Debian's apache2-utils) GETs
 *   /v0/galleries/ --ab-requests times, directly and through the proxy; without ab, raw sockets.
 * - failover: --writers clients add faces through the proxy, each write with a meta of its own;
 *   after 8 acknowledged writes API node 1 is SIGKILLed and they go on for --after-kill-s seconds.
 *   Then every stored face is listed: acknowledged faces missing (must be 0), metas stored twice
 *   (a write applied twice; must be 0), the errors clients saw and the time until every client
 *   succeeded again.
 *
 * Exits 1 when a failover loses or duplicates a write.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { startEmbedded } from '../../src/db/embedded.js';
import { readOperations } from '../../test/harness/reliability/fuzz/api.js';
import { buildCases, type Case, type FuzzContext, type Sent } from '../../test/harness/reliability/fuzz/cases.js';
import { uniformPng } from '../../test/harness/reliability/images.js';
import { Rng } from '../../test/harness/reliability/outcome.js';
import { buildRequest, rawExchange } from '../../test/harness/http/raw-http.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import {
  demoPhoto,
  findHaproxy,
  listFaces,
  runFailover,
  startApiCluster,
  startHaproxy,
  summariseFailover,
  type FailoverSummary,
  type ProxyServerState,
} from '../../test/harness/reliability/proxy-cluster.js';
import { parseOptions, runAsScript } from '../lib/args.js';

export interface ProxyBenchOptions {
  rounds: number;
  concurrency: number;
  seed: number;
  abRequests: number;
  writers: number;
  afterKillS: number;
  json?: string;
}

/** How one exchange ended, by who answered. */
export type Outcome = 'json' | 'uws-html' | 'proxy-html' | 'other-non-json' | 'idle-close' | 'closed' | 'partial';

const OUTCOMES: Outcome[] = ['json', 'uws-html', 'proxy-html', 'other-non-json', 'idle-close', 'closed', 'partial'];

/**
 * uWS closes idle connections after 10 s, checked on a 4 s tick, so between about 8 and 12 s: an
 * exchange that ends without an answer later than this waited it out (a parser closing at once
 * takes milliseconds).
 */
const IDLE_MS = 5000;

export interface HeaderRun {
  target: string;
  exchanges: number;
  outcomes: Record<Outcome, number>;
  /** Answers by status and source (`505 uws-html`, `400 proxy-html`, `200 json`, ...). */
  answers: Record<string, number>;
  smuggling: number;
  /** Per case: how its exchanges ended over the rounds (the answers' statuses and sources, or how the connection ended). */
  cases: Record<string, Record<string, number>>;
}

/** The fuzz wraps problems of cases marked as parser limits as `<limit>: <kind>: <detail>`; this unwraps them. */
function unwrap(p: { kind: string; detail: string }): { kind: string; detail: string } {
  if (p.kind !== 'parser-limit') return p;
  const m = /^[^:]*: ([a-z0-9-]+): ([\s\S]*)$/.exec(p.detail);
  return m ? { kind: m[1], detail: m[2] } : p;
}

/** Classifies one case run from the answers' statuses and the fuzz's own judgement of them. */
export function classify(sent: Sent): { outcome: Outcome; answers: string[]; smuggling: boolean } {
  const problems = sent.problems.map(unwrap);
  const nonJson = problems.filter((p) => p.kind === 'error-body');
  const source = (detail: string): Outcome => (/uWebSockets/.test(detail) ? 'uws-html' : /<html><body><h1>/.test(detail) ? 'proxy-html' : 'other-non-json');
  const nonJsonByStatus = new Map<number, Outcome>();
  for (const p of nonJson) {
    const m = /(\d{3}) (?:with Content-Type|body is not)/.exec(p.detail);
    if (m) nonJsonByStatus.set(Number(m[1]), source(p.detail));
  }
  const answers = sent.statuses.map((s) => `${s} ${nonJsonByStatus.get(s) ?? 'json'}`);
  const smuggling = problems.some((p) => p.kind === 'smuggling');
  let outcome: Outcome;
  if (sent.statuses.length === 0) {
    const gone = problems.find((p) => p.kind === 'connection' || p.kind === 'slow');
    const after = gone ? /after (\d+(?:\.\d+)?) s/.exec(gone.detail) : null;
    const slow = gone?.kind === 'slow' || (after !== null && Number(after[1]) * 1000 >= IDLE_MS);
    outcome = slow ? 'idle-close' : 'closed';
  } else if (nonJson.length > 0) outcome = source(nonJson[0].detail);
  else if (problems.some((p) => p.kind === 'connection' && / of \d+ answers/.test(p.detail))) outcome = 'partial';
  else outcome = 'json';
  return { outcome, answers, smuggling };
}

async function runHeaders(target: string, ctx: FuzzContext, cases: Case[], rounds: number, concurrency: number, seed: number): Promise<HeaderRun> {
  const rng = new Rng(seed);
  const queue: Case[] = [];
  for (let r = 0; r < rounds; r++) {
    const order = [...cases];
    for (let i = order.length - 1; i > 0; i--) {
      const j = rng.int(i + 1);
      [order[i], order[j]] = [order[j], order[i]];
    }
    queue.push(...order);
  }
  const run: HeaderRun = { target, exchanges: 0, outcomes: Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>, answers: {}, smuggling: 0, cases: {} };
  let next = 0;
  const worker = async () => {
    while (next < queue.length) {
      const c = queue[next++];
      let sent: Sent;
      try {
        sent = await c.run(ctx);
      } catch (err) {
        sent = { requests: 1, statuses: [], problems: [{ kind: 'connection', detail: `the tool failed: ${(err as Error).message}` }] };
      }
      const { outcome, answers, smuggling } = classify(sent);
      run.exchanges++;
      run.outcomes[outcome]++;
      for (const a of answers) run.answers[a] = (run.answers[a] ?? 0) + 1;
      if (smuggling) run.smuggling++;
      const per = (run.cases[c.name] ??= {});
      const ending = answers.length ? answers.join(' + ') + (outcome === 'partial' ? ' (then closed)' : '') : outcome;
      per[ending] = (per[ending] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return run;
}

export interface AbRun {
  target: string;
  tool: 'ab' | 'raw socket';
  requests: number;
  /** Answers with a 2xx status. */
  ok: number;
  /** Non-2xx answers, and what the first of them was. */
  non2xx: number;
  failed: number;
  example?: string;
  requestsPerSecond?: number;
}

async function abRun(target: string, base: string, token: string, n: number): Promise<AbRun> {
  const { stdout } = await promisify(execFile)('ab', ['-q', '-n', String(n), '-c', '4', '-H', `Authorization: Token ${token}`, `${base}/v0/galleries/`], { maxBuffer: 1 << 20 }).catch(
    (err: { stdout?: string }) => ({ stdout: err.stdout ?? '' }),
  );
  const num = (re: RegExp) => Number(re.exec(stdout)?.[1] ?? 0);
  const complete = num(/Complete requests:\s+(\d+)/);
  const non2xx = num(/Non-2xx responses:\s+(\d+)/);
  // One plain request shows what the non-2xx answers were.
  const probe = non2xx > 0 ? await rawHttp10(base, token) : undefined;
  return {
    target,
    tool: 'ab',
    requests: n,
    ok: complete - non2xx,
    non2xx,
    failed: num(/Failed requests:\s+(\d+)/),
    example: probe?.example,
    requestsPerSecond: num(/Requests per second:\s+([\d.]+)/),
  };
}

async function rawHttp10(base: string, token: string): Promise<{ status: number; example: string }> {
  const url = new URL(base);
  const r = await rawExchange(url.hostname, Number(url.port), { parts: [buildRequest('GET', '/v0/galleries/', [['Authorization', `Token ${token}`]], undefined, 'HTTP/1.0')], timeoutMs: 15_000 });
  const a = r.responses[0];
  return a ? { status: a.status, example: `${a.status} ${a.headers['content-type'] ?? '(no type)'}: ${a.body.toString('latin1').slice(0, 60)}` } : { status: 0, example: r.error ?? 'no answer' };
}

async function rawRun(target: string, base: string, token: string, n: number): Promise<AbRun> {
  const run: AbRun = { target, tool: 'raw socket', requests: n, ok: 0, non2xx: 0, failed: 0 };
  for (let i = 0; i < n; i++) {
    const r = await rawHttp10(base, token);
    if (r.status === 0) run.failed++;
    else if (r.status < 300) run.ok++;
    else {
      run.non2xx++;
      run.example ??= r.example;
    }
  }
  return run;
}

async function haveAb(): Promise<boolean> {
  return promisify(execFile)('ab', ['-V']).then(
    () => true,
    () => false,
  );
}

export interface ProxyBenchReport {
  machine: ReturnType<typeof describeMachine>;
  options: ProxyBenchOptions;
  headers: HeaderRun[];
  http10: AbRun[];
  failover: FailoverSummary & { writers: number; afterKillS: number };
  /** The proxy's view of the nodes after the runs: connections opened vs requests over pooled ones. */
  servers: ProxyServerState[];
}

export async function runProxyBench(opts: ProxyBenchOptions, log: (s: string) => void = (s) => process.stderr.write(`${s}\n`)): Promise<ProxyBenchReport> {
  const haproxy = findHaproxy();
  if (!haproxy.bin) throw new Error(`no haproxy at ${haproxy.looked} (apt-get install haproxy, or set HAPROXY)`);
  const token = 'proxy-bench-token';
  const dir = mkdtempSync(path.join(os.tmpdir(), 'face-proxy-bench-'));
  // The embedded PostgreSQL runs as another user when this runs as root; it must reach inside.
  chmodSync(dir, 0o755);
  const machine = describeMachine({ haproxy: haproxy.bin });
  log('proxy: starting PostgreSQL, a shard server and two API nodes...');
  const pg = await startEmbedded({ dataDir: path.join(dir, 'pg') });
  try {
    const cluster = await startApiCluster({ databaseUrl: pg.url, token, dir });
    try {
      const proxy = await startHaproxy(haproxy.bin, cluster.nodes.map((n) => n.address));
      try {
        const node = cluster.nodes[0];
        // A face for the cases that PUT to an existing one.
        const fd = new FormData();
        fd.append('photo', new Blob([new Uint8Array(demoPhoto(1))], { type: 'image/jpeg' }), 'seed.jpg');
        fd.append('meta', 'proxy-seed');
        const seeded = (await (await fetch(`${proxy.base}/v0/face/`, { method: 'POST', headers: { Authorization: `Token ${token}` }, body: fd })).json()) as { results?: { id: number }[] };
        const faceId = seeded.results?.[0]?.id ?? 1;
        const ops = await readOperations(node.base);
        const ctxOf = (port: number): FuzzContext => ({
          host: '127.0.0.1',
          port,
          token,
          ops,
          seed: { faceId, personId: 1, eventId: 1, photoHash: '0'.repeat(64), gallery: 'default' },
          blankPng: uniformPng(96, 96),
          demoJpeg: demoPhoto(2),
        });
        const cases = buildCases(ctxOf(node.port)).filter((c) => c.category === 'headers');
        const headers: HeaderRun[] = [];
        for (const [target, port] of [
          ['direct (API node 1)', node.port],
          ['through haproxy', proxy.port],
        ] as const) {
          log(`proxy: header cases (${cases.length} × ${opts.rounds}) ${target}...`);
          headers.push(await runHeaders(target, ctxOf(port), cases, opts.rounds, opts.concurrency, opts.seed));
        }

        const ab = await haveAb();
        log(`proxy: HTTP/1.0 with ${ab ? 'ab' : 'a raw socket (no ab: apt-get install apache2-utils)'}...`);
        const http10: AbRun[] = [];
        for (const [target, base] of [
          ['direct (API node 1)', node.base],
          ['through haproxy', proxy.base],
        ] as const) {
          http10.push(ab ? await abRun(target, base, token, opts.abRequests) : await rawRun(target, base, token, Math.min(opts.abRequests, 200)));
        }
        const servers = await proxy.servers();

        log(`proxy: failover, ${opts.writers} writers, API node 1 SIGKILLed after 8 acknowledged writes...`);
        const run = await runFailover({
          base: proxy.base,
          token,
          writers: opts.writers,
          killAfterAcks: 8,
          afterKillMs: opts.afterKillS * 1000,
          tag: 'failover',
          kill: async () => {
            node.child.kill('SIGKILL');
            await node.exited;
          },
        });
        const failover = { ...summariseFailover(run, await listFaces(proxy.base, token)), writers: opts.writers, afterKillS: opts.afterKillS };
        return { machine, options: opts, headers, http10, failover, servers };
      } finally {
        await proxy.stop();
      }
    } finally {
      await cluster.stop();
    }
  } finally {
    await pg.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const OUTCOME_LABEL: Record<Outcome, string> = {
  json: 'JSON (or 2xx) answer',
  'uws-html': 'HTML from the uWS parser',
  'proxy-html': "HTML from haproxy's parser",
  'other-non-json': 'other non-JSON answer',
  'idle-close': 'no answer, closed after the idle timeout',
  closed: 'no answer, closed at once',
  partial: 'fewer answers than requests',
};

/** The report as Markdown tables: direct against proxy. */
export function proxyMarkdown(r: ProxyBenchReport): string {
  const [d, p] = r.headers;
  const lines: string[] = [];
  lines.push(`Header category of the fuzz (${d.exchanges / r.options.rounds} cases × ${r.options.rounds} rounds, seed ${r.options.seed}, concurrency ${r.options.concurrency}):`, '');
  lines.push('| outcome of an exchange | direct (API node 1) | through haproxy |', '|---|---:|---:|');
  for (const o of OUTCOMES) if (d.outcomes[o] || p.outcomes[o]) lines.push(`| ${OUTCOME_LABEL[o]} | ${d.outcomes[o]} | ${p.outcomes[o]} |`);
  lines.push(`| more answers than requests (smuggling) | ${d.smuggling} | ${p.smuggling} |`);
  lines.push(`| exchanges | ${d.exchanges} | ${p.exchanges} |`, '');
  const keys = [...new Set([...Object.keys(d.answers), ...Object.keys(p.answers)])].sort();
  lines.push('| answers by status and source | direct | through haproxy |', '|---|---:|---:|');
  for (const k of keys) lines.push(`| ${k} | ${d.answers[k] ?? 0} | ${p.answers[k] ?? 0} |`);
  lines.push('', 'Per case (outcomes over the rounds):', '', '| case | direct | through haproxy |', '|---|---|---|');
  const show = (x: Record<string, number> | undefined) =>
    Object.entries(x ?? {})
      .map(([k, n]) => (n === r.options.rounds ? k : `${k} ×${n}`))
      .join(', ');
  for (const name of Object.keys(d.cases).sort()) lines.push(`| ${name.replace(/\|/g, '\\|')} | ${show(d.cases[name])} | ${show(p.cases[name])} |`);
  lines.push('', `HTTP/1.0 (GET /v0/galleries/, ${r.http10[0].tool}):`, '', '| target | requests | 2xx | non-2xx | failed | requests/s | non-2xx example |', '|---|---:|---:|---:|---:|---:|---|');
  for (const a of r.http10) lines.push(`| ${a.target} | ${a.requests} | ${a.ok} | ${a.non2xx} | ${a.failed} | ${a.requestsPerSecond?.toFixed(0) ?? '-'} | ${(a.example ?? '').replace(/\|/g, '\\|').replace(/\s+/g, ' ')} |`);
  const f = r.failover;
  lines.push('', `Failover through haproxy (${f.writers} writers adding faces, API node 1 SIGKILLed after 8 acknowledged writes, ${f.afterKillS} s more):`, '', '| measure | value |', '|---|---:|');
  lines.push(
    `| writes / acknowledged (faces) | ${f.writes} / ${f.acknowledged} (${f.acknowledgedFaces}) |`,
    `| acknowledged faces missing afterwards | ${f.missing} |`,
    `| writes stored twice | ${f.duplicated} |`,
    `| failed writes: proxy's JSON 502 / connection closed without answer / other | ${f.failures.badGateway} / ${f.failures.closed} / ${f.failures.other} |`,
    `| last failure after the kill | ${f.lastErrorMs.toFixed(0)} ms |`,
    `| every client succeeding again after the kill | ${f.allSucceedingMs.toFixed(0)} ms |`,
    `| writes acknowledged after the kill | ${f.acknowledgedAfterKill} |`,
  );
  lines.push('', 'Proxy to nodes, before the failover run (haproxy stats):', '', '| node | connections opened | requests over a pooled connection | 2xx | 4xx | 5xx |', '|---|---:|---:|---:|---:|---:|');
  for (const s of r.servers) lines.push(`| ${s.name} | ${s.connect} | ${s.reuse} | ${s.hrsp['2xx']} | ${s.hrsp['4xx']} | ${s.hrsp['5xx']} |`);
  return lines.join('\n');
}

const USAGE = 'usage: npm run bench:proxy -- [--rounds N] [--concurrency C] [--seed S] [--ab-requests N] [--writers W] [--after-kill-s S] [--json out.json]';

function parseCli(argv: string[]): ProxyBenchOptions {
  const o = parseOptions(argv, ['rounds', 'concurrency', 'seed', 'ab-requests', 'writers', 'after-kill-s', 'json'], USAGE);
  const num = (k: string, fallback: number, min = 1) => {
    const n = o[k] === undefined ? fallback : Number(o[k]);
    if (!Number.isFinite(n) || n < min) throw new Error(`--${k} must be a number of at least ${min}`);
    return n;
  };
  return {
    rounds: num('rounds', 3),
    concurrency: num('concurrency', 4),
    seed: num('seed', 97, 0),
    abRequests: num('ab-requests', 1000),
    writers: num('writers', 4),
    afterKillS: num('after-kill-s', 8),
    json: o.json,
  };
}

async function main(opts: ProxyBenchOptions): Promise<number> {
  const report = await runProxyBench(opts);
  console.log(machineLine(report.machine));
  console.log(proxyMarkdown(report));
  if (opts.json) writeFileSync(opts.json, JSON.stringify(report, null, 1));
  return report.failover.missing > 0 || report.failover.duplicated > 0 ? 1 : 0;
}

runAsScript(import.meta.url, () => parseCli(process.argv.slice(2)), main);
