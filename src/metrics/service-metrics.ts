/**
 * The service's Prometheus metrics (prom-client), and the one place that
 * reads their sources.
 *
 * Counters and histograms are fed as things happen: the HTTP server reports
 * each finished request, the photo source each URL fetch, and the engine
 * records every model run, which is drained into the histograms here at each
 * scrape and every few seconds (the engine's buffer is bounded, so an
 * unscraped service keeps only the latest runs). Gauges (requests in flight,
 * engine queues, shards, database connections) are read when scraped, so a
 * service nobody scrapes does no metrics work.
 *
 * Each service instance has its own registry rather than prom-client's global
 * one, so several servers in one process (tests, benchmarks) never mix their
 * numbers.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Cameras } from '../camera/cameras.js';
import { poolUsage, type Database } from '../db/client.js';
import { lastPosition } from '../db/change-log.js';
import type { ReadReplica } from '../db/read-replica.js';
import type { WriterWatch } from '../db/writer.js';
import type { ServerState } from '../http/registry.js';
import type { FinishedRequest } from '../http/server.js';
import type { Logger } from '../log.js';
import type { Engine } from '../native/engine.js';
import type { FetchOutcome } from '../services/photo-source.js';
import type { SearchShards, ShardView } from '../search/search-shards.js';

export interface MetricsSources {
  /** Absent on a shard server, which runs no models. */
  engine?: Engine;
  log: Logger;
}

const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

const SHARD_STATES: readonly ShardView['state'][] = ['loading', 'rebuilding', 'live', 'failed', 'offline', 'unreachable'];

/** How often model runs are moved from the engine into the histograms between scrapes. */
const DRAIN_MS = 5_000;

/** A scrape gives up on the database after this long and leaves its gauges as they were. */
const DB_SCRAPE_MS = 2_000;

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const INFERENCE_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64];

export class ServiceMetrics {
  readonly registry = new Registry();
  private readonly models: string[];
  private readonly drainTimer: NodeJS.Timeout;
  private runsDropped = 0;
  private store?: { index: SearchShards; db: Database };
  private replica?: ReadReplica;
  private writer?: Pick<WriterWatch, 'current'>;
  private cameras?: Pick<Cameras, 'states' | 'lags'>;
  /** Bounded: methods, route patterns and statuses are all few. */
  private readonly series = new Map<string, { count: Counter.Internal; latency: Histogram.Internal<string> }>();

