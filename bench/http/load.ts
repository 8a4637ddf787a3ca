/**
 * Load test of the HTTP service with real photos:
 *
 *   npm run bench -- <scenario> [--url http://host:port --token T [--pid P]]
 *                    [--concurrency N | --rate R [--max-inflight N]] [--seconds S | --requests N]
 *                    [--workers N] [--wrk] [--json out.json] [--svg out.svg] [--cpu-prof DIR]
 *
 * Scenarios: read (GET /v0/face/id/<id>/ of the 22 faces added first),
 * detect (POST /v1/detect/), verify (POST /v0/verify/), add (POST
 * /v0/face/), identify (POST /v0/identify/ after adding every face of the
 * demo photos), mixed (60% GET /v0/face/id/<id>/, 20% add, 20% identify, or
 * detect where the service has no identify).
 *
 * The load is autocannon's (test/harness/http/http-load.ts). Without --url the service
 * is started here (embedded PostgreSQL in a temporary directory, `node
 * dist/src/main.js` as a child) and stopped after, so a run never touches
 * ./data. --concurrency runs a closed loop (default 32 connections for read,
 * 4 for the rest); --rate an open loop at R requests/s over at most
 * --max-inflight connections (256). Runs stop at --requests or --seconds,
 * whichever comes first (default 10 s; at most 300 s when only a count is
 * given). --workers N spreads the read load over N autocannon threads. Every
 * run prints the generator's CPU and the server's and PostgreSQL's (from
 * /proc; with --url, the server's only given --pid). --wrk (read only) runs
 * `wrk -t1` with the same connections, duration and paths right after, as a
 * check that the generator is not the limit. --cpu-prof DIR has the started
 * service write a V8 CPU profile into DIR when it stops (read it with `node
 * dist/bench/http/flame.js`).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseOptions } from '../lib/args.js';
import { Client, demoPhotos, readPaths } from '../../test/harness/http/client.js';
import { byKind, generatorLine, printReport, progressBar, runLoad, type HttpRequest } from '../../test/harness/http/http-load.js';
import { haveWrk, runWrk, type WrkResult } from '../../test/harness/http/wrk.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { cpuDelta, cpuSnapshot, type Groups } from '../../test/harness/proc-cpu.js';
import { cpuProfArgs, startBenchService, type BenchService } from '../../test/harness/load-service.js';
import { latencySvg } from '../lib/svg.js';

const SCENARIOS = ['read', 'detect', 'verify', 'add', 'identify', 'mixed'] as const;
type Scenario = (typeof SCENARIOS)[number];

export interface Cli {
  scenario: Scenario;
  url?: string;
  token: string;
  pid?: number;
  concurrency: number;
  rate?: number;
  maxInflight: number;
  seconds: number;
  requests: number;
  workers?: number;
  wrk: boolean;
  json?: string;
  svg?: string;
  cpuProf?: string;
}

const USAGE =
  'usage: npm run bench -- <read|detect|verify|add|identify|mixed> [--url http://host:port --token T [--pid P]] ' +
  '[--concurrency N | --rate R [--max-inflight N]] [--seconds S | --requests N] [--workers N] [--wrk] [--json out.json] [--svg out.svg] [--cpu-prof DIR]';

const OPTIONS = ['url', 'token', 'pid', 'concurrency', 'rate', 'seconds', 'requests', 'max-inflight', 'workers', 'json', 'svg', 'cpu-prof'];

function parseCli(argv: string[]): Cli {
  // The scenario comes first; the options after it.
  const named = argv[0] !== undefined && !argv[0].startsWith('-');
  const opts = parseOptions(named ? argv.slice(1) : argv, OPTIONS, USAGE, ['wrk']);
  const scenario = (named ? argv[0] : '') as Scenario;
  if (!SCENARIOS.includes(scenario)) throw new Error(`unknown or missing scenario ${scenario}\n${USAGE}`);
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
  if (opts.rate !== undefined && !(Number(opts.rate) >= 1)) throw new Error('--rate is whole requests per second, at least 1 (autocannon\'s open loop)');
  if (opts.workers !== undefined && scenario !== 'read') throw new Error('--workers goes with read only: the other scenarios build each request in this thread');
  if (opts.wrk && scenario !== 'read') throw new Error('--wrk goes with read only');
  return {
    scenario,
    url: opts.url?.replace(/\/+$/, ''),
    token,
    pid: opts.pid !== undefined ? Math.round(num('pid', 1)) : undefined,
    concurrency: Math.round(num('concurrency', scenario === 'read' ? 32 : 4)),
    rate: opts.rate !== undefined ? Math.round(num('rate', 1)) : undefined,
    maxInflight: Math.round(num('max-inflight', 256)),
    seconds,
    requests,
    workers: opts.workers !== undefined ? Math.round(num('workers', 1)) : undefined,
    wrk: opts.wrk === 'true',
    json: opts.json,
    svg: opts.svg,
    cpuProf: opts['cpu-prof'],
  };
}

interface Plan {
  name: string;
  /** Built once and cycled over (the read), or built per request number. */
  fixed?: HttpRequest[];
  request?: (i: number) => HttpRequest;
  note?: string;
}

