/**
 * Assembles the HTTP service from configuration, an engine and a token
 * verifier. main.ts uses it with the native engine; tests use it with port 0
 * and an engine of their own.
 *
 * By FACE_ROLE: `startServer` serves the API with the search shards in this
 * process (all) or on shard servers (api); `startShardServer` serves a shard
 * server, which runs no models. The search tier of each role is opened by
 * search/open.ts.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { AnyTokenVerifier, StaticTokenVerifier, type TokenVerifier } from './auth.js';
import type { CameraOptions } from './camera/camera.js';
import { Cameras } from './camera/cameras.js';
import { HttpSightingWriter } from './camera/http-writer.js';
import { findProjectRoot, type Config } from './config/index.js';
import { databaseUnavailable, onPool, onPrimary, type Database, type FreshRead } from './db/client.js';
import { FaceStore } from './db/faces.js';
import { GalleryStore } from './db/galleries.js';
import { ReadReplica } from './db/read-replica.js';
import { ensureSightingPartitions } from './db/history-partitions.js';
import { HistoryStore } from './db/history-store.js';
import { IdempotencyStore } from './db/idempotency.js';
import { WriterWatch } from './db/writer.js';
import { PhotoBlobs, PhotoStore } from './db/photos.js';
import { ReembedStore } from './db/reembed-store.js';
import { AuditLog } from './db/audit.js';
import { TenantStore } from './db/tenants.js';
import { DbTokenVerifier, TokenStore } from './db/tokens.js';
import type { RouteRegistry } from './http/registry.js';
import { FairShare } from './http/fair-share.js';
import { listen } from './http/server.js';
import { log as rootLog, type Logger } from './log.js';
import { ServiceMetrics } from './metrics/service-metrics.js';
import type { Engine } from './native/engine.js';
import type { FaceIndex } from './native/face-index.js';
import { buildCameraRegistry, buildRegistry, buildShardRegistry, type DatabaseRoutes } from './routes/index.js';
import type { IndexSync } from './search/index-sync.js';
import { INDEX_WAIT_MS } from './search/index-writes.js';
import { openSearch, openShardServer, type OpenedSearch } from './search/open.js';
import type { SearchShards } from './search/search-shards.js';
import { ShardControl } from './search/shard-control.js';
import { historyStrangers } from './search/stranger-index.js';
import { calibrationOf, type Calibration } from './services/calibration.js';
import { PhotoSource } from './services/photo-source.js';
import { grouping } from './services/sightings.js';
import { sightingWriter } from './services/camera-sightings.js';
import { PhotoAnalysis } from './services/analysis.js';
import { duringMigration, EmbeddingMigration } from './services/reembed.js';

export interface StartOptions {
  config: Config;
  /** Runs the models: FACE_ROLE all and api (a shard server has none). */
  engine: Engine;
  /**
   * The migrated face database. With it the database routes are served, photo
   * blobs go to `<dataDir>/photos` and tokens stored there are accepted. The
   * caller owns it and closes it after `close()`.
   */
  db?: Database;
  /** Extra token verifiers, asked after FACE_TOKEN and the database. */
  verifiers?: TokenVerifier[];
  /** How long a write waits for the search index before it is answered with X-Index-Lag. */
  indexWaitMs?: number;
  log?: Logger;
}

export interface RunningServer {
  /** The port actually listened on (useful with port 0). */
  port: number;
  /** The face database as served (absent without `db`). */
  store?: FaceStore;
  /** The stored photos (absent without `db`). */
  photos?: PhotoStore;
  /** The follower keeping the search shards in step with the database (absent without `db`, and on an API node). */
  sync?: IndexSync;
  /** The search shards as this process sees them: its own, or its shard servers' (absent without `db`). */
  search?: SearchShards;
  /** Re-embedding of faces stored by another recogniser; absent when there are none. */
  migration?: EmbeddingMigration;
  /** What GET /metrics serves. */
  metrics: ServiceMetrics;
  /** The cameras this node reads (FACE_CAMERAS); absent when it reads none. */
  cameras?: Cameras;
  /** Graceful stop: no new connections, requests in progress finish, then the engine is closed. */
  close(): Promise<void>;
}

function serviceVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(path.join(findProjectRoot(), 'package.json'), 'utf8')) as { version?: string };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}

const HOURLY_SWEEP_MS = 60 * 60_000;

/**
 * Deletes expired sighting thumbnails (and the embeddings kept with them) now and then hourly;
 * the timer does not keep the process alive.
 */
function expireThumbnails(history: HistoryStore, days: number, log: Logger): NodeJS.Timeout {
  const sweep = () =>
    history.events.expireThumbnailsAcrossTenants(days * 86_400).then(
      (n) => n > 0 && log.info({ thumbnails: n, days }, 'expired sighting thumbnails'),
      (err) => log.warn({ err }, 'thumbnail expiry failed'),
    );
  void sweep();
  const timer = setInterval(sweep, HOURLY_SWEEP_MS);
  timer.unref();
  return timer;
}

/** Deletes expired idempotency keys now and then hourly; the timer does not keep the process alive. */
function pruneIdempotencyKeys(keys: IdempotencyStore, log: Logger): NodeJS.Timeout {
  const sweep = () =>
    keys.prune().then(
      (n) => n > 0 && log.info({ keys: n }, 'pruned expired idempotency keys'),
      (err) => log.warn({ err }, 'idempotency key pruning failed'),
    );
  void sweep();
  const timer = setInterval(sweep, HOURLY_SWEEP_MS);
  timer.unref();
  return timer;
}

/**
 * Listens accepting the operator token alone (shard servers, camera workers, whose routes are
 * between the nodes of one deployment); `undo` releases what was opened when it cannot.
 */
async function serveOperatorOnly(config: Config, registry: RouteRegistry, metrics: ServiceMetrics, log: Logger, undo: () => Promise<void>) {
  const operator = new StaticTokenVerifier(config.token);
  try {
    return await serve(config, registry, operator, metrics, log);
  } catch (err) {
    await undo();
    throw err;
  }
}

/** Listens with the configured limits; every role serves through this. */
function serve(config: Config, registry: RouteRegistry, verifier: TokenVerifier, metrics: ServiceMetrics, log: Logger) {
  return listen({
    host: config.host,
    port: config.port,
    registry,
    verifier,
    fairShare: new FairShare(config.fairShare),
    limits: {
      maxBodyBytes: config.maxBodyBytes,
      maxUploadBytes: config.maxUploadBytes,
      maxInflight: config.maxInflight,
      maxEngineInflight: config.maxEngineInflight,
      maxBodyMemory: config.maxBodyMemory,
      requestTimeoutMs: config.requestTimeoutMs,
    },
    shutdownTimeoutMs: config.shutdownTimeoutMs,
    log,
    observer: (sample) => metrics.requestFinished(sample),
    translateError: databaseUnavailable,
  });
}

const PARTITION_SWEEP_MS = 24 * 60 * 60_000;

/** What the service keeps in PostgreSQL, opened: the stores, the search tier over them, the re-embedding migration and the read replica. */
interface Stores {
  search: OpenedSearch;
  migration: EmbeddingMigration | undefined;
  database: DatabaseRoutes;
  replica: ReadReplica | undefined;
  /** Reads that want the primary: on it, or on the replica while it is lost. */
  fresh: FreshRead;
}

/**
 * Opens the stores on `db` in the order serving needs them: the read replica, the search tier
 * (its shards caught up with the change log), then the re-embedding decision, taken before any
 * answer counts the shards as live. What was opened is closed again when a later step fails.
 */
