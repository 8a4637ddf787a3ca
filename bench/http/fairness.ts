/**
 * Fair shares between tenants, measured:
 *
 *   npm run bench:fairness -- [--seconds S] [--flood N] [--steady N] [--photos P] [--json out.json]
 *
 * The service is started here (embedded PostgreSQL, `node dist/src/main.js`
 * as a child). Two tenants, each with its own faces (every face of the demo
 * photos): tenant B identifies with --steady connections (default 2), alone
 * and then while tenant A floods identify with --flood connections (default
 * 32), both closed loops of S seconds (default 20). It runs twice: with A's
 * tenant limited to --photos photo requests in flight (default half of the
 * engine's slots, FACE_MAX_ENGINE_INFLIGHT), and with no limit, where only
 * the shared photo slots and the engine's turns share it. Reported: B's p50 and p99 against B
 * alone (the goal is a p99 at most 2x), A's answers by status (its 429s),
 * and every answer accounted for (no connection error, no 5xx). The
 * generator's CPU is printed with each run, and the service's: on one
 * machine they share the cores, so what A's refused requests cost the
 * service and the generator is visible beside B's latencies.
 *
 * Then, with the service idle, whether A can tell B's faces from faces that do
 * not exist by time: A's token reads B's face ids and ids no face has,
 * alternately (--probes of each, default 2000); both must answer 404, and the
 * difference of the mean times is given with Welch's t (|t| < 2: not told
 * apart at about 95%).
 */
import os from 'node:os';
import { parseOptions, saveJson } from '../lib/args.js';
import { CLI_ACTOR } from '../../src/db/audit.js';
import { TenantStore } from '../../src/db/tenants.js';
import { TokenStore } from '../../src/db/tokens.js';
import { Client, demoPhotos } from '../../test/harness/http/client.js';
import { generatorLine, runLoad, statusSummary, type LoadResult } from '../../test/harness/http/http-load.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { processCpuSeconds } from '../../test/harness/proc-cpu.js';
import { startBenchService } from '../../test/harness/load-service.js';

const USAGE = 'usage: npm run bench:fairness -- [--seconds S] [--flood N] [--steady N] [--photos P] [--probes N] [--json out.json]';

interface Timing {
  statuses: string[];
  b: { median: number; mean: number };
  none: { median: number; mean: number };
  welchT: number;
}

const median = (v: number[]) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)];
const mean = (v: number[]) => v.reduce((s, x) => s + x, 0) / v.length;
const variance = (v: number[]) => {
  const m = mean(v);
  return v.reduce((s, x) => s + (x - m) ** 2, 0) / (v.length - 1);
};

/** A's reads of B's face ids and of ids no face has, alternately, one at a time: statuses and times (ms). */
async function timingProbe(base: string, a: Client, bIds: number[], probes: number): Promise<Timing> {
  const none = Math.max(...bIds) + 1_000_000;
  const times: Record<'b' | 'none', number[]> = { b: [], none: [] };
  const statuses = new Set<string>();
  for (let i = 0; i < probes; i++) {
    const pair: ['b' | 'none', number][] = [
      ['b', bIds[i % bIds.length]],
      ['none', none + i],
    ];
    // Alternate which goes first, so neither always follows the other.
    if (i % 2) pair.reverse();
    for (const [kind, id] of pair) {
      const t0 = performance.now();
      const r = await fetch(`${base}/v0/face/id/${id}/`, { headers: a.auth });
      await r.text();
      times[kind].push(performance.now() - t0);
      statuses.add(`${kind === 'b' ? "B's" : 'none'}: ${r.status}`);
    }
  }
  const welchT = (mean(times.b) - mean(times.none)) / Math.sqrt(variance(times.b) / times.b.length + variance(times.none) / times.none.length);
  return {
    statuses: [...statuses].sort(),
    b: { median: median(times.b), mean: mean(times.b) },
    none: { median: median(times.none), mean: mean(times.none) },
    welchT,
  };
}

interface Row {
  limit: string;
  /** The service's CPU in cores, B alone and with A flooding. */
  serviceCores: [number, number];
  bAlone: LoadResult;
  bShared: LoadResult;
  aFlood: LoadResult;
}