  private readonly requests = new Counter({
    name: 'face_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status (499: the client went away first).',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [this.registry],
  });
  private readonly latency = new Histogram({
    name: 'face_http_request_duration_seconds',
    help: 'Time from the request line to the last byte written, by method and route pattern.',
    labelNames: ['method', 'route'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  private readonly unavailable = new Counter({
    name: 'face_http_unavailable_total',
    help: 'Answers with status 503, by error code (OVERLOADED, DEADLINE_EXCEEDED, SERVICE_UNAVAILABLE, ...).',
    labelNames: ['code'] as const,
    registers: [this.registry],
  });
  private readonly inflight = new Gauge({
    name: 'face_http_inflight_requests',
    help: 'Requests in progress that hold an admission slot, by class (engine: photo routes; light: the rest).',
    labelNames: ['class'] as const,
    registers: [this.registry],
  });
  private readonly inflightLimit = new Gauge({
    name: 'face_http_inflight_limit',
    help: 'Admission slots per class; requests beyond them are answered 503 OVERLOADED.',
    labelNames: ['class'] as const,
    registers: [this.registry],
  });
  private readonly bodyBytes = new Gauge({
    name: 'face_http_body_bytes',
    help: 'Request body bytes held now, all requests together.',
    registers: [this.registry],
  });
  private readonly bodyBytesLimit = new Gauge({
    name: 'face_http_body_bytes_limit',
    help: 'Request body bytes that may be held at once (FACE_MAX_BODY_MEMORY).',
    registers: [this.registry],
  });
  private readonly queueDepth = new Gauge({
    name: 'face_engine_queue_depth',
    help: 'Work waiting in the engine, by stage: light and heavy (photos waiting for a pipeline thread), detector (inputs), faces (crops for the recogniser and attribute models).',
    labelNames: ['stage'] as const,
    registers: [this.registry],
  });
  private readonly batchSize = new Histogram({
    name: 'face_engine_batch_size',
    help: 'Inputs per model run, by model.',
    labelNames: ['model'] as const,
    buckets: BATCH_BUCKETS,
    registers: [this.registry],
  });
  private readonly inference = new Histogram({
    name: 'face_engine_inference_seconds',
    help: 'Time of one model run (input preparation and ONNX Runtime), by model.',
    labelNames: ['model'] as const,
    buckets: INFERENCE_BUCKETS,
    registers: [this.registry],
  });
  private readonly runsLost = new Counter({
    name: 'face_engine_runs_unrecorded_total',
    help: 'Model runs left out of the two histograms above because the engine buffer overflowed between drains.',
    registers: [this.registry],
  });
  private readonly shardFaces = new Gauge({
    name: 'face_index_faces',
    help: 'Faces held by each search shard.',
    labelNames: ['shard'] as const,
    registers: [this.registry],
  });
  private readonly shardState = new Gauge({
    name: 'face_index_shard_state',
    help: 'Search shard state: 1 for the state the shard is in, 0 for the others.',
    labelNames: ['shard', 'state'] as const,
    registers: [this.registry],
  });
  private readonly shardLag = new Gauge({
    name: 'face_index_lag_positions',
    help: 'Change-log positions written but not yet reflected by each shard (0: caught up).',
    labelNames: ['shard'] as const,
    registers: [this.registry],
  });
  private readonly shardMemory = new Gauge({
    name: 'face_index_memory_bytes',
    help: 'Memory held by each search shard.',
    labelNames: ['shard'] as const,
    registers: [this.registry],
  });
  private readonly dbConnections = new Gauge({
    name: 'face_db_connections',
    help: 'PostgreSQL connections of each pool, by state as the server reports it (active, idle, idle in transaction, ...).',
    labelNames: ['pool', 'state'] as const,
    registers: [this.registry],
  });
  private readonly dbPoolSize = new Gauge({
    name: 'face_db_pool_size',
    help: 'Most connections each pool opens; a query beyond them waits for one.',
    labelNames: ['pool'] as const,
    registers: [this.registry],
  });
  private readonly dbScrapeFailures = new Counter({
    name: 'face_db_scrape_failures_total',
    help: 'Scrapes whose database gauges (connections, index lag) could not be read in time and kept their previous values.',
    registers: [this.registry],
  });
  private readonly replicaLag = new Gauge({
    name: 'face_db_replica_lag_seconds',
    help: 'Lag of the read replica (DATABASE_READ_URL) at its last measurement; NaN while it cannot be measured.',
    registers: [this.registry],
  });
  private readonly replicaInUse = new Gauge({
    name: 'face_db_replica_in_use',
    help: '1 while read-only routes read from the replica, 0 while they fall back to the primary (lagging past FACE_READ_MAX_LAG_MS, or unreachable).',
    registers: [this.registry],
  });
  private readonly replicaPrimaryLost = new Gauge({
    name: 'face_db_replica_primary_lost',
    help: '1 while the primary does not answer and the replica does (a failover under way): every read, faces by id and tokens included, is on the replica.',
    registers: [this.registry],
  });
  private readonly writerFailovers = new Gauge({
    name: 'face_db_failovers',
    help: 'Times the database server this node writes to, or its timeline, changed since start: failovers seen by this node.',
    registers: [this.registry],
  });
  private readonly writerFailedChecks = new Gauge({
    name: 'face_db_writer_failed_checks',
    help: 'Checks of the database server (every 2 s) that got no answer since start: the database unreachable.',
    registers: [this.registry],
  });
  private readonly writerReadOnly = new Gauge({
    name: 'face_db_writer_read_only',
    help: '1 while the server this node writes to is a replica (writes fail): a failover in progress.',
    registers: [this.registry],
  });
  private readonly replicaFallbacks = new Gauge({
    name: 'face_db_replica_fallbacks',
    help: 'Times reads moved from the replica to the primary since start.',
    registers: [this.registry],
  });
  // Cameras: their own counts, read at each scrape (so gauges, growing like counters).
  private readonly cameraFrames = new Gauge({
    name: 'face_camera_frames',
    help: 'Frames of each camera since this process started: decoded, processed by the detector, dropped (a live stream outrunning it)',
    labelNames: ['cam', 'kind'],
    registers: [this.registry],
  });
  private readonly cameraTracks = new Gauge({ name: 'face_camera_tracks_open', help: 'Faces in view being followed, per camera', labelNames: ['cam'], registers: [this.registry] });
  private readonly cameraSightings = new Gauge({
    name: 'face_camera_sightings',
    help: 'Sightings of each camera since this process started, written or failed',
    labelNames: ['cam', 'outcome'],
    registers: [this.registry],
  });
  private readonly cameraReconnects = new Gauge({ name: 'face_camera_reconnects', help: 'Stream reconnections per camera since this process started', labelNames: ['cam'], registers: [this.registry] });
  private readonly cameraStreaming = new Gauge({ name: 'face_camera_streaming', help: '1 while frames arrive from the camera, 0 while it connects, reconnects or has ended', labelNames: ['cam'], registers: [this.registry] });
  private readonly cameraLag = new Gauge({
    name: 'face_camera_lag_seconds',
    help: "Seconds from a passage's last frame to its sighting written (live cameras, the newest 1,024 passages), by quantile",
    labelNames: ['cam', 'quantile'],
    registers: [this.registry],
  });
  private readonly fetches = new Counter({
    name: 'face_photo_fetch_total',
    help: 'Photo URL fetches, by outcome: ok, bad_url, dns, refused_address, http_status, redirects, too_large, timeout, network, cancelled.',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  constructor(private readonly sources: MetricsSources) {
    collectDefaultMetrics({ register: this.registry });
    this.models = sources.engine?.info().models.map((m) => m.id) ?? [];
    this.drainTimer = setInterval(() => this.drainEngine(), DRAIN_MS);
    this.drainTimer.unref();
  }

  /** Adds the search shards (held here, or on shard servers) and the database they follow (services with a database). */
  watchStore(index: SearchShards, db: Database): void {
    this.store = { index, db };
  }

  /** Adds the read replica's lag and whether reads use it. */
  watchReplica(replica: ReadReplica): void {
    this.replica = replica;
  }

  /** Adds the failovers this node saw and whether its database answers. */
  watchWriter(writer: Pick<WriterWatch, 'current'>): void {
    this.writer = writer;
  }

  watchCameras(cameras: Pick<Cameras, 'states' | 'lags'>): void {
    this.cameras = cameras;
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  requestFinished(r: FinishedRequest): void {
    // A client may send any method token; label values must stay few.
    const method = METHODS.has(r.method) ? r.method : 'OTHER';
    // Label children are looked up once per series: this runs on every request.
    const key = `${method} ${r.route} ${r.status}`;
    let series = this.series.get(key);
    if (!series) {
      series = { count: this.requests.labels(method, r.route, String(r.status)), latency: this.latency.labels(method, r.route) };
      this.series.set(key, series);
    }
    series.count.inc();
    series.latency.observe(r.seconds);
    if (r.status === 503) this.unavailable.inc({ code: r.code ?? 'SERVICE_UNAVAILABLE' });
  }

  photoFetched(outcome: FetchOutcome): void {
    this.fetches.inc({ outcome });
  }

  /** The exposition text, with every gauge read now. */
  async render(server: ServerState): Promise<string> {
    this.inflight.set({ class: 'light' }, server.inflight);
    this.inflight.set({ class: 'engine' }, server.engineInflight);
    this.inflightLimit.set({ class: 'light' }, server.maxInflight);
    this.inflightLimit.set({ class: 'engine' }, server.maxEngineInflight);
    this.bodyBytes.set(server.bodyBytes);
    this.bodyBytesLimit.set(server.maxBodyBytes);
    this.drainEngine();
    this.readReplica();
    this.readWriter();
    this.readCameras();
    await this.readStore();
    return this.registry.metrics();
  }

  close(): void {
    clearInterval(this.drainTimer);
  }

  private drainEngine(): void {
    if (!this.sources.engine) return;
    let stats;
    try {
      stats = this.sources.engine.stats();
    } catch {
      return; // the engine is closed (shutting down): nothing more to count
    }
    this.queueDepth.set({ stage: 'light' }, stats.queuedLight);
    this.queueDepth.set({ stage: 'heavy' }, stats.queuedHeavy);
    this.queueDepth.set({ stage: 'detector' }, stats.queuedDetector);
    this.queueDepth.set({ stage: 'faces' }, stats.queuedFaces);
    const runs = stats.runs;
    for (let i = 0; i + 2 < runs.length; i += 3) {
      const model = this.models[runs[i]] ?? `model-${runs[i]}`;
      this.batchSize.observe({ model }, runs[i + 1]);
      this.inference.observe({ model }, runs[i + 2]);
    }
    if (stats.runsDropped > this.runsDropped) {
      this.runsLost.inc(stats.runsDropped - this.runsDropped);
      this.runsDropped = stats.runsDropped;
    }
  }

  private readCameras(): void {
    if (!this.cameras) return;
    for (const c of this.cameras.states()) {
      const cam = c.cam_id;
      this.cameraFrames.set({ cam, kind: 'decoded' }, c.frames_decoded);
      this.cameraFrames.set({ cam, kind: 'processed' }, c.frames_processed);
      this.cameraFrames.set({ cam, kind: 'dropped' }, c.frames_dropped);
      this.cameraTracks.set({ cam }, c.tracks_open);
      this.cameraSightings.set({ cam, outcome: 'written' }, c.sightings_written);
      this.cameraSightings.set({ cam, outcome: 'failed' }, c.sightings_failed);
      this.cameraReconnects.set({ cam }, c.reconnects);
      this.cameraStreaming.set({ cam }, c.state === 'streaming' ? 1 : 0);
    }
    for (const { camId, seconds } of this.cameras.lags()) {
      if (seconds.length === 0) continue;
      const sorted = [...seconds].sort((a, b) => a - b);
      for (const q of [0.5, 0.99]) this.cameraLag.set({ cam: camId, quantile: String(q) }, sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]);
    }
  }

  private readWriter(): void {
    if (!this.writer) return;
    const w = this.writer.current();
    this.writerFailovers.set(w.failovers);
    this.writerFailedChecks.set(w.failedChecks);
    this.writerReadOnly.set(w.readOnly ? 1 : 0);
  }

  private readReplica(): void {
    if (!this.replica) return;
    const state = this.replica.state();
    this.replicaLag.set(state.lagMs === undefined ? NaN : state.lagMs / 1000);
    this.replicaInUse.set(state.usingReplica ? 1 : 0);
    this.replicaPrimaryLost.set(state.primaryLost ? 1 : 0);
    this.replicaFallbacks.set(state.fallbacks);
  }

  /** Shards and database gauges. The database is asked on the listings pool, with a deadline, so a saturated main pool cannot stall a scrape. */
  private async readStore(): Promise<void> {
    if (!this.store) return;
    const { index, db } = this.store;
    const shards = index.shards();
    for (const s of shards) {
      const shard = String(s.shard);
      this.shardFaces.set({ shard }, s.size);
      this.shardMemory.set({ shard }, s.memoryBytes);
      for (const state of SHARD_STATES) this.shardState.set({ shard, state }, s.state === state ? 1 : 0);
    }
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`database did not answer within ${DB_SCRAPE_MS} ms`)), DB_SCRAPE_MS);
    });
    try {
      // One after the other, so the listings connection the first takes is among those the second counts.
      const read = async () => [await lastPosition(db.stream), await poolUsage(db)] as const;
      const [head, pools] = await Promise.race([read(), deadline]);
      for (const s of shards) this.shardLag.set({ shard: String(s.shard) }, Math.max(0, head - s.position));
      this.dbConnections.reset();
      for (const p of pools) {
        this.dbPoolSize.set({ pool: p.pool }, p.max);
        for (const [state, n] of Object.entries(p.connections)) this.dbConnections.set({ pool: p.pool, state }, n);
      }
    } catch (err) {
      this.dbScrapeFailures.inc();
      this.sources.log.warn({ err }, 'metrics: database gauges not refreshed');
    } finally {
      clearTimeout(timer);
    }
  }
}
