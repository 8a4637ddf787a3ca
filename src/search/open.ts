/**
 * Opening the search tier, by FACE_ROLE (app.ts calls these):
 *
 * - all: the shards held in this process, caught up with the change log and
 *   following it (index-sync.ts), searched through `localShards`;
 * - api: no shards here; the shard servers, fanned out to and asked to
 *   acknowledge writes (cluster-index.ts);
 * - shard: the shards of FACE_SHARD_IDS, caught up before the server
 *   listens, and what it answers API nodes (shard-server.ts).
 *
 * In every role a write waits for search the same way (index-writes.ts).
 */
import os from 'node:os';
import path from 'node:path';
import type { Config } from '../config/index.js';
import type { Database } from '../db/client.js';
import { claimLayout, readLayout, SHARD_RULE, type SearchLayout } from '../db/layout.js';
import type { Logger } from '../log.js';
import { openFaceIndex, type FaceIndex } from '../native/face-index.js';
import { ClusterIndex } from './cluster-index.js';
import { IndexSync } from './index-sync.js';
import { IndexWrites } from './index-writes.js';
import { localShards, type SearchShards } from './search-shards.js';
import { ShardControl } from './shard-control.js';
import { ShardServer } from './shard-server.js';
import { discardForeignSnapshots } from './snapshots.js';

/** The embeddings the shards hold. */
export interface EmbeddingLayout {
  recognizer: string;
  dims: number;
}

/** Shards held in this process and the follower keeping them in step with the database. */
export interface HeldShards {
  index: FaceIndex;
  sync: IndexSync;
}

/** This process in `shard_snapshots`: which server last saved a shard. */
const serverName = (config: Config) => `${config.role}@${os.hostname()}:${config.port || process.pid}`;

/** The search shards held in this process, caught up with the change log: FACE_ROLE all and shard. */
async function openHeldShards(config: Config, db: Database, layout: EmbeddingLayout, log: Logger): Promise<HeldShards> {
  const indexDir = path.join(config.dataDir, 'index');
  await discardForeignSnapshots(indexDir, layout.recognizer, log);
  const index = await openFaceIndex({
    dir: indexDir,
    shards: config.index.shards,
    dims: layout.dims,
    kind: config.index.kind,
    rerank: config.index.rerank,
    scalar: config.index.scalar,
    threads: config.index.threads,
    keepExact: config.index.exactCopies,
    owned: config.role === 'shard' ? config.cluster.shardIds : undefined,
  });
  try {
    const sync = await IndexSync.start({
      sql: db.sql,
      index,
      model: layout.recognizer,
      dims: layout.dims,
      log,
      snapshotSeconds: config.index.snapshotSeconds,
      snapshotChanges: config.index.snapshotChanges,
      shardCount: config.index.shards,
      server: serverName(config),
    });
    return { index, sync };
  } catch (err) {
    index.close();
    throw err;
  }
}

export interface OpenedSearch {
  /** The shards as this process searches them: its own, or its shard servers'. */
  search: SearchShards;
  /** How a write waits for them. */
  writes: IndexWrites;
  /** The shards held here (absent on an API node). */
  held?: HeldShards;
  /** After the last request: stops following (saving the shards) or polling the shard servers. */
  close(): Promise<void>;
}

/**
 * The search shards of one process (FACE_ROLE=all) or of an API node (api),
 * and how a write waits for them. First records the layout in the database,
 * refusing a shard count other than the deployment's, and the recogniser for
 * shard servers.
 */
export async function openSearch(config: Config, db: Database, layout: EmbeddingLayout, indexWaitMs: number, log: Logger): Promise<OpenedSearch> {
  await claimLayout(db.sql, { shards: config.index.shards, rule: SHARD_RULE, recognizer: layout.recognizer, dims: layout.dims });
  if (config.role === 'api') {
    const cluster = await ClusterIndex.start({
      servers: config.cluster.servers ?? [],
      shardCount: config.index.shards,
      rule: SHARD_RULE,
      recognizer: layout.recognizer,
      dims: layout.dims,
      token: config.token as string,
      deadlineMs: config.cluster.deadlineMs,
      maxBehindMs: config.cluster.maxBehindMs,
      log,
    });
    return { search: cluster, writes: new IndexWrites(cluster, log, indexWaitMs), close: async () => cluster.close() };
  }
  const held = await openHeldShards(config, db, layout, log);
  const search = localShards(held.index, held.sync);
  return { search, writes: new IndexWrites(search, log, indexWaitMs), held, close: () => held.sync.stop() };
}

const LAYOUT_WAIT_MS = 1000;

/**
 * Waits for the recogniser an API node records (a shard server runs no
 * models, so it learns which embeddings it holds from the database), checking
 * the shard count on the way.
 */
async function awaitLayout(db: Database, config: Config, log: Logger): Promise<EmbeddingLayout> {
  await claimLayout(db.sql, { shards: config.index.shards, rule: SHARD_RULE });
  for (let told = false; ; told = true) {
    const layout: SearchLayout | undefined = await readLayout(db.sql);
    if (layout?.recognizer && layout.dims) return { recognizer: layout.recognizer, dims: layout.dims };
    if (!told) log.info('waiting for an API node to record which embeddings the shards hold');
    await new Promise((r) => setTimeout(r, LAYOUT_WAIT_MS));
  }
}

export interface OpenedShardServer extends HeldShards {
  /** The held shards as /health, /metrics and /v0/admin/shards report them. */
  view: SearchShards;
  /** What the server answers API nodes. */
  server: ShardServer;
  control: ShardControl;
}

/**
 * A shard server's search tier (FACE_ROLE=shard): the shards of
 * FACE_SHARD_IDS, caught up with the change log before it listens, then
 * following it. Stop it with `sync.stop()`.
 */
export async function openShardServer(config: Config, db: Database, log: Logger): Promise<OpenedShardServer> {
  const layout = await awaitLayout(db, config, log);
  const { index, sync } = await openHeldShards(config, db, layout, log);
  const view = localShards(index, sync);
  return {
    index,
    sync,
    view,
    server: new ShardServer(index, sync, { shards: config.index.shards, rule: SHARD_RULE, ...layout }),
    control: new ShardControl(index, sync, view),
  };
}