async function plan(scenario: Scenario, c: Client): Promise<Plan | string> {
  switch (scenario) {
    case 'read': {
      const ids = await c.seed('bench-read');
      return { name: 'GET /v0/face/id/<id>/', note: `${ids.length} faces added first, read in turn`, fixed: readPaths(ids).map((p) => ({ path: p })) };
    }
    case 'detect':
      return { name: 'POST /v1/detect/', request: (i) => c.upload('POST', '/v1/detect/', { photo: i }) };
    case 'verify':
      return { name: 'POST /v0/verify/', request: (i) => c.upload('POST', '/v0/verify/', { photo1: i, photo2: i + 1 }) };
    case 'add':
      return { name: 'POST /v0/face/', request: (i) => c.upload('POST', '/v0/face/', { photo: i, meta: `bench-${i}` }) };
    case 'identify': {
      if (!(await c.hasIdentify())) return 'the service answers 404 for POST /v0/identify/: it has no identify endpoint; nothing measured';
      const ids = await c.seed('bench-identify');
      return {
        name: 'POST /v0/identify/',
        note: `collection seeded with ${ids.length} faces from the demo photos`,
        request: (i) => c.upload('POST', '/v0/identify/', { photo: i, n: '5' }),
      };
    }
    case 'mixed': {
      const identify = await c.hasIdentify();
      const ids = await c.seed('bench-mixed');
      const read = 'GET /v0/face/id/<id>/';
      // Request i's kind by i % 10: 0-5 read a face, 6-7 add one, 8-9 search.
      const request = (i: number): HttpRequest => {
        const k = i % 10;
        if (k < 6) return { path: `/v0/face/id/${ids[i % ids.length]}/`, kind: read };
        if (k < 8) return c.upload('POST', '/v0/face/', { photo: i, meta: `bench-mixed-${i}` }, 'POST /v0/face/');
        return identify ? c.upload('POST', '/v0/identify/', { photo: i }, 'POST /v0/identify/') : c.upload('POST', '/v1/detect/', { photo: i }, 'POST /v1/detect/');
      };
      return {
        name: `mixed 60% GET face, 20% add, 20% ${identify ? 'identify' : 'detect'}`,
        note: `${ids.length} faces seeded${identify ? '' : '; no identify endpoint (404), detect stands in'}`,
        request,
      };
    }
  }
}

/** Server-side CPU of a run from two /proc snapshots: cores over the run and µs per answer. */
export interface ServerCpu {
  seconds: number;
  groups: Groups;
}

