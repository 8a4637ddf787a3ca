/**
 * The service in each shape it runs in, behind one interface, so that one
 * integration test asserts the same answers of all of them:
 * - `one`: one process (FACE_ROLE=all), in this test process;
 * - `cluster`: two API nodes (FACE_ROLE=api) and two shard servers
 *   (FACE_ROLE=shard, the deployment's shards split between them), each a
 *   process of its own, on one PostgreSQL. Calls take turns between the API
 *   nodes, so consecutive calls cross nodes, where the seams are; the URLs
 *   they hand out name one public address, as behind a load balancer.
 *
 * Which shapes a file runs in: `shapesUnderTest`. The full matrix is
 * `npm run test:shapes` (FACE_TEST_SHAPES=all); a plain run takes the cluster
 * only for the files that ask for it in CI's time.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { startServer, type RunningServer } from '../../src/app.js';
import { createLogger } from '../../src/log.js';
import { engineOptionsFrom, openEngine } from '../../src/native/engine.js';
import { freshDatabase, type TestDatabase } from './database.js';
import { freePort } from './load-service.js';
import { buildDist, startProcess, type ServiceProcess } from './process.js';
import { testConfig, TOKEN } from './service.js';
import { until } from './until.js';

export const SHAPES = ['one', 'cluster'] as const;
export type ShapeName = (typeof SHAPES)[number];

/**
 * The shapes a test file runs in: one process always, the cluster too when the
 * file is one of those CI runs in both shapes (`inCi`) or under
 * `npm run test:shapes`.
 */
export function shapesUnderTest(opts: { inCi: boolean }): ShapeName[] {
  return opts.inCi || process.env.FACE_TEST_SHAPES === 'all' ? [...SHAPES] : ['one'];
}

export interface Shape {
  readonly name: ShapeName;
  readonly tdb: TestDatabase;
  /** The operator token (FACE_TOKEN) of every node. */
  readonly operator: string;
  /** Where the next call goes: in a cluster, the API nodes take turns. */
  base(): string;
  /** The base of the URLs the service hands out (photo links): the one address clients use. */
  readonly publicUrl: string;
  /** The folder holding the stored photos' bytes (shared by a cluster's API nodes). */
  readonly photos: string;
  /** What X-Live-Servers says with `down` search servers out: shards of one process, shard servers of a cluster. */
  live(down?: number): string;
  /**
   * Where shard `k` is controlled (POST /v0/admin/shards/<k>/offline …), and the name a strict
   * search gives what is out when it is offline: the shard, or its shard server.
   */
  shard(k: number): { base: string; name: string };
  /** Stops every process gracefully and starts it again on the same database and data, with `env` over the settings it started with. */
  restart(env?: Record<string, string>): Promise<void>;
  close(): Promise<void>;
}

