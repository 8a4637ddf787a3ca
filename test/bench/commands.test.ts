/**
 * Every benchmark command of bench/README.md, run as a user runs it (`npm run
 * <script> -- <args>`) in its smallest form, from the built tree: it must
 * finish with status 0 and print the line that says it completed. Sizes and
 * durations are the smallest the commands take, so the figures mean nothing;
 * what is tested is that each command still runs.
 *
 * Left out, each run elsewhere: `gpu:pack` (it downloads ONNX Runtime's GPU
 * build, hundreds of MiB, and has no small form; bench/gpu/rehearse.sh runs
 * its sequence), `bench:failover` (Debian's Patroni and etcd; `npm run
 * test:failover` runs one round).
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findProjectRoot } from '../../src/config/index.js';
import { haveLfw, haveSharedFaces } from '../harness/images.js';
import { buildDist } from '../harness/process.js';
import { findHaproxy } from '../harness/reliability/proxy-cluster.js';
import { rtspMissing } from '../harness/rtsp.js';

const root = findProjectRoot();
const run = promisify(execFile);
const venv = existsSync(path.join(root, 'bench/.venv/bin/python'));
const haproxy = findHaproxy().bin !== undefined;
const cameraTools = (await rtspMissing()) === undefined && spawnSync('ffmpeg', ['-version']).status === 0;

/** Prerequisites a fresh clone may lack; CI provides each (.ci/run), so there a missing one fails. */
const NEEDS = {
  lfw: { have: haveLfw, why: '../shared/testdata/lfw' },
  faces: { have: haveSharedFaces, why: '../shared/testdata/faces' },
  venv: { have: venv, why: 'bench/.venv (sh bench/search/ann-setup.sh && bench/.venv/bin/pip install -r bench/peers/requirements.txt)' },
  haproxy: { have: haproxy, why: "Debian's haproxy" },
  cameras: { have: cameraTools, why: "Debian's ffmpeg, python3-gi and gir1.2-gst-rtsp-server-1.0" },
} as const;

interface BenchCommand {
  /** The npm script, or a file under dist/bench for the commands without one. */
  script: string;
  args: (out: string) => string[];
  /** A line the command prints once it has run to the end. */
  done: RegExp;
  needs?: (keyof typeof NEEDS)[];
  /** Made first, in the same folder (a dump, a profile). */
  before?: (out: string) => Promise<unknown>;
  timeoutS?: number;
}

const cargo = (...args: string[]) => run('cargo', args, { cwd: root, maxBuffer: 64 << 20, timeout: 600_000 });

