/**
 * What a benchmark ran on, printed with every report: numbers from different
 * machines, or from a machine busy with something else, are not comparable.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findProjectRoot } from '../../src/config/index.js';

export interface Machine {
  date: string;
  cpu: string;
  cores: number;
  memoryGiB: number;
  /** 1-minute load average at the start, over cores: near or above 1 means the numbers were shared. */
  loadPerCore: number;
  os: string;
  node: string;
  versions: Record<string, string>;
}

function versionOf(pkg: string): string {
  try {
    const file = path.join(findProjectRoot(), 'node_modules', pkg, 'package.json');
    return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
  } catch {
    return 'absent';
  }
}

export function describeMachine(extra: Record<string, string> = {}): Machine {
  const root = findProjectRoot();
  const own = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string };
  const cores = os.availableParallelism();
  return {
    date: new Date().toISOString(),
    cpu: os.cpus()[0]?.model?.trim() ?? 'unknown cpu',
    cores,
    memoryGiB: os.totalmem() / 2 ** 30,
    loadPerCore: os.loadavg()[0] / cores,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    versions: {
      'face-service': own.version,
      'uWebSockets.js': versionOf('uWebSockets.js'),
      'onnxruntime-node': versionOf('onnxruntime-node'),
      postgres: versionOf('postgres'),
      ...extra,
    },
  };
}

export function machineLine(m: Machine): string {
  const busy = m.loadPerCore >= 0.5 ? ` (load ${m.loadPerCore.toFixed(2)}/core at start: the machine was busy)` : ` (load ${m.loadPerCore.toFixed(2)}/core)`;
  const versions = Object.entries(m.versions)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  return `machine: ${m.cpu}, ${m.cores} cores, ${m.memoryGiB.toFixed(0)} GiB, ${m.os}, node ${m.node}${busy}\nversions: ${versions}\ndate: ${m.date}`;
}
