/**
 * CPU time by process group over a stretch of a benchmark, from /proc (Linux
 * only; elsewhere `cpuSnapshot` returns undefined and the report is skipped).
 * On a small machine the load generator, the server and PostgreSQL share the
 * cores, so a server that costs the *other* processes more CPU per request
 * is slower even when its own event loop is idle: this shows where it goes.
 */
import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';

/** Clock ticks per second of /proc's utime and stime (USER_HZ, 100 on Linux). */
const HZ = 100;

export type Groups = Record<string, number>;

export interface CpuSnapshot {
  /** CPU seconds per group since each process started (only processes alive at both ends count). */
  byPid: Map<number, { group: string; s: number }>;
  /** Whole machine: busy and idle CPU seconds since boot. */
  busyS: number;
  idleS: number;
}

function procStat(pid: number, file = `/proc/${pid}/stat`): { comm: string; ppid: number; s: number } | undefined {
  try {
    const text = readFileSync(file, 'utf8');
    const close = text.lastIndexOf(')');
    const comm = text.slice(text.indexOf('(') + 1, close);
    const f = text.slice(close + 2).split(' ');
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    return { comm, ppid: Number(f[1]), s: (Number(f[11]) + Number(f[12])) / HZ };
  } catch {
    return undefined;
  }
}

/**
 * `named` maps a pid to a group, which its descendants join, except that
 * processes named `postgres` below a named process count as PostgreSQL (the
 * benchmark's embedded server); the rest are "other processes".
 */
export function cpuSnapshot(named: Record<number, string>): CpuSnapshot | undefined {
  if (os.platform() !== 'linux') return undefined;
  const procs = new Map<number, { comm: string; ppid: number; s: number }>();
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const st = procStat(Number(e));
    if (st) procs.set(Number(e), st);
  }
  const ancestorNamed = (pid: number): string | undefined => {
    for (let at = pid, hops = 0; at > 1 && hops < 64; hops++) {
      if (named[at]) return named[at];
      const p = procs.get(at);
      if (!p) break;
      at = p.ppid;
    }
    return undefined;
  };
  const groupOf = (pid: number): string => {
    const owner = ancestorNamed(pid);
    // Our embedded PostgreSQL is a child of a named process (the benchmark); another PostgreSQL
    // on the machine (unrelated work) is one of the "other processes".
    if (procs.get(pid)?.comm === 'postgres') return owner ? 'PostgreSQL' : 'other processes';
    return owner ?? 'other processes';
  };
  const byPid = new Map<number, { group: string; s: number }>();
  for (const [pid, p] of procs) byPid.set(pid, { group: groupOf(pid), s: p.s });
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = (cpu[3] ?? 0) + (cpu[4] ?? 0);
  const busy = cpu.slice(0, 8).reduce((a, b) => a + b, 0) - idle;
  return { byPid, busyS: busy / HZ, idleS: idle / HZ };
}

/** CPU seconds per group between two snapshots, plus the machine's busy and idle seconds. */
export function cpuDelta(a: CpuSnapshot, b: CpuSnapshot): Groups {
  const out: Groups = {};
  for (const [pid, after] of b.byPid) {
    const before = a.byPid.get(pid);
    const d = after.s - (before?.s ?? 0);
    if (d > 0) out[after.group] = (out[after.group] ?? 0) + d;
  }
  out['machine busy'] = b.busyS - a.busyS;
  out['machine idle'] = b.idleS - a.idleS;
  return out;
}

/** CPU seconds of every thread of this process, by thread id (Linux; empty elsewhere). */
export function threadCpuSeconds(): Map<number, number> {
  const out = new Map<number, number>();
  if (os.platform() !== 'linux') return out;
  let tids: string[];
  try {
    tids = readdirSync('/proc/self/task');
  } catch {
    return out;
  }
  for (const t of tids) {
    const st = procStat(Number(t), `/proc/self/task/${t}/stat`);
    if (st) out.set(Number(t), st.s);
  }
  return out;
}

/** The CPU seconds of the thread that used the most between two `threadCpuSeconds` readings. */
export function busiestThreadSeconds(a: Map<number, number>, b: Map<number, number>): number {
  let most = 0;
  for (const [tid, s] of b) most = Math.max(most, s - (a.get(tid) ?? 0));
  return most;
}

/** CPU seconds of a process since it started, from /proc/<pid>/stat (undefined when unreadable). */
export function processCpuSeconds(pid: number): number | undefined {
  return procStat(pid)?.s;
}
