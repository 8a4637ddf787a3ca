/**
 * The plan the engine's GPU bench (`crates/gpu-bench`, a Rust binary) runs: the engine options
 * as the service's settings give them, the recogniser modes, the calibration's `medium`
 * cosines, and what to measure. `bench:gpu` writes one for this machine; `gpu:pack` one for a
 * GPU host, with paths inside the pack. Building the binary is here too, for both.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import type { EngineConfig } from '../../src/config/engine-options.js';
import { CALIBRATIONS } from '../../src/services/calibration.js';

export interface GpuPlan {
  engine: EngineConfig;
  /** Recogniser modes measured one after the other; the first also gets detect-only rows and the time to first answer. */
  modes: string[];
  mediumCosine: Record<string, number>;
  batches: number[];
  sets: string[];
  timeMs: number;
  demoPhotos: string;
  devSet: string | null;
  fp16Models: string | null;
  firstAnswer: boolean;
  precision: boolean;
  /** The detector probe: where one detection's time goes (crates/gpu-bench/src/probe.rs). */
  probe: boolean;
  goalFacesPerSecond: number;
}

/** The goal for one H100-class GPU, end to end. */
export const GOAL_FACES_PER_SECOND = 2000;
/** The modes a GPU host is measured in: the CPU default and the GPU default. */
export const GPU_BENCH_MODES = ['sface:mirror', 'accurate'];
export const GPU_BENCH_BATCHES = [1, 4, 16, 64];

export function gpuPlan(engine: EngineConfig, o: Partial<Omit<GpuPlan, 'engine' | 'mediumCosine' | 'goalFacesPerSecond'>> & { demoPhotos: string }): GpuPlan {
  return {
    engine,
    modes: o.modes ?? GPU_BENCH_MODES,
    mediumCosine: Object.fromEntries(Object.entries(CALIBRATIONS).map(([name, c]) => [name, c.cosineAtFar.medium])),
    batches: o.batches ?? GPU_BENCH_BATCHES,
    sets: o.sets ?? ['demo', '12mp'],
    timeMs: o.timeMs ?? 3000,
    demoPhotos: o.demoPhotos,
    devSet: o.devSet ?? null,
    fp16Models: o.fp16Models ?? null,
    firstAnswer: o.firstAnswer ?? true,
    precision: o.precision ?? true,
    probe: o.probe ?? false,
    goalFacesPerSecond: GOAL_FACES_PER_SECOND,
  };
}

/** Builds the bench binary (release) and returns its path; cargo does nothing when it is current. */
export function buildGpuBench(root: string): string {
  execFileSync('cargo', ['build', '--release', '--quiet', '-p', 'face-gpu-bench'], { cwd: root, stdio: 'inherit' });
  return path.join(root, 'target/release/face-gpu-bench');
}
