/**
 * The service as a child process (`node dist/src/main.js`), for tests that
 * stop it the hard way (SIGKILL) or watch its logs. `buildDist` compiles the
 * current sources first.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { findProjectRoot } from '../../src/config.js';

const root = findProjectRoot();

export interface ServiceProcess {
  child: ChildProcess;
  base: string;
  /** Everything written to stdout and stderr so far. */
  output: () => string;
  /** The exit code (null after a signal). */
  exited: Promise<number | null>;
}

export async function buildDist(): Promise<void> {
  await promisify(execFile)('npx', ['tsc', '-p', 'tsconfig.json'], { cwd: root });
}

/** Starts the service with `env` (it should set PORT=0 and LOG_LEVEL=info) and waits for its "listening" log line. */
export async function startProcess(env: NodeJS.ProcessEnv): Promise<ServiceProcess> {
  const child = spawn(process.execPath, [path.join(root, 'dist/src/main.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setInterval(() => {
      const m = /"port":(\d+)[^\n]*"msg":"listening"/.exec(out);
      if (m) {
        clearInterval(timer);
        resolve(Number(m[1]));
      }
    }, 50);
    exited.then((code) => {
      clearInterval(timer);
      reject(new Error(`service exited (${code}) before listening:\n${out.slice(-3000)}`));
    });
  });
  return { child, base: `http://127.0.0.1:${port}`, output: () => out, exited };
}
