/**
 * The cross-check of the load generator: the same GET requests through `wrk`
 * (C, epoll; Debian's package), so that a run where autocannon falls far
 * below wrk on the same route shows the generator's limit instead of the
 * server's. wrk cycles the same paths through a small Lua `request` hook and
 * its own CPU is read from the shell's `times` (its children's CPU seconds).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface WrkResult {
  command: string;
  requests: number;
  perSecond: number;
  p50: number;
  p90: number;
  p99: number;
  /** Non-2xx/3xx answers plus socket errors. */
  errors: number;
  /** wrk's CPU over the run, in cores. */
  cores?: number;
}

export function haveWrk(): boolean {
  return spawnSync('wrk', ['--version'], { stdio: 'ignore' }).error === undefined;
}

/** "7.91ms", "512.00us", "1.20s" in ms. */
function ms(text: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(text.trim());
  if (!m) return NaN;
  const v = Number(m[1]);
  return m[2] === 'us' ? v / 1000 : m[2] === 'ms' ? v : m[2] === 's' ? v * 1000 : v * 60_000;
}

/** "0m1.230s" in seconds. */
function shellSeconds(text: string): number {
  const m = /^(\d+)m([\d.]+)s$/.exec(text);
  return m ? Number(m[1]) * 60 + Number(m[2]) : NaN;
}

export function parseWrk(out: string): Omit<WrkResult, 'command' | 'cores'> {
  const num = (re: RegExp) => Number(re.exec(out)?.[1] ?? 0);
  const pct = (p: string) => ms(new RegExp(`^\\s+${p}%\\s+(\\S+)`, 'm').exec(out)?.[1] ?? '');
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const socketErrors = socket ? socket.slice(1).reduce((s, n) => s + Number(n), 0) : 0;
  return {
    requests: num(/(\d+) requests in/),
    perSecond: num(/Requests\/sec:\s+([\d.]+)/),
    p50: pct('50'),
    p90: pct('90'),
    p99: pct('99'),
    errors: num(/Non-2xx or 3xx responses: (\d+)/) + socketErrors,
  };
}

export async function runWrk(o: { base: string; paths: string[]; headers: Record<string, string>; threads: number; connections: number; seconds: number }): Promise<WrkResult> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'face-wrk-'));
  const script = path.join(dir, 'paths.lua');
  try {
    writeFileSync(
      script,
      `local paths = {${o.paths.map((p) => JSON.stringify(p)).join(', ')}}\n` +
        'local n = 0\n' +
        'request = function()\n  n = n + 1\n  return wrk.format("GET", paths[(n % #paths) + 1])\nend\n',
    );
    const args = ['-t', String(o.threads), '-c', String(o.connections), '-d', `${o.seconds}s`, '--latency', '-s', script];
    for (const [k, v] of Object.entries(o.headers)) args.push('-H', `${k}: ${v}`);
    args.push(o.base);
    const quoted = args.map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
    const child = spawn('sh', ['-c', `wrk ${quoted}; status=$?; times; exit $status`], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((r) => child.once('exit', r));
    if (code !== 0) throw new Error(`wrk exited with ${code}:\n${out}`);
    // `times` prints the shell's user and system time, then its children's (wrk's).
    const lines = out.trim().split('\n');
    const [user, sys] = (lines.at(-1) ?? '').trim().split(/\s+/).map(shellSeconds);
    const parsed = parseWrk(out);
    const cores = Number.isFinite(user + sys) ? (user + sys) / o.seconds : undefined;
    const shown = args.map((a) => (a.startsWith('Authorization:') ? 'Authorization: Token …' : a)).map((a) => (a === script ? 'paths.lua' : a));
    return { command: `wrk ${shown.join(' ')}`, ...parsed, cores };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
