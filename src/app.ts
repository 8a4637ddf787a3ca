/**
 * Assembles the HTTP service from configuration, an engine and a token
 * verifier. main.ts uses it with the native engine; tests use it with port 0
 * and an engine of their own.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { AnyTokenVerifier, StaticTokenVerifier, type TokenVerifier } from './auth.js';
import { findProjectRoot, type Config } from './config.js';
import type { Database } from './db/client.js';
import { FaceStore } from './db/faces.js';
import { GalleryStore } from './db/galleries.js';
import { HistoryStore } from './db/history-store.js';
import { PhotoBlobs, PhotoStore } from './db/photos.js';
import { ReembedStore } from './db/reembed-store.js';
import { DbTokenVerifier } from './db/tokens.js';
import { listen } from './http/server.js';
import { log as rootLog, type Logger } from './log.js';
import { ServiceMetrics } from './metrics/service-metrics.js';
import type { Engine } from './native/engine.js';
import { openFaceIndex } from './native/face-index.js';
import { buildRegistry, type DatabaseRoutes } from './routes/index.js';
import { useCalibration } from './services/calibration.js';
import { discardForeignSnapshots, IndexSync } from './services/index-sync.js';
import { INDEX_WAIT_MS, IndexWrites } from './services/index-writes.js';
import { PhotoSource } from './services/photo-source.js';
import { duringMigration, EmbeddingMigration } from './services/reembed.js';

export interface StartOptions {
  config: Config;
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
  /** The follower keeping the search shards in step with the database (absent without `db`). */
  sync?: IndexSync;
  /** Re-embedding of faces stored by another recogniser; absent when there are none. */
  migration?: EmbeddingMigration;
  /** What GET /metrics serves. */
  metrics: ServiceMetrics;
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

const THUMBNAIL_SWEEP_MS = 60 * 60_000;

/** Deletes expired sighting thumbnails now and then hourly; the timer does not keep the process alive. */
function expireThumbnails(history: HistoryStore, days: number, log: Logger): NodeJS.Timeout {
  const sweep = () =>
    history.expireThumbnails(days * 86_400).then(
      (n) => n > 0 && log.info({ thumbnails: n, days }, 'expired sighting thumbnails'),
      (err) => log.warn({ err }, 'thumbnail expiry failed'),
    );
  void sweep();
  const timer = setInterval(sweep, THUMBNAIL_SWEEP_MS);
  timer.unref();
  return timer;
}

export async function startServer({ config, engine, db, verifiers = [], indexWaitMs = INDEX_WAIT_MS, log = rootLog }: StartOptions): Promise<RunningServer> {
  // Confidence and threshold presets are measured per recogniser: refuse to serve uncalibrated scores.
  useCalibration(engine.info().recognizer);
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
  const { recognizer, dim } = engine.info();
  const dbTokens = db ? new DbTokenVerifier(db.sql, undefined, { log }) : undefined;
  let sync: IndexSync | undefined;
  let migration: EmbeddingMigration | undefined;
  let database: DatabaseRoutes | undefined;
  if (db) {
    const photos = new PhotoStore(db.sql, new PhotoBlobs(path.join(config.dataDir, 'photos')), log);
    const store = new FaceStore(db.sql, photos, { model: recognizer, stream: db.stream });
    const indexDir = path.join(config.dataDir, 'index');
    await discardForeignSnapshots(indexDir, recognizer, log);
    const index = await openFaceIndex({
      dir: indexDir,
      shards: config.index.shards,
      dims: dim,
      scalar: config.index.scalar,
      threads: config.index.threads,
      keepExact: config.index.exactCopies,
    });
    metrics.watchStore(index, db);
    try {
      sync = await IndexSync.start({
        sql: db.sql,
        index,
        model: recognizer,
        dims: dim,
        log,
        snapshotSeconds: config.index.snapshotSeconds,
        snapshotChanges: config.index.snapshotChanges,
      });
    } catch (err) {
      index.close();
      throw err;
    }
    const follower = sync;
    try {
      // Decided before serving, so no answer counts the shards as live while faces are pending.
      migration = await EmbeddingMigration.prepare({
        store: new ReembedStore(db.sql),
        readPhoto: (hash) => photos.read(hash),
        engine,
        caughtUp: (position) => follower.caughtUp(position),
        log,
      });
    } catch (err) {
      await follower.stop();
      throw err;
    }
    database = {
      store,
      photos,
      galleries: new GalleryStore(db.sql, photos),
      history: new HistoryStore(db.sql, { sightings: config.history.friendSightings, windowS: config.history.friendWindowS }, db.stream),
      // Identify sees the shards through the migration (none live while faces are pending) ...
      index: migration ? duringMigration(index, migration) : index,
      // ... writes see them as they are: a face stored during a migration is searchable at once.
      writes: new IndexWrites(follower, index, log, indexWaitMs),
      rebuildShard: (k) => follower.rebuild(k),
    };
  }
  const history = database?.history;
  const expiry = history && config.history.thumbnailRetentionDays > 0 ? expireThumbnails(history, config.history.thumbnailRetentionDays, log) : undefined;
  const registry = buildRegistry({
    engine,
    photos: photoSource,
    serviceVersion: serviceVersion(),
    database,
    publicUrl: config.publicUrl,
    migration,
    identify: config.identify,
    thumbnailSize: config.history.thumbnailSize,
    minQuality: config.minQuality,
    metrics,
  });
  const operatorVerifier = new StaticTokenVerifier(config.token);
  const verifier = new AnyTokenVerifier([operatorVerifier, ...(dbTokens ? [dbTokens] : []), ...verifiers]);
  const server = await listen({
    host: config.host,
    port: config.port,
    registry,
    verifier,
    operatorVerifier,
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
  });
  migration?.start();
  let closing: Promise<void> | undefined;
  return {
    port: server.port,
    store: database?.store,
    photos: database?.photos,
    sync,
    migration,
    metrics,
    close() {
      closing ??= (async () => {
        if (expiry) clearInterval(expiry);
        await server.close();
        // Before the follower and the engine, which the batch in flight still uses.
        await migration?.stop();
        // After the last request, so the snapshot covers every answered write.
        await sync?.stop();
        metrics.close();
        engine.close();
        await dbTokens?.close();
      })();
      return closing;
    },
  };
}