const COMMANDS: BenchCommand[] = [
  { script: 'bench', args: () => ['read', '--seconds', '2', '--concurrency', '2'], done: /generator and server share/ },
  {
    script: 'flame.js',
    before: (out) => npm('bench', ['read', '--seconds', '2', '--concurrency', '2', '--cpu-prof', out]),
    // The load tool names each profile after the service and the scenario.
    args: (out) => [path.join(out, 'service-read.cpuprofile'), '--top', '5'],
    done: /s sampled, busy/,
  },
  { script: 'bench:peers', args: () => ['http', '--rounds', '1', '--seconds', '1', '--concurrency', '4'], done: /vs ours/ },
  { script: 'bench:peers', args: () => ['engines', '--rounds', '1'], done: /vs ours/ },
  { script: 'bench:peers', args: () => ['search', '--n', '1000', '--queries', '50', '--kinds', 'f32', '--ef', '64'], done: /vs ours/, needs: ['venv'], timeoutS: 600 },
  {
    script: 'bench:ann',
    args: (out) => ['--n', '1000', '--dim', '128', '--queries', '100', '--kinds', 'scan', '--rerank', '40', '--ef', '16,64', '--methods', 'faiss-flat,numpy,faiss-hnsw', '--batch', '16', '--scan-queries', '50', '--out', path.join(out, 'ann'), '--dump', path.join(out, 'dump')],
    done: /written: /,
    needs: ['venv'],
    timeoutS: 600,
  },
  {
    script: 'bench:index',
    before: (out) => cargo('run', '--release', '-p', 'face-index', '--example', 'bench', '--', '--n', '2000', '--dim', '128', '--queries', '100', '--kinds', 'f16', '--dump', path.join(out, 'dump'), '--dump-only'),
    args: (out) => ['--dump', path.join(out, 'dump'), '--seconds', '1', '--concurrency', '2'],
    done: /faces per call/,
    timeoutS: 600,
  },
  { script: 'face-vectors.js', args: (out) => ['--lfw-limit', '40', '--out', path.join(out, 'vectors')], done: /wrote .*\.f32 and \.json/, needs: ['lfw', 'faces'] },
  { script: 'bench:engine', args: () => ['--pipelines', 'new', '--base', 'new', '--time', '500'], done: /detect \+ embed, 4 in flight/ },
  { script: 'bench:accuracy', args: (out) => ['--lfw-only', '--lfw-limit', '100', '--modes', 'sface', '--no-mirror', '--no-old', '--json', path.join(out, 'a.json')], done: /summary/, needs: ['lfw'] },
  { script: 'bench:open-set', args: (out) => ['--mode', 'sface', '--lfw-limit', '300', '--strangers', '50', '--sizes', '100', '--json', path.join(out, 'o.json')], done: /larger N/, needs: ['lfw'] },
  { script: 'bench:subject', args: (out) => ['--lfw-limit', '60', '--margins', '0.1', '--clients', '2', '--json', path.join(out, 's.json')], done: /10-fold|accuracy/, needs: ['lfw'] },
  { script: 'bench:boxes', args: (out) => ['--lfw-limit', '4', '--frames', '2', '--json', path.join(out, 'boxes.json')], done: /identify p50\/p99/, needs: ['lfw'] },
  { script: 'bench:attributes', args: (out) => ['--models', 'cydral-age+cydral-gender', '--rounds', '1', '--json', path.join(out, 'attr.json')], done: /written /, needs: ['faces'] },
  { script: 'bench:gpu', args: (out) => ['--modes', 'sface', '--batches', '1', '--sets', 'demo', '--time', '300', '--no-start', '--no-precision', '--json', path.join(out, 'g.json')], done: /done in /, timeoutS: 600 },
  { script: 'bench:cluster', args: () => ['--faces', '1000', '--layouts', '1', '--seconds', '1', '--shard-seconds', '1', '--concurrency', '2'], done: /capacity/i, timeoutS: 600 },
  { script: 'bench:persons', args: (out) => ['--people', '30', '--thresholds', 'medium', '--rate-photos', '8', '--clients', '2', '--sizes', '1000', '--json', path.join(out, 'p.json')], done: /strangers' index at 1000 representatives/, needs: ['lfw'], timeoutS: 600 },
  {
    script: 'bench:cameras',
    args: (out) => ['--passages', '2', '--cameras', '1', '--faces', '1', '--window', '2', '--minutes', '0.3', '--flap-s', '6', '--json', path.join(out, 'cam.json')],
    done: /cameras bench done/,
    needs: ['lfw', 'cameras'],
    timeoutS: 300,
  },
  { script: 'bench:tenants', args: () => ['--faces', '2000', '--tenants', '10', '--queries', '20', '--seconds', '0.2'], done: /\| listing, a page of 100 / },
  { script: 'bench:fairness', args: (out) => ['--seconds', '1', '--flood', '4', '--probes', '20', '--json', path.join(out, 'fair.json')], done: /Welch's t/ },
  { script: 'bench:change-log', args: () => ['--faces', '100', '--writes', '10'], done: /\| path \|/ },
  { script: 'bench:store', args: () => ['--faces', '1000', '--seconds', '1'], done: /listing \d+ faces/ },
  { script: 'bench:history', args: () => ['--events', '10000', '--cameras', '5', '--persons', '100', '--seconds', '1'], done: /## Plans/ },
  { script: 'fuzz', args: (out) => ['--requests', '300', '--seconds', '30', '--heavy-cap', '1', '--heavy-budget', '4', '--json', path.join(out, 'f.json')], done: /no unexpected outcomes/ },
  { script: 'chaos', args: (out) => ['--cycles', '1', '--kill-after', '2-3', '--kill-postgres', 'never', '--concurrency', '2', '--json', path.join(out, 'c.json')], done: /no loss/ },
  { script: 'soak', args: (out) => ['--seconds', '10', '--rate', '5', '--interval', '2', '--json', path.join(out, 's.json'), '--svg', path.join(out, 's.svg')], done: /no unexpected outcomes/ },
  { script: 'bench:hostile', args: () => ['--requests', '20', '--seconds', '3', '--hostile', '2'], done: /service memory/ },
  { script: 'bench:proxy', args: (out) => ['--rounds', '1', '--ab-requests', '10', '--writers', '1', '--after-kill-s', '2', '--json', path.join(out, 'p.json')], done: /acknowledged faces missing afterwards \| 0 \|/, needs: ['haproxy'], timeoutS: 600 },
];

/** Commands without an npm script, by their file under dist/bench. */
const FILES: Record<string, string> = { 'flame.js': 'dist/bench/http/flame.js', 'face-vectors.js': 'dist/bench/search/face-vectors.js' };

async function npm(script: string, args: string[], timeoutS = 300): Promise<string> {
  const [cmd, argv] = FILES[script] ? [process.execPath, [path.join(root, FILES[script]), ...args]] : ['npm', ['run', '--silent', script, '--', ...args]];
  try {
    const { stdout, stderr } = await run(cmd, argv, { cwd: root, maxBuffer: 64 << 20, timeout: timeoutS * 1000, env: { ...process.env, LOG_LEVEL: 'warn' } });
    return `${stdout}\n${stderr}`;
  } catch (err) {
    const e = err as { code?: number; signal?: string; stdout?: string; stderr?: string };
    throw new Error(`${script} ${args.join(' ')}: exit ${e.code ?? e.signal}\n${(e.stdout ?? '').slice(-3000)}\n${(e.stderr ?? '').slice(-3000)}`);
  }
}

let scratch: string;
beforeAll(async () => {
  await buildDist();
  scratch = mkdtempSync(path.join(os.tmpdir(), 'bench-commands-'));
}, 300_000);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('every bench command runs in its smallest form', () => {
  for (const [k, c] of COMMANDS.entries()) {
    const missing = (c.needs ?? []).filter((n) => !NEEDS[n].have).map((n) => NEEDS[n].why);
    const title = `${c.script} ${c.args('OUT').join(' ')}`;
    if (missing.length && !process.env.CI) {
      it.skip(`${title}: skipped, needs ${missing.join(', ')}`, () => {});
      continue;
    }
    it(title, async () => {
      expect(missing, 'CI provides every prerequisite').toEqual([]);
      const out = path.join(scratch, String(k));
      mkdirSync(out, { recursive: true });
      await c.before?.(out);
      const printed = await npm(c.script, c.args(out), c.timeoutS);
      expect(printed).toMatch(c.done);
    }, (c.timeoutS ?? 300) * 1000 + 120_000);
  }
});
