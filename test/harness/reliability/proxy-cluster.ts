/**
 * API nodes behind the shipped HAProxy configuration (container/haproxy.cfg), on loopback, every
 * part a real process: one shard server and two API nodes (`node dist/src/main.js`) on one
 * PostgreSQL, and Debian's haproxy in front of them with the addresses filled in through the
 * environment variables the configuration reads. Used by test/integration/proxy.test.ts and
 * bench/reliability/proxy.ts, which also share the failover run: writes through the proxy while a node is
 * SIGKILLed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot } from '../../../src/config/index.js';
import { freePort, waitForHealth } from '../load-service.js';

const root = findProjectRoot();

export const HAPROXY_CONFIG = path.join(root, 'container/haproxy.cfg');

/** The haproxy binary: $HAPROXY, else Debian's; undefined when it is not there. */
export function findHaproxy(): { bin?: string; looked: string } {
  const looked = process.env.HAPROXY || '/usr/sbin/haproxy';
  return { bin: existsSync(looked) ? looked : undefined, looked };
}

export interface Proc {
  name: string;
  child: ChildProcess;
  /** The last 64 KB written to stdout and stderr. */
  output: () => string;
  exited: Promise<number | null>;
}

function spawnLogged(name: string, cmd: string, args: string[], env: NodeJS.ProcessEnv): Proc {
  const child = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const keep = (d: Buffer) => {
    out += d.toString();
    if (out.length > 128 * 1024) out = out.slice(-64 * 1024);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { name, child, output: () => out.slice(-64 * 1024), exited };
}

async function stopProc(p: Proc | undefined, signal: NodeJS.Signals = 'SIGTERM', graceMs = 15_000): Promise<void> {
  if (!p || p.child.exitCode !== null || p.child.signalCode !== null) return;
  p.child.kill(signal);
  const timer = new Promise((resolve) => setTimeout(resolve, graceMs));
  await Promise.race([p.exited, timer]);
  if (p.child.exitCode === null && p.child.signalCode === null) {
    p.child.kill('SIGKILL');
    await p.exited;
  }
}

export interface ServiceNode extends Proc {
  port: number;
  base: string;
  /** host:port, as a "server" line of the proxy takes it. */
  address: string;
}

export interface ApiCluster {
  shard: ServiceNode;
  nodes: ServiceNode[];
  /** Stops every process still running (SIGTERM, then SIGKILL after 15 s). */
  stop(): Promise<void>;
}

/** Starts the service with `env` on a free loopback port and waits for its /health. */
async function startNode(name: string, port: number, env: NodeJS.ProcessEnv): Promise<ServiceNode> {
  const p = spawnLogged(name, process.execPath, [path.join(root, 'dist/src/main.js')], { ...env, PORT: String(port), HOST: '127.0.0.1' });
  const node = { ...p, port, base: `http://127.0.0.1:${port}`, address: `127.0.0.1:${port}` };
  try {
    await Promise.race([
      waitForHealth(node.base, 180_000),
      p.exited.then((code) => {
        throw new Error(`exited (${code}) before it was healthy`);
      }),
    ]);
  } catch (err) {
    await stopProc(node, 'SIGKILL');
    throw new Error(`${name}: ${(err as Error).message}\n${p.output().slice(-3000)}`);
  }
  return node;
}

/**
 * One shard server (FACE_SHARDS=1) and `count` API nodes on `databaseUrl`, the nodes sharing their
 * photo folder under `dir` as behind a load balancer they share a volume. One inference worker per
 * node: two nodes on a small machine would otherwise each claim every core.
 */
export async function startApiCluster(opts: { databaseUrl: string; token: string; dir: string; count?: number; env?: Record<string, string> }): Promise<ApiCluster> {
  const count = opts.count ?? 2;
  const common = { ...process.env, DATABASE_URL: opts.databaseUrl, FACE_TOKEN: opts.token, FACE_SHARDS: '1', LOG_LEVEL: 'warn', ...opts.env };
  const shardPort = await freePort();
  const ports: number[] = [];
  for (let i = 0; i < count; i++) ports.push(await freePort());
  const apiEnv = {
    ...common,
    FACE_ROLE: 'api',
    FACE_DATA_DIR: path.join(opts.dir, 'api'),
    FACE_SHARD_SERVERS: `0@http://127.0.0.1:${shardPort}`,
    FACE_INFERENCE_WORKERS: '1',
    FACE_INTRA_THREADS: '1',
  };
  const started: ServiceNode[] = [];
  const stop = async () => {
    await Promise.all(started.map((p) => stopProc(p)));
  };
  try {
    // On a new database the shard server learns the recogniser from the layout the first API node
    // records, so the two start together.
    const shard = startNode('shard', shardPort, { ...common, FACE_ROLE: 'shard', FACE_SHARD_IDS: '0', FACE_DATA_DIR: path.join(opts.dir, 'shard'), FACE_INDEX_THREADS: '1' });
    const first = startNode('api-1', ports[0], apiEnv);
    const [s, a] = await Promise.allSettled([shard, first]);
    for (const r of [s, a]) if (r.status === 'fulfilled') started.push(r.value);
    for (const r of [s, a]) if (r.status === 'rejected') throw r.reason;
    const rest = await Promise.all(ports.slice(1).map((port, i) => startNode(`api-${i + 2}`, port, apiEnv)));
    started.push(...rest);
    return { shard: started[0], nodes: started.slice(1), stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

export interface ProxyServerState {
  name: string;
  status: string;
  /** Connections opened to the server, and requests sent over a pooled one. */
  connect: number;
  reuse: number;
  /** Requests answered, by class. */
  hrsp: Record<'1xx' | '2xx' | '3xx' | '4xx' | '5xx', number>;
  /** Connection and response errors, retries and redispatches counted for the server. */
  econ: number;
  eresp: number;
  wretr: number;
  wredis: number;
}

export interface Haproxy extends Proc {
  port: number;
  base: string;
  statsBase: string;
  /** The API nodes' rows of the stats page. */
  servers(): Promise<ProxyServerState[]>;
  /** Waits until `count` nodes are UP (health checks passed). */
  waitForNodes(count: number, timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

/** haproxy -db (foreground, logs on stdout) with container/haproxy.cfg, in front of `nodes` (host:port, at most two). */
export async function startHaproxy(bin: string, nodes: string[], env: Record<string, string> = {}): Promise<Haproxy> {
  const port = await freePort();
  const statsPort = await freePort();
  const p = spawnLogged('haproxy', bin, ['-db', '-f', HAPROXY_CONFIG], {
    ...process.env,
    FACE_PROXY_BIND: `127.0.0.1:${port}`,
    FACE_PROXY_STATS_BIND: `127.0.0.1:${statsPort}`,
    FACE_API_1: nodes[0],
    FACE_API_2: nodes[1] ?? nodes[0],
    ...env,
  });
  const statsBase = `http://127.0.0.1:${statsPort}`;
  const servers = async (): Promise<ProxyServerState[]> => {
    const csv = await (await fetch(`${statsBase}/stats;csv`, { signal: AbortSignal.timeout(2000) })).text();
    const [head, ...rows] = csv.trim().split('\n');
    const cols = head.replace(/^# /, '').split(',');
    const at = (row: string[], k: string) => row[cols.indexOf(k)] ?? '';
    const n = (row: string[], k: string) => Number(at(row, k)) || 0;
    return rows
      .map((r) => r.split(','))
      .filter((r) => at(r, 'pxname') === 'api_nodes' && at(r, 'svname') !== 'BACKEND')
      .map((r) => ({
        name: at(r, 'svname'),
        status: at(r, 'status'),
        connect: n(r, 'connect'),
        reuse: n(r, 'reuse'),
        hrsp: { '1xx': n(r, 'hrsp_1xx'), '2xx': n(r, 'hrsp_2xx'), '3xx': n(r, 'hrsp_3xx'), '4xx': n(r, 'hrsp_4xx'), '5xx': n(r, 'hrsp_5xx') },
        econ: n(r, 'econ'),
        eresp: n(r, 'eresp'),
        wretr: n(r, 'wretr'),
        wredis: n(r, 'wredis'),
      }));
  };
  const proxy: Haproxy = {
    ...p,
    port,
    base: `http://127.0.0.1:${port}`,
    statsBase,
    servers,
    async waitForNodes(count, timeoutMs = 20_000) {
      const end = Date.now() + timeoutMs;
      let last = '';
      for (;;) {
        if (p.child.exitCode !== null) throw new Error(`haproxy exited (${p.child.exitCode}):\n${p.output().slice(-3000)}`);
        try {
          const s = await servers();
          last = s.map((x) => `${x.name} ${x.status}`).join(', ');
          if (s.filter((x) => x.status === 'UP').length >= count) return;
        } catch (err) {
          last = (err as Error).message;
        }
        if (Date.now() > end) throw new Error(`haproxy: ${count} nodes not UP within ${timeoutMs / 1000} s (${last}):\n${p.output().slice(-3000)}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    },
    stop: () => stopProc(p, 'SIGTERM', 5000),
  };
  try {
    await proxy.waitForNodes(Math.min(2, new Set(nodes).size));
  } catch (err) {
    await proxy.stop();
    throw err;
  }
  return proxy;
}

/** The demo photos shipped with @vladmandic/face-api, and how many faces each shows. */
export const DEMO_FACES: Record<number, number> = { 1: 3, 2: 3, 3: 3, 4: 4, 5: 5, 6: 4 };

export function demoPhoto(n: number): Buffer {
  return readFileSync(path.join(root, 'node_modules/@vladmandic/face-api/demo', `sample${n}.jpg`));
}

export interface WriteRecord {
  writer: number;
  meta: string;
  photo: number;
  /** ms since the run started. */
  start: number;
  end: number;
  /** 0: no HTTP answer (the tool saw a network error). */
  status: number;
  ids: number[];
  /** The error id of a JSON error answer, or the network error. */
  error?: string;
  /** Whether an error answer was the service's JSON {code, reason, error}. */
  jsonError?: boolean;
}

export interface FailoverRun {
  records: WriteRecord[];
  /** ms since the start at which the node was killed. */
  killedAt: number;
}

/**
 * `writers` clients add faces through `base` in a loop, each write with a meta of its own (so a
 * duplicate would show as twice the faces under one meta); once `killAfterAcks` writes are
 * acknowledged, `kill()` runs; the writers go on for `afterKillMs`.
 */
export async function runFailover(opts: { base: string; token: string; writers: number; killAfterAcks: number; afterKillMs: number; kill: () => Promise<void> | void; tag: string }): Promise<FailoverRun> {
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  const records: WriteRecord[] = [];
  let killedAt = -1;
  let stopAt = Infinity;
  const photos = Object.keys(DEMO_FACES).map(Number);
  const writer = async (w: number) => {
    for (let i = 0; now() < stopAt; i++) {
      const photo = photos[(w + i) % photos.length];
      const meta = `${opts.tag}-${w}-${i}`;
      const fd = new FormData();
      fd.append('photo', new Blob([new Uint8Array(demoPhoto(photo))], { type: 'image/jpeg' }), `sample${photo}.jpg`);
      fd.append('meta', meta);
      fd.append('mf_selector', 'all');
      const rec: WriteRecord = { writer: w, meta, photo, start: now(), end: 0, status: 0, ids: [] };
      try {
        const res = await fetch(`${opts.base}/v0/face/`, { method: 'POST', headers: { Authorization: `Token ${opts.token}` }, body: fd, signal: AbortSignal.timeout(60_000) });
        const text = await res.text();
        rec.status = res.status;
        let body: any;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        if (res.status === 200) rec.ids = (body?.results ?? []).map((f: { id: number }) => f.id);
        else {
          rec.error = typeof body?.error === 'string' ? body.error : text.slice(0, 80);
          rec.jsonError = body?.code === res.status && typeof body?.reason === 'string' && typeof body?.error === 'string';
        }
      } catch (err) {
        rec.error = ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code ?? (err as Error).message;
      }
      rec.end = now();
      records.push(rec);
      if (killedAt < 0 && records.filter((r) => r.status === 200).length >= opts.killAfterAcks) {
        killedAt = now();
        stopAt = killedAt + opts.afterKillMs;
        await opts.kill();
      }
    }
  };
  await Promise.all(Array.from({ length: opts.writers }, (_, w) => writer(w)));
  return { records, killedAt };
}

export interface FailoverSummary {
  writes: number;
  acknowledged: number;
  acknowledgedFaces: number;
  /** Acknowledged faces not in the listing afterwards (must be 0). */
  missing: number;
  /** Metas holding more faces than one write of their photo stores: a write applied twice (must be 0). */
  duplicated: number;
  /** Writes answered with anything but 200 (in practice those cut off by the kill), by status and error id, or network error. */
  errors: Record<string, number>;
  /**
   * The same, by kind: the proxy's JSON 502 (the request went to the killed node over a new
   * connection), a connection closed without an answer (it went over a pooled one: haproxy then
   * closes the client's connection as a keep-alive server would, leaving the decision to resend to
   * the client), anything else. The first two leave the write's outcome unknown to the client.
   */
  failures: { badGateway: number; closed: number; other: number };
  /** ms from the kill to the end of the last failed write (0 when none failed). */
  lastErrorMs: number;
  /** ms from the kill until every writer has had a write acknowledged that started after its last failure. */
  allSucceedingMs: number;
  acknowledgedAfterKill: number;
}

/** Checks a failover run against the faces listed afterwards (id and meta of each). */
export function summariseFailover(run: FailoverRun, listed: { id: number; meta: string }[]): FailoverSummary {
  const ids = new Set(listed.map((f) => f.id));
  const perMeta = new Map<string, number>();
  for (const f of listed) perMeta.set(f.meta, (perMeta.get(f.meta) ?? 0) + 1);
  const acked = run.records.filter((r) => r.status === 200);
  const failed = run.records.filter((r) => r.status !== 200);
  const errors: Record<string, number> = {};
  for (const r of failed) {
    const k = r.status ? `${r.status} ${r.error}` : `network ${r.error}`;
    errors[k] = (errors[k] ?? 0) + 1;
  }
  let allSucceeding = 0;
  for (const w of new Set(run.records.map((r) => r.writer))) {
    const mine = run.records.filter((r) => r.writer === w);
    const lastFail = Math.max(-Infinity, ...mine.filter((r) => r.status !== 200).map((r) => r.end));
    const after = lastFail === -Infinity ? mine.find((r) => r.status === 200 && r.end >= run.killedAt) : mine.find((r) => r.status === 200 && r.start >= lastFail);
    if (after) allSucceeding = Math.max(allSucceeding, after.end - run.killedAt);
  }
  return {
    writes: run.records.length,
    acknowledged: acked.length,
    acknowledgedFaces: acked.reduce((n, r) => n + r.ids.length, 0),
    missing: acked.reduce((n, r) => n + r.ids.filter((id) => !ids.has(id)).length, 0),
    duplicated: run.records.filter((r) => (perMeta.get(r.meta) ?? 0) > DEMO_FACES[r.photo]).length,
    errors,
    failures: {
      badGateway: failed.filter((r) => r.status === 502 && r.jsonError && r.error === 'BAD_GATEWAY').length,
      closed: failed.filter((r) => r.status === 0).length,
      other: failed.filter((r) => r.status !== 0 && !(r.status === 502 && r.jsonError && r.error === 'BAD_GATEWAY')).length,
    },
    lastErrorMs: failed.length ? Math.max(...failed.map((r) => r.end)) - run.killedAt : 0,
    allSucceedingMs: allSucceeding,
    acknowledgedAfterKill: acked.filter((r) => r.start >= run.killedAt).length,
  };
}

/** Every stored face (id and meta) through `base`. */
export async function listFaces(base: string, token: string): Promise<{ id: number; meta: string }[]> {
  const res = await fetch(`${base}/v0/faces/`, { headers: { Authorization: `Token ${token}` } });
  if (res.status !== 200) throw new Error(`GET /v0/faces/ answered ${res.status}: ${(await res.text()).slice(0, 200)}`);
  const body = (await res.json()) as { results: { id: number; meta: string }[] };
  return body.results.map((f) => ({ id: f.id, meta: f.meta }));
}
