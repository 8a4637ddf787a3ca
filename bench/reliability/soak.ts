/**
 * `npm run soak`: a long mixed load at a fixed rate (or 80% of measured capacity), with the
 * service's RSS and p50/p99 per interval; exit 1 on an unexpected outcome. The run itself is
 * `runSoak` (test/harness/reliability/soak.ts); this file reads the options, prints the report and
 * writes the JSON and the two SVG charts (to .bench-out/ unless named).
 *
 *   npm run soak -- [--minutes N | --seconds S] [--rate R | --rate auto] [--interval S]
 *                   [--probe-seconds S] [--json out.json] [--svg out.svg]
 *                   [--url http://host:port --token T [--pid P]]
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot } from '../../src/config/index.js';
import { parseOptions, runAsScript } from '../lib/args.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { intervalSvg, printSoakReport, runSoak, type SoakOptions } from '../../test/harness/reliability/soak.js';
import { latencySvg } from '../lib/svg.js';

const USAGE =
  'usage: npm run soak -- [--minutes N | --seconds S] [--rate R | --rate auto] [--interval S] [--probe-seconds S] ' +
  '[--json out.json] [--svg out.svg] [--url http://host:port --token T [--pid P]]';

function parseCli(argv: string[]): SoakOptions & { json?: string; svg?: string } {
  const opts = parseOptions(argv, ['minutes', 'seconds', 'rate', 'interval', 'probe-seconds', 'probe-concurrency', 'json', 'svg', 'url', 'token', 'pid'], USAGE);
  const num = (k: string, fallback: number) => {
    const n = opts[k] === undefined ? fallback : Number(opts[k]);
    if (!(Number.isFinite(n) && n > 0)) throw new Error(`--${k} must be a positive number`);
    return n;
  };
  if (opts.minutes !== undefined && opts.seconds !== undefined) throw new Error('give --minutes or --seconds, not both');
  if (opts.url && !opts.token && !process.env.FACE_TOKEN) throw new Error('--url needs --token (or FACE_TOKEN)');
  return {
    seconds: opts.seconds !== undefined ? num('seconds', 60) : num('minutes', 10) * 60,
    rate: (opts.rate ?? 'auto') === 'auto' ? 'auto' : num('rate', 1),
    intervalS: num('interval', 10),
    probeSeconds: num('probe-seconds', 15),
    probeConcurrency: Math.round(num('probe-concurrency', 4)),
    url: opts.url?.replace(/\/+$/, ''),
    token: opts.token ?? process.env.FACE_TOKEN ?? 'soak-token',
    pid: opts.pid !== undefined ? num('pid', 1) : undefined,
    json: opts.json,
    svg: opts.svg,
  };
}

async function main(cli: ReturnType<typeof parseCli>): Promise<number> {
  const machine = describeMachine();
  const report = await runSoak(cli);
  console.log(machineLine(machine));
  printSoakReport(report);
  const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
  const outDir = path.join(findProjectRoot(), '.bench-out');
  const json = cli.json ?? path.join(outDir, `soak-${stamp}.json`);
  const svg = cli.svg ?? path.join(outDir, `soak-${stamp}.svg`);
  mkdirSync(path.dirname(json), { recursive: true });
  mkdirSync(path.dirname(svg), { recursive: true });
  const { samples, ...rest } = report;
  writeFileSync(json, JSON.stringify({ machine, ...rest }, null, 1));
  const title = `soak: ${report.rate} req/s mixed, ${(report.seconds / 60).toFixed(1)} min`;
  writeFileSync(svg, latencySvg([{ ...report.result, samples }], title, `${machine.cpu}, ${machine.cores} cores, node ${machine.node}, ${machine.date}`));
  const svgIntervals = svg.replace(/\.svg$/, '') + '-intervals.svg';
  writeFileSync(svgIntervals, intervalSvg(report, `${title}: p50/p99 and service RSS per ${cli.intervalS} s`));
  console.log(`json: ${json}\nsvg: ${svg}\nsvg: ${svgIntervals}`);
  return report.unexpectedTotal > 0 ? 1 : 0;
}

runAsScript(import.meta.url, () => parseCli(process.argv.slice(2)), main);