async function main(): Promise<void> {
  const opts = parseOptions(process.argv.slice(2), ['seconds', 'flood', 'steady', 'photos', 'probes', 'json'], USAGE);
  const probes = Number(opts.probes ?? 2000);
  const seconds = Number(opts.seconds ?? 20);
  const flood = Number(opts.flood ?? 32);
  const steady = Number(opts.steady ?? 2);
  const engineSlots = Math.max(8, os.availableParallelism() * 4);
  const photos = Number(opts.photos ?? Math.floor(engineSlots / 2));
  const machine = describeMachine();
  console.log(machineLine(machine));
  console.log(`B: ${steady} connections; A: ${flood}; ${seconds} s each; engine slots ${engineSlots}; A's photo limit ${photos} or none\n`);

  const rows: Row[] = [];
  let timing: Timing | undefined;
  for (const limit of [photos, undefined]) {
    const svc = await startBenchService('fairness-operator');
    try {
      const tenants = new TenantStore(svc.db.sql);
      const tokens = new TokenStore(svc.db.sql);
      await tenants.create(CLI_ACTOR, 'flood', limit !== undefined ? { photos_in_flight: limit } : {});
      await tenants.create(CLI_ACTOR, 'steady');
      const a = new Client(svc.base, (await tokens.create(CLI_ACTOR, 'deployment', 'flood-app', {}, 'flood')).token, demoPhotos());
      const b = new Client(svc.base, (await tokens.create(CLI_ACTOR, 'deployment', 'steady-app', {}, 'steady')).token, demoPhotos());
      await a.seed('a');
      const bIds = await b.seed('b');
      const identify = (c: Client) => (i: number) => c.upload('POST', '/v0/identify/', { photo: i, n: '5' });
      // Both accept a 429 as an answer: it is the fair share doing its work, counted by status.
      const ok = (s: number) => s === 200 || s === 429;
      // B's requests are built one by one, for their latencies; A's flood is a fixed set of
      // requests built once, so the generator spends the least it can on the flood.
      const measured = (name: string) => runLoad({ name, base: svc.base, headers: b.auth, request: identify(b), connections: steady, seconds, ok });
      const floodOnce = () => runLoad({ name: 'A flooding', base: svc.base, headers: a.auth, fixed: demoPhotos().map((_, i) => identify(a)(i)), connections: flood, seconds, ok });
      // Warm the engine's batches and caches before the first timed run.
      await measured('warm-up').catch(() => undefined);
      const cpu0 = processCpuSeconds(svc.child.pid!);
      const bAlone = await measured('B alone');
      const cpu1 = processCpuSeconds(svc.child.pid!);
      const [bShared, aFlood] = await Promise.all([measured('B with A flooding'), floodOnce()]);
      const cpu2 = processCpuSeconds(svc.child.pid!);
      const serviceCores = (from?: number, to?: number) => (from !== undefined && to !== undefined ? (to - from) / seconds : NaN);
      rows.push({ limit: limit !== undefined ? `${limit} photos in flight` : 'none', bAlone, bShared, aFlood, serviceCores: [serviceCores(cpu0, cpu1), serviceCores(cpu1, cpu2)] });
      timing ??= await timingProbe(svc.base, a, bIds, probes);
    } finally {
      await svc.stop();
    }
  }

  console.log("| A's limit | B alone p50 / p99 ms | B with A flooding p50 / p99 ms | B p99 ratio | B answers | A answers | A's 429 share |");
  console.log('|---|---|---|---|---|---|---|');
  for (const r of rows) {
    const a429 = (r.aFlood.statuses?.['429'] ?? 0) / Math.max(1, r.aFlood.requests);
    console.log(
      `| ${r.limit} | ${r.bAlone.p50.toFixed(0)} / ${r.bAlone.p99.toFixed(0)} | ${r.bShared.p50.toFixed(0)} / ${r.bShared.p99.toFixed(0)} | ` +
        `${(r.bShared.p99 / r.bAlone.p99).toFixed(2)}x | ${statusSummary(r.bShared)} | ${statusSummary(r.aFlood)} | ${(a429 * 100).toFixed(1)}% |`,
    );
  }
  for (const r of rows) {
    for (const run of [r.bAlone, r.bShared, r.aFlood]) {
      const lost = Object.entries(run.statuses ?? {}).filter(([s]) => s === '0' || s.startsWith('5'));
      const service = run === r.aFlood ? '' : `; service CPU: ${r.serviceCores[run === r.bAlone ? 0 : 1].toFixed(2)} cores`;
      console.log(`${r.limit}, ${run.name}: ${run.requests} answers, ${run.perSecond.toFixed(1)}/s; ${generatorLine(run.generator)}${service}${lost.length ? `; LOST OR FAILED: ${JSON.stringify(lost)}` : ''}`);
    }
  }
  if (timing) {
    console.log(`\nA's token reading B's face ids and ids no face has, ${probes} of each, alternately (ms):`);
    console.log('| ids | answers | median | mean |');
    console.log('|---|---|---|---|');
    console.log(`| B's | ${timing.statuses.filter((x) => x.startsWith("B's")).join(', ')} | ${timing.b.median.toFixed(3)} | ${timing.b.mean.toFixed(3)} |`);
    console.log(`| none | ${timing.statuses.filter((x) => x.startsWith('none')).join(', ')} | ${timing.none.median.toFixed(3)} | ${timing.none.mean.toFixed(3)} |`);
    console.log(`Welch's t of the means: ${timing.welchT.toFixed(2)} (|t| < 2: not told apart at about 95%)`);
  }
  saveJson(opts.json, { machine, seconds, flood, steady, engineSlots, timing, rows: rows.map(({ bAlone, bShared, aFlood, limit }) => ({ limit, bAlone: { ...bAlone, samples: undefined }, bShared: { ...bShared, samples: undefined }, aFlood: { ...aFlood, samples: undefined } })) });
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
