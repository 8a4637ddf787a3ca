/**
 * The real service for load runs, in its own process: an embedded PostgreSQL
 * in a temporary directory and `node dist/src/main.js` on a free loopback
 * port. Running it as a child keeps the load generator's own CPU use out of
 * the server's event loop, as it would be in production.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { findProjectRoot } from '../../src/config/index.js';
import type { Database } from '../../src/db/client.js';
import { openDatabase } from '../../src/db/open.js';

export interface BenchService {
  base: string;
  token: string;
  /** The database URL the service uses, for peers that read the same rows. */
  databaseUrl: string;
  db: Database;
  child: ChildProcess;
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

export async function waitForHealth(base: string, ms = 120_000, path_ = '/health'): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    try {
      if ((await fetch(`${base}${path_}`, { signal: AbortSignal.timeout(2000) })).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${base} did not become healthy within ${ms / 1000} s`);
}

/** Node options that make a child write a CPU profile into `dir` when it exits (`--cpu-prof DIR` of the tools). */
export function cpuProfArgs(dir: string | undefined, name: string): string[] {
  return dir ? ['--cpu-prof', '--cpu-prof-dir', path.resolve(dir), '--cpu-prof-name', `${name}.cpuprofile`] : [];
}

export async function startBenchService(token: string, env: Record<string, string> = {}, nodeArgs: string[] = []): Promise<BenchService> {
  const root = findProjectRoot();
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'face-bench-'));
  const database = await openDatabase({ dataDir, dbPool: 4 });
  const url = database.embedded?.url;
  if (!url) throw new Error('expected the embedded database');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const child = spawn(process.execPath, [...nodeArgs, path.join(root, 'dist/src/main.js')], {
    env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', FACE_TOKEN: token, DATABASE_URL: url, FACE_DATA_DIR: dataDir, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const exited = new Promise((r) => child.once('exit', r));
  const stop = async () => {
    if (child.exitCode === null) child.kill('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
    if (child.exitCode === null) child.kill('SIGKILL');
    await database.db.close();
    await database.embedded?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    await Promise.race([
      waitForHealth(base),
      exited.then(() => {
        throw new Error(`the service exited with ${child.exitCode} before it was healthy`);
      }),
    ]);
  } catch (err) {
    await stop();
    throw err;
  }
  return { base, token, databaseUrl: url, db: database.db, child, stop };
}