async function openStores(config: Config, db: Database, engine: Engine, calibration: Calibration, metrics: ServiceMetrics, indexWaitMs: number, log: Logger, forgetTokens: () => void): Promise<Stores> {
  const { recognizer, dim } = engine.info();
  // Listings, history search and person views read from the replica while it is within the lag bound.
  const replica = config.databaseReadUrl ? await ReadReplica.open(db, { url: config.databaseReadUrl, maxLagMs: config.readMaxLagMs, log: log.child({ component: 'read-replica' }) }) : undefined;
  const listings = replica ? replica.reader(db.stream) : onPool(db.stream);
  const views = replica ? replica.reader(db.sql) : onPool(db.sql);
  // Faces by id, galleries and tokens: the primary, and the replica while a failover is under way.
  const fresh: FreshRead = replica ? (read, found) => replica.fresh(read, found) : onPrimary(db.sql);
  if (replica) metrics.watchReplica(replica);
  const photos = new PhotoStore(db.sql, new PhotoBlobs(path.join(config.dataDir, 'photos')), log);
  const store = new FaceStore(db.sql, photos, { model: recognizer, reads: listings, fresh });
  const history = new HistoryStore(db.sql, { sightings: config.history.friendSightings, windowS: config.history.friendWindowS }, listings, views);
  const groupsStrangers = config.persons.threshold !== 'off';
  let search: OpenedSearch;
  try {
    search = await openSearch(config, db, { recognizer, dims: dim }, indexWaitMs, groupsStrangers ? historyStrangers(history, recognizer) : undefined, log);
  } catch (err) {
    await replica?.close();
    throw err;
  }
  metrics.watchStore(search.search, db);
  let migration: EmbeddingMigration | undefined;
  try {
    // Decided before serving, so no answer counts the shards as live while faces are pending.
    migration = await EmbeddingMigration.prepare({
      store: new ReembedStore(db.sql),
      readPhoto: (hash) => photos.read(hash),
      engine,
      caughtUp: async (position) => !(await search.search.settle(position, false, undefined, INDEX_WAIT_MS)),
      log,
      audit: new AuditLog(db.sql),
    });
  } catch (err) {
    await search.close();
    await replica?.close();
    throw err;
  }
  // Identify sees the shards through the migration (none live while faces are pending) ...
  const view = migration ? duringMigration(search.search, migration) : search.search;
  const held = search.held;
  const { threshold } = config.persons;
  const database: DatabaseRoutes = {
    store,
    photos,
    galleries: new GalleryStore(db.sql, photos, fresh),
    history,
    grouping:
      search.strangers && threshold !== 'off'
        ? grouping({
            strangers: search.strangers,
            history,
            model: recognizer,
            calibration,
            threshold,
            windowS: config.persons.windowS,
            retentionS: config.history.thumbnailRetentionDays * 86_400,
          })
        : undefined,
    idempotency: new IdempotencyStore(db.sql, config.idempotencyTtlS),
    index: view,
    // ... writes see them as they are: a face stored during a migration is searchable at once.
    writes: search.writes,
    control: held ? new ShardControl(held.index, held.sync, view) : undefined,
    tenants: new TenantStore(db.sql, photos),
    tokens: new TokenStore(db.sql),
    audit: new AuditLog(db.sql),
    forgetTokens,
  };
  return { search, migration, database, replica, fresh };
}

/**
 * Creates the sightings partitions of this month and the next three now and
 * then daily (and moves rows the default partition caught into their month);
 * any number of API nodes may do it at once. The timer does not keep the
 * process alive.
 */
function maintainSightingPartitions(db: Database, log: Logger): NodeJS.Timeout {
  const run = () =>
    ensureSightingPartitions(db.owner, { monthsAhead: 3 }).then(
      (made) => made.length > 0 && log.info({ partitions: made }, 'created sightings partitions'),
      (err) => log.warn({ err }, 'sightings partitions could not be created; retrying tomorrow (inserts go to the default partition meanwhile)'),
    );
  void run();
  const timer = setInterval(run, PARTITION_SWEEP_MS);
  timer.unref();
  return timer;
}