export function serverCpuLines(cpu: ServerCpu, requests: number, server = 'service'): string[] {
  const g = cpu.groups;
  const cores = (k: string) => (g[k] ?? 0) / cpu.seconds;
  const us = (k: string) => Math.round(((g[k] ?? 0) * 1e6) / Math.max(1, requests));
  const lines = [
    `${server} CPU: ${cores(server).toFixed(2)} cores (${us(server)} µs per request); PostgreSQL ${cores('PostgreSQL').toFixed(2)} cores (${us('PostgreSQL')} µs)`,
    `machine: ${cores('machine busy').toFixed(2)} cores busy, ${cores('machine idle').toFixed(2)} idle; other processes ${cores('other processes').toFixed(2)} cores`,
  ];
  return lines;
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
  if (cli.wrk && !haveWrk()) {
    console.error('--wrk: wrk is not installed (apt-get install wrk)');
    process.exit(2);
  }
  try {
    if (!cli.url) {
      process.stderr.write('starting the service (embedded PostgreSQL, node dist/src/main.js)...\n');
      if (cli.cpuProf) mkdirSync(cli.cpuProf, { recursive: true });
      service = await startBenchService(cli.token, {}, cpuProfArgs(cli.cpuProf, `service-${cli.scenario}`));
    }
    const base = cli.url ?? service!.base;
    const serverPid = service?.child.pid ?? cli.pid;
    const client = new Client(base, cli.token, demoPhotos());
    const p = await plan(cli.scenario, client);
    if (typeof p === 'string') {
      console.log(machineLine(machine));
      console.log(`${cli.scenario}: skipped: ${p}`);
      return;
    }
    if (p.note) process.stderr.write(`${p.note}\n`);
    const common = { base, headers: client.auth, fixed: p.fixed, request: p.request, workers: cli.workers };
    if (cli.scenario === 'read') {
      // Untimed: the first requests open the pool's connections and JIT both sides.
      await runLoad({ ...common, name: 'warm-up', connections: cli.concurrency, seconds: 2 });
    }
    const named: Record<number, string> = { [process.pid]: 'load generator' };
    if (serverPid) named[serverPid] = 'service';
    const bar = progressBar(cli.scenario);
    const before = cpuSnapshot(named);
    const t0 = performance.now();
    const result = await runLoad({
      ...common,
      name: p.name,
      requests: cli.requests,
      seconds: cli.seconds,
      progress: bar?.update,
      ...(cli.rate !== undefined ? { rate: cli.rate, connections: cli.maxInflight } : { connections: cli.concurrency }),
    });
    const after = cpuSnapshot(named);
    const cpu: ServerCpu | undefined = before && after ? { seconds: (performance.now() - t0) / 1000, groups: cpuDelta(before, after) } : undefined;
    bar?.done();
    let wrk: WrkResult | undefined;
    if (cli.wrk && p.fixed) {
      process.stderr.write(`wrk -t1 -c${cli.concurrency} -d${cli.seconds}s on the same paths...\n`);
      wrk = await runWrk({ base, paths: p.fixed.map((r) => r.path), headers: client.auth, threads: 1, connections: cli.concurrency, seconds: Math.round(cli.seconds) });
    }
    const parts = byKind(result);
    printReport(machine, [result, ...parts]);
    if (p.note) console.log(p.note);
    console.log(generatorLine(result.generator));
    if (cpu && serverPid) for (const l of serverCpuLines(cpu, result.requests)) console.log(l);
    console.log('generator and server share this machine\'s cores (loopback)');
    if (wrk) {
      console.log(`${wrk.command}: ${wrk.perSecond.toFixed(0)} req/s, p50 ${wrk.p50.toFixed(2)} ms, p90 ${wrk.p90.toFixed(2)} ms, p99 ${wrk.p99.toFixed(2)} ms, ${wrk.errors} errors, wrk CPU ${wrk.cores?.toFixed(2) ?? '?'} cores`);
      console.log(`autocannon / wrk: ${(result.perSecond / wrk.perSecond).toFixed(2)}x req/s`);
    }
    const target = `${base}${cli.url ? '' : ' (started by the benchmark)'}`;
    if (cli.json) {
      const kinds = parts.map(({ samples: _, ...rest }) => rest);
      const { samples: _s, ...summary } = result;
      writeFileSync(
        cli.json,
        JSON.stringify(
          {
            machine,
            target,
            scenario: cli.scenario,
            generator: 'autocannon',
            options: { ...cli, token: undefined, requests: Number.isFinite(cli.requests) ? cli.requests : undefined },
            result: summary,
            ...(kinds.length ? { byKind: kinds } : {}),
            ...(cpu ? { cpu } : {}),
            ...(wrk ? { wrk } : {}),
          },
          null,
          1,
        ),
      );
      console.log(`json: ${cli.json}`);
    }
    if (cli.svg) {
      const load = cli.rate !== undefined ? `open loop ${cli.rate} req/s` : `${cli.concurrency} connections`;
      writeFileSync(cli.svg, latencySvg([result], `${p.name}, ${load}`, `${machine.cpu}, ${machine.cores} cores, node ${machine.node}, ${machine.date}`));
      console.log(`svg: ${cli.svg}`);
    }
  } finally {
    await service?.stop();
    if (service && cli.cpuProf) console.log(`cpu profile: ${path.join(cli.cpuProf, `service-${cli.scenario}.cpuprofile`)}`);
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === new URL(import.meta.url).pathname) {
  main().catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
