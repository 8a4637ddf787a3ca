/**
 * Opening the search tier, by FACE_ROLE (the starters in app/ call these):
 *
 * - all: the shards held in this process, caught up with the change log and
 *   following it (index-sync.ts), searched through `localShards`;
 * - api: no shards here; the shard servers, fanned out to and asked to
 *   acknowledge writes (cluster-index.ts);
 * - shard: the shards of FACE_SHARD_IDS, caught up before the server
 *   listens, and what it answers API nodes (shard-server.ts).
 *
 * In every role a write waits for search the same way (index-writes.ts).
 *
 * With grouping on, the strangers' sightings are searchable beside the faces
 * (stranger-index.ts): in this process for FACE_ROLE=all; on the shard
 * servers, each holding those that fall on its shards, for a cluster.
 */
import os from 'node:os';
import path from 'node:path';
import type { Config } from '../config/index.js';
import type { Database } from '../db/client.js';
import { claimLayout, readLayout, SHARD_RULE, type SearchLayout } from '../db/layout.js';
import type { Logger } from '../log.js';
import { openFaceIndex, shardOf, type FaceIndex } from '../native/face-index.js';
import { ClusterIndex } from './cluster-index.js';
import { IndexSync } from './index-sync.js';
import { IndexWrites } from './index-writes.js';
import { localShards, type SearchShards } from './search-shards.js';
import { ShardControl } from './shard-control.js';
import { ShardServer } from './shard-server.js';
import { discardForeignSnapshots } from './snapshots.js';
import { STRANGER_POLL_MS, STRANGER_SWEEP_MS, StrangerIndex, type StrangerSearch, type StrangerSource } from './stranger-index.js';

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
  /** The strangers' sightings as grouping searches them (absent when it is off). */
  strangers?: StrangerSearch;
  /** How a write waits for them. */
  writes: IndexWrites;
  /** The shards held here (absent on an API node). */
  held?: HeldShards;
  /** After the last request: stops following (saving the shards) or polling the shard servers. */
  close(): Promise<void>;
}

/**
 * The strangers' index of this process, filled from `source`, following it; `owns`: the
 * sightings that fall on the shards held here (absent: all).
 */
async function openStrangers(config: Config, source: StrangerSource, dims: number, owns: ((id: number) => boolean) | undefined, pollMs: number, log: Logger): Promise<StrangerIndex> {
  const started = Date.now();
  const strangers = await StrangerIndex.open({ dims, rerank: config.index.rerank, owns }, source);
  log.info({ persons: strangers.persons(), sightings: strangers.size(), ms: Date.now() - started }, "strangers' index filled");
  strangers.follow(pollMs, STRANGER_SWEEP_MS, log);
  return strangers;
}

/**
 * The search shards of one process (FACE_ROLE=all) or of an API node (api),
 * and how a write waits for them; with `strangers` (grouping on), the
 * strangers' sightings too. First records the layout in the database,
 * refusing a shard count other than the deployment's, and the recogniser for
 * shard servers.
 */
export async function openSearch(
  config: Config,
  db: Database,
  layout: EmbeddingLayout,
  indexWaitMs: number,
  strangers: StrangerSource | undefined,
  log: Logger,
): Promise<OpenedSearch> {
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
    return {
      search: cluster,
      ...(strangers ? { strangers: { search: (rows, n, upTo, since, tenant) => cluster.searchStrangers(rows, n, upTo, since, tenant) } } : {}),
      writes: new IndexWrites(cluster, log, indexWaitMs),
      close: async () => cluster.close(),
    };
  }
  const held = await openHeldShards(config, db, layout, log);
  let local: StrangerIndex | undefined;
  try {
    // Read before each grouping step's search, so no poll.
    local = strangers && (await openStrangers(config, strangers, layout.dims, undefined, 0, log));
  } catch (err) {
    await held.sync.stop();
    throw err;
  }
  const search = localShards(held.index, held.sync);
  return {
    search,
    ...(local ? { strangers: local } : {}),
    writes: new IndexWrites(search, log, indexWaitMs),
    held,
    async close() {
      await held.sync.stop();
      local?.close();
    },
  };
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
  /** The strangers' sightings on the held shards (absent when grouping is off). */
  strangers?: StrangerIndex;
}

/**
 * A shard server's search tier (FACE_ROLE=shard): the shards of
 * FACE_SHARD_IDS, caught up with the change log before it listens, then
 * following it; with `strangersOf` (grouping on), the strangers' sightings
 * that fall on them, read from the source it gives for the recogniser. Stop
 * it with `sync.stop()` and `strangers.close()`.
 */
export async function openShardServer(
  config: Config,
  db: Database,
  strangersOf: ((recognizer: string) => StrangerSource) | undefined,
  log: Logger,
): Promise<OpenedShardServer> {
  const layout = await awaitLayout(db, config, log);
  const { index, sync } = await openHeldShards(config, db, layout, log);
  let held: StrangerIndex | undefined;
  try {
    const shardIds = new Set(config.cluster.shardIds);
    held = strangersOf && (await openStrangers(config, strangersOf(layout.recognizer), layout.dims, (id) => shardIds.has(shardOf(id, config.index.shards)), STRANGER_POLL_MS, log));
  } catch (err) {
    await sync.stop();
    throw err;
  }
  const view = localShards(index, sync);
  return {
    index,
    sync,
    view,
    server: new ShardServer(index, sync, { shards: config.index.shards, rule: SHARD_RULE, ...layout }, held),
    control: new ShardControl(index, sync, view),
    ...(held ? { strangers: held } : {}),
  };
}
