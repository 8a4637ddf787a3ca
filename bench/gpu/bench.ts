/**
 * `npm run bench:gpu`: the engine's GPU bench (crates/gpu-bench, a Rust binary that needs no
 * Node) on this machine, with the engine options of the environment as the service reads them
 * (FACE_PROVIDERS, ORT_LIBRARY, FACE_FIXED_SHAPES, FACE_TRT_FP16, ...). On a GPU host it runs
 * from the pack `npm run gpu:pack` builds (docs/engine.md, "Running on a GPU test host"); here
 * it gives the CPU baseline. What it measures: the binary's own header (crates/gpu-bench/src/main.rs).
 *
 *   npm run bench:gpu -- [--modes sface:mirror,accurate] [--batches 1,4,16,64] [--sets demo,12mp]
 *       [--time MS] [--no-start] [--no-precision] [--probe] [--testdata DIR] [--fp16-models DIR] [--json FILE]
 *
 * Modes: FACE_RECOGNIZER when set, else the two a GPU host is measured in.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import { pickEngineConfig } from '../../src/config/engine-options.js';
import { buildGpuBench, GPU_BENCH_MODES, gpuPlan } from '../../test/harness/gpu-plan.js';
import { optionArg } from '../lib/args.js';

const flag = (name: string) => process.argv.includes(`--${name}`);
const list = (name: string) => optionArg(name)?.split(',');

function main(): number {
  const root = findProjectRoot();
  const config = loadConfig();
  const plan = gpuPlan(pickEngineConfig(config), {
    modes: list('modes') ?? (config.recognizer ? [config.recognizer] : GPU_BENCH_MODES),
    batches: list('batches')?.map(Number),
    sets: list('sets'),
    timeMs: optionArg('time') === undefined ? undefined : Number(optionArg('time')),
    demoPhotos: path.join(root, 'node_modules/@vladmandic/face-api/demo'),
    devSet: optionArg('testdata') ?? path.resolve(root, '../shared/testdata/faces'),
    fp16Models: optionArg('fp16-models') ? path.resolve(optionArg('fp16-models')!) : null,
    firstAnswer: !flag('no-start'),
    precision: !flag('no-precision'),
    probe: flag('probe'),
  });
  const planFile = path.join(root, '.bench-out/gpu-plan.json');
  mkdirSync(path.dirname(planFile), { recursive: true });
  writeFileSync(planFile, JSON.stringify(plan, null, 2));
  const binary = buildGpuBench(root);
  const json = optionArg('json');
  const run = spawnSync(binary, ['--plan', planFile, ...(json ? ['--json', path.resolve(json)] : [])], { stdio: 'inherit' });
  return run.status ?? 1;
}

process.exit(main());