/** The cameras' settings, as each camera takes them. */
function cameraOptions(config: Config): CameraOptions {
  const { fps, trackMaxS, lostS, stallS } = config.cameras;
  return { fps, maxTrackMs: trackMaxS * 1000, lostMs: lostS * 1000, stallMs: stallS * 1000 };
}

export async function startServer({ config, engine, db, verifiers = [], indexWaitMs = INDEX_WAIT_MS, log = rootLog }: StartOptions): Promise<RunningServer> {
  if (config.role === 'shard' || config.role === 'camera') {
    throw new Error('startServer serves FACE_ROLE all and api; a shard server starts with startShardServer, a camera worker with startCameraWorker');
  }
  if (config.cameras.list && !db) throw new Error('FACE_CAMERAS: cameras write sightings, which needs the face database');
  // Confidence and threshold presets are measured per recogniser: refuse to serve uncalibrated scores.
  const calibration = calibrationOf(engine.info().recognizer);
  const metrics = new ServiceMetrics({ engine, log });
  const photoSource = new PhotoSource(
    {
      timeoutMs: config.fetch.timeoutMs,
      maxRedirects: config.fetch.maxRedirects,
      maxBytes: config.maxUploadBytes,
      allowPrivate: config.fetch.allowPrivate,
    },
    (outcome) => metrics.photoFetched(outcome),
  );
  let dbTokens: DbTokenVerifier | undefined;
  const stores = db ? await openStores(config, db, engine, calibration, metrics, indexWaitMs, log, () => dbTokens?.clear()) : undefined;
  dbTokens = db ? new DbTokenVerifier(db.sql, undefined, { log, fresh: stores?.fresh }) : undefined;
  const { search, migration, database, replica } = stores ?? {};
  const history = database?.history;
  const expiry = history && config.history.thumbnailRetentionDays > 0 ? expireThumbnails(history, config.history.thumbnailRetentionDays, log) : undefined;
  const partitions = db ? maintainSightingPartitions(db, log) : undefined;
  const writer = db ? new WriterWatch(db.sql).start() : undefined;
  if (writer) metrics.watchWriter(writer);
  const keys = database ? pruneIdempotencyKeys(database.idempotency, log) : undefined;
  // Sightings go through identify as a request's would; the cameras start once the server listens.
  const startCameras = (list: NonNullable<Config['cameras']['list']>, stores: DatabaseRoutes) =>
    new Cameras(
      list,
      engine,
      sightingWriter({
        ...stores,
        faces: new PhotoAnalysis(engine, photoSource, calibration),
        thumbnailSize: config.history.thumbnailSize,
        strict: false,
      }),
      cameraOptions(config),
      log,
    );
  let cameras: Cameras | undefined;
  const cameraStates = { states: () => cameras?.states() ?? [] };
  const registry = buildRegistry({
    engine,
    calibration,
    photos: photoSource,
    serviceVersion: serviceVersion(),
    database: database && { stores: database, settings: { identify: config.identify, thumbnailSize: config.history.thumbnailSize, minQuality: config.minQuality } },
    publicUrl: config.publicUrl,
    migration,
    metrics,
    role: config.role,
    writer,
    ...(config.cameras.list ? { cameras: cameraStates } : {}),
  });
  const staticToken = new StaticTokenVerifier(config.token);
  const verifier = new AnyTokenVerifier([staticToken, ...(dbTokens ? [dbTokens] : []), ...verifiers]);
  const server = await serve(config, registry, verifier, metrics, log);
  migration?.start();
  if (config.cameras.list && database) {
    cameras = startCameras(config.cameras.list, database);
    metrics.watchCameras(cameras);
  }
  let closing: Promise<void> | undefined;
  return {
    port: server.port,
    store: database?.store,
    photos: database?.photos,
    sync: search?.held?.sync,
    search: search?.search,
    migration,
    metrics,
    cameras,
    close() {
      closing ??= (async () => {
        // First, while the engine and the database still serve them: the passages in view are written.
        await cameras?.stop();
        if (expiry) clearInterval(expiry);
        if (partitions) clearInterval(partitions);
        if (keys) clearInterval(keys);
        writer?.stop();
        await server.close();
        await replica?.close();
        // Before the follower and the engine, which the batch in flight still uses.
        await migration?.stop();
        // After the last request, so the snapshot covers every answered write.
        await search?.close();
        metrics.close();
        engine.close();
        await dbTokens?.close();
      })();
      return closing;
    },
  };
}

