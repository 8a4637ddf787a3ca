/**
 * The API server (FACE_ROLE all and api): the search shards in this process (all) or on shard
 * servers (api), the services and routes over them, and the cameras of FACE_CAMERAS when set.
 * main.ts starts it with the native engine; tests start it with port 0 and an engine of their own.
 */
import { AnyTokenVerifier, StaticTokenVerifier, type TokenVerifier } from '../auth.js';
import { Cameras } from '../camera/cameras.js';
import type { Config } from '../config/index.js';
import type { Database } from '../db/client.js';
import type { FaceStore } from '../db/faces.js';
import type { PhotoStore } from '../db/photos.js';
import { DbTokenVerifier } from '../db/tokens.js';
import { WriterWatch } from '../db/writer.js';
import { log as rootLog, type Logger } from '../log.js';
import { ServiceMetrics } from '../metrics/service-metrics.js';
import type { Engine } from '../native/engine.js';
import { buildRegistry, type DatabaseRoutes } from '../routes/index.js';
import type { IndexSync } from '../search/index-sync.js';
import { INDEX_WAIT_MS } from '../search/index-writes.js';
import type { SearchShards } from '../search/search-shards.js';
import { PhotoAnalysis } from '../services/analysis.js';
import { calibrationOf } from '../services/calibration.js';
import { sightingWriter } from '../services/camera-sightings.js';
import { PhotoSource } from '../services/photo-source.js';
import type { EmbeddingMigration } from '../services/reembed.js';
import { cameraOptions, serve, serviceVersion } from './serve.js';
import { openStores } from './stores.js';
import { expireThumbnails, maintainSightingPartitions, pruneIdempotencyKeys } from './upkeep.js';

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
    calibration,
    engine,
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
