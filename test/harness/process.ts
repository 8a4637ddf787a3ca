/**
 * The service as a child process (`node dist/src/main.js`), for tests that
 * stop it the hard way (SIGKILL) or watch its logs. `buildDist` compiles the
 * current sources first.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { findProjectRoot } from '../../src/config/index.js';

const root = findProjectRoot();

export interface ServiceProcess {
  child: ChildProcess;
  base: string;
  /**
   * Everything written so far: stdout, then stderr. The two are kept apart because the
   * engine writes its own lines to stderr while the service logs to stdout, and one pipe
   * could cut a line of either in two.
   */
  output: () => string;
  /** The JSON log lines of both streams so far, parsed (other lines left out). */
  logLines: () => Record<string, unknown>[];
  /** The exit code (null after a signal). */
  exited: Promise<number | null>;
}

export async function buildDist(): Promise<void> {
  await promisify(execFile)('npx', ['tsc', '-p', 'tsconfig.json'], { cwd: root });
}

/**
 * Starts the service with `env` (it should set PORT=0 and LOG_LEVEL=info) and waits for its
 * "listening" log line; `via: 'npm'` starts it as a user does, with `npm start`, so `child`
 * is npm.
 */
export async function startProcess(env: NodeJS.ProcessEnv, via: 'node' | 'npm' = 'node'): Promise<ServiceProcess> {
  const [command, args] = via === 'npm' ? ['npm', ['start', '--silent']] : [process.execPath, [path.join(root, 'dist/src/main.js')]];
  const child = spawn(command, args, { env, cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  const output = (): string => `${stdout}\n${stderr}`;
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setInterval(() => {
      const m = /"port":(\d+)[^\n]*"msg":"listening"/.exec(stdout);
      if (m) {
        clearInterval(timer);
        resolve(Number(m[1]));
      }
    }, 50);
    exited.then((code) => {
      clearInterval(timer);
      reject(new Error(`service exited (${code}) before listening:\n${output().slice(-3000)}`));
    });
  });
  return { child, base: `http://127.0.0.1:${port}`, output, logLines: () => parseLogLines(output()), exited };
}

function parseLogLines(text: string): Record<string, unknown>[] {
  const lines: Record<string, unknown>[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // a line still being written
    }
  }
  return lines;
}

/** Ids of the live processes whose parent is `pid` (read from /proc). */
export function childPids(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // The command name is in parentheses and may hold spaces; the parent id is the second field after it.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === pid && fields[0] !== 'Z') out.push(Number(entry));
    } catch {
      // the process ended while being read
    }
  }
  return out;
}

/** True while a process with this id exists and is not a zombie. */
export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}