export interface RunningShardServer {
  port: number;
  sync: IndexSync;
  index: FaceIndex;
  metrics: ServiceMetrics;
  close(): Promise<void>;
}

/**
 * A shard server (FACE_ROLE=shard): the shards of FACE_SHARD_IDS, caught up
 * with the change log before it listens, then following it and answering
 * API nodes (search/shard-server.ts, through routes/shard.ts). Only the
 * operator token is accepted.
 */
export async function startShardServer({ config, db, log = rootLog }: { config: Config; db: Database; log?: Logger }): Promise<RunningShardServer> {
  // The strangers' sightings are read from the history; the friend rule plays no part here.
  const history = new HistoryStore(db.sql, { sightings: config.history.friendSightings, windowS: config.history.friendWindowS });
  const { index, sync, view, server: answers, control, strangers } = await openShardServer(
    config,
    db,
    config.persons.threshold !== 'off' ? (model) => historyStrangers(history, model) : undefined,
    log,
  );
  const metrics = new ServiceMetrics({ log });
  metrics.watchStore(view, db);
  const writer = new WriterWatch(db.sql).start();
  metrics.watchWriter(writer);
  const registry = buildShardRegistry({
    server: answers,
    maxN: config.identify.maxN,
    view,
    control,
    audit: new AuditLog(db.sql),
    metrics,
    serviceVersion: serviceVersion(),
    writer,
  });
  const listening = await serveOperatorOnly(config, registry, metrics, log, async () => {
    await sync.stop();
    strangers?.close();
  });
  let closing: Promise<void> | undefined;
  return {
    port: listening.port,
    sync,
    index,
    metrics,
    close() {
      closing ??= (async () => {
        writer.stop();
        await listening.close();
        await sync.stop();
        strangers?.close();
        metrics.close();
      })();
      return closing;
    },
  };
}

export interface RunningCameraWorker {
  port: number;
  cameras: Cameras;
  metrics: ServiceMetrics;
  close(): Promise<void>;
}

/**
 * A camera worker (FACE_ROLE=camera): the cameras of FACE_CAMERAS, their
 * faces detected and followed by this process's engine, their sightings
 * written to the API node at FACE_CAMERA_API_URL with FACE_TOKEN. It serves
 * /health (the cameras' states) and /metrics; no database, no face routes.
 * `cameras.done` resolves once every camera has stopped (files read to
 * their end).
 */
export async function startCameraWorker({ config, engine, log = rootLog }: { config: Config; engine: Engine; log?: Logger }): Promise<RunningCameraWorker> {
  const { list, apiUrl } = config.cameras;
  if (config.role !== 'camera' || !list || !apiUrl || !config.token) throw new Error('startCameraWorker runs FACE_ROLE=camera with FACE_CAMERAS, FACE_CAMERA_API_URL and FACE_TOKEN');
  const metrics = new ServiceMetrics({ engine, log });
  const cameras = new Cameras(list, engine, new HttpSightingWriter(apiUrl, config.token), cameraOptions(config), log);
  metrics.watchCameras(cameras);
  const registry = buildCameraRegistry({ engine, cameras, metrics, serviceVersion: serviceVersion() });
  const listening = await serveOperatorOnly(config, registry, metrics, log, async () => {
    await cameras.stop();
    metrics.close();
  });
  let closing: Promise<void> | undefined;
  return {
    port: listening.port,
    cameras,
    metrics,
    close() {
      closing ??= (async () => {
        await cameras.stop();
        await listening.close();
        metrics.close();
        engine.close();
      })();
      return closing;
    },
  };
}