/** Starts `name` with the service settings `env` (FACE_SHARDS among them; default 2). */
export async function startShape(name: ShapeName, env: Record<string, string> = {}): Promise<Shape> {
  const tdb = await freshDatabase();
  const dir = await mkdtemp(path.join(os.tmpdir(), `face-${name}-`));
  const settings = { FACE_SHARDS: '2', FACE_TOKEN: TOKEN, ...env };
  try {
    return name === 'one' ? await startOne(tdb, dir, settings) : await startCluster(tdb, dir, settings);
  } catch (err) {
    await tdb.drop();
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

async function startOne(tdb: TestDatabase, dir: string, env: Record<string, string>): Promise<Shape> {
  let server: RunningServer;
  // A server closes its engine, so each start opens one.
  const start = async (changed: Record<string, string> = {}) => {
    const config = testConfig({ FACE_DATA_DIR: dir, ...env, ...changed });
    server = await startServer({ config, engine: await openEngine(engineOptionsFrom(config)), db: tdb.db, log: createLogger('silent') });
  };
  await start();
  const shards = Number(env.FACE_SHARDS);
  return {
    name: 'one',
    tdb,
    operator: TOKEN,
    base: () => `http://127.0.0.1:${server.port}`,
    // Without FACE_PUBLIC_URL, links name the address the request came to.
    get publicUrl() {
      return `http://127.0.0.1:${server.port}`;
    },
    photos: path.join(dir, 'photos'),
    live: (down = 0) => `${shards - down}/${shards}`,
    shard: (k) => ({ base: `http://127.0.0.1:${server.port}`, name: String(k) }),
    async restart(changed) {
      await server.close();
      await start(changed);
    },
    async close() {
      await server.close();
      await tdb.drop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The settings every node of a test cluster shares. */
export function clusterEnv(tdb: TestDatabase, env: Record<string, string>): NodeJS.ProcessEnv {
  return { ...process.env, HOST: '127.0.0.1', DATABASE_URL: tdb.url, LOG_LEVEL: 'info', ...env };
}

/** A shard server holding `held` (shard ids joined by commas) on `port`, its data in `dataDir`. */
export function startShardServer(env: NodeJS.ProcessEnv, held: string, port: number, dataDir: string): Promise<ServiceProcess> {
  return startProcess({
    ...env,
    FACE_ROLE: 'shard',
    FACE_SHARD_IDS: held,
    PORT: String(port),
    FACE_DATA_DIR: dataDir,
    FACE_INDEX_THREADS: '1',
    // Snapshot after every change, so a restart has one to start from.
    FACE_INDEX_SNAPSHOT_CHANGES: '1',
    FACE_INDEX_SNAPSHOT_SECONDS: '1',
  });
}

/** An API node fanning out to `servers` (FACE_SHARD_SERVERS); API nodes share `dataDir` as a volume behind a load balancer. */
export function startApiNode(env: NodeJS.ProcessEnv, servers: string, dataDir: string, port = 0): Promise<ServiceProcess> {
  return startProcess({
    ...env,
    FACE_ROLE: 'api',
    PORT: String(port),
    FACE_DATA_DIR: dataDir,
    FACE_SHARD_SERVERS: servers,
    FACE_INFERENCE_WORKERS: '1',
    FACE_INTRA_THREADS: '1',
  });
}

/** Stops a node with SIGTERM, as an orchestrator does, once it is still running. */
export async function stopNode(p: ServiceProcess | undefined): Promise<void> {
  if (p && p.child.exitCode === null && p.child.signalCode === null) {
    p.child.kill('SIGTERM');
    await p.exited;
  }
}

const SERVERS = 2;
const API_NODES = 2;

async function startCluster(tdb: TestDatabase, dir: string, settings: Record<string, string>): Promise<Shape> {
  await buildDist();
  // What testConfig sets for one process: photo URLs on loopback (the tests' photo hosts), quickly given up.
  let env = clusterEnv(tdb, { FACE_FETCH_ALLOW_PRIVATE: 'true', FACE_FETCH_TIMEOUT_MS: '2000', ...settings });
  const shardCount = Number(settings.FACE_SHARDS);
  // Shard k lives on server k mod 2.
  const held = Array.from({ length: SERVERS }, (_, s) => Array.from({ length: shardCount }, (_, k) => k).filter((k) => k % SERVERS === s));
  const ports = await Promise.all(held.map(() => freePort()));
  const servers = held.map((ks, s) => `${ks.join('+')}@http://127.0.0.1:${ports[s]}`).join(',');
  // Behind a load balancer every API node hands out URLs of the one public address: here, the
  // first node's (its port kept across restarts), as FACE_PUBLIC_URL.
  const apiPorts = await Promise.all(Array.from({ length: API_NODES }, () => freePort()));
  env = { ...env, FACE_PUBLIC_URL: `http://127.0.0.1:${apiPorts[0]}` };
  const serverName = (s: number) => `http://127.0.0.1:${ports[s]} (shard${held[s].length > 1 ? 's' : ''} ${held[s].join(', ')})`;
  let shardNodes: ServiceProcess[] = [];
  let apiNodes: ServiceProcess[] = [];
  let turn = 0;
  const start = async () => {
    // Shard servers wait for an API node to record which embeddings they hold.
    const starting = held.map((ks, s) => startShardServer(env, ks.join(','), ports[s], path.join(dir, `shard-${s}`)));
    apiNodes = [await startApiNode(env, servers, path.join(dir, 'api'), apiPorts[0])];
    shardNodes = await Promise.all(starting);
    apiNodes.push(...(await Promise.all(apiPorts.slice(1).map((port) => startApiNode(env, servers, path.join(dir, 'api'), port)))));
    for (const node of apiNodes) {
      await until(
        'every shard server live',
        async () => {
          const r = await fetch(`${node.base}/v0/admin/shards`, { headers: { Authorization: `Token ${settings.FACE_TOKEN}` } });
          return r.ok && ((await r.json()) as { live: number }).live === SERVERS ? true : undefined;
        },
        30_000,
      );
    }
  };
  const stop = async () => {
    await Promise.all(apiNodes.map(stopNode));
    await Promise.all(shardNodes.map(stopNode));
  };
  try {
    await start();
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    name: 'cluster',
    tdb,
    operator: settings.FACE_TOKEN,
    base: () => apiNodes[turn++ % apiNodes.length].base,
    publicUrl: env.FACE_PUBLIC_URL as string,
    photos: path.join(dir, 'api', 'photos'),
    live: (down = 0) => `${SERVERS - down}/${SERVERS}`,
    shard: (k) => ({ base: shardNodes[k % SERVERS].base, name: serverName(k % SERVERS) }),
    async restart(changed = {}) {
      await stop();
      env = { ...env, ...changed };
      await start();
    },
    async close() {
      await stop();
      await tdb.drop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
