/**
 * Every route of the service, registered in one place.
 */
import { RouteRegistry } from '../http/registry.js';
import type { ServiceMetrics } from '../metrics/service-metrics.js';
import type { SearchShards } from '../search/search-shards.js';
import type { ShardControl } from '../search/shard-control.js';
import type { EnrolDeps } from '../services/enrol.js';
import type { FaceChangeDeps } from '../services/face-changes.js';
import type { HealthDeps } from '../services/health.js';
import { PhotoAnalysis, type Engine } from '../services/analysis.js';
import type { Calibration } from '../services/calibration.js';
import type { PersonDeps } from '../services/persons.js';
import type { PhotoDeps } from '../services/photos.js';
import type { PhotoSource } from '../services/photo-source.js';
import type { EmbeddingMigration } from '../services/reembed.js';
import type { AuditLog, TenantAdminDeps } from '../services/tenants.js';
import { registerDetect } from './detect.js';
import { registerDocs } from './docs.js';
import { registerFace } from './face.js';
import { registerGalleries } from './galleries.js';
import { registerHealth } from './health.js';
import { registerMetrics } from './metrics.js';
import { registerHistory } from './history.js';
import { registerIdentify } from './identify.js';
import { registerListings } from './listings.js';
import { registerPersons } from './persons.js';
import { registerPhoto } from './photo.js';
import { registerVerify } from './verify.js';
import { registerShardsControl, registerShardsReport } from './shards-admin.js';
import { registerShardServer, type ShardServerDeps } from './shard.js';
import { registerTenantsAdmin } from './tenants-admin.js';
import type { TenantId } from '../auth.js';

/**
 * The face database as the routes' services take it (its stores, and how
 * writes wait for the search index); all of it or none.
 */
export interface DatabaseRoutes extends FaceChangeDeps, PersonDeps, PhotoDeps, Omit<TenantAdminDeps, 'writes'> {
  /** The search shards as identify and /health see them. */
  index: SearchShards;
  /** The shards held in this process and their controls (absent on an API node, which holds none). */
  control?: ShardControl;
  /** Idempotency keys of face add. */
  idempotency: EnrolDeps['idempotency'];
  /** Strangers grouped into persons (FACE_ROLE all). */
  grouping?: EnrolDeps['grouping'];
}

/** What the database routes are configured with; the service's configuration declares each default. */
export interface StoreRouteSettings {
  identify: { strict: boolean; maxN: number };
  /** Longer side of sighting thumbnails, in pixels. */
  thumbnailSize: number;
  /** Enrolment refuses detected faces below this quality (0: all accepted). */
  minQuality: number;
}

export interface RouteDeps {
  engine: Engine;
  /** The engine's recogniser's calibration (calibrationOf): what its similarities mean as confidences. */
  calibration: Calibration;
  photos: PhotoSource;
  serviceVersion: string;
  /** The face database and its routes' settings; without it the database routes are not served (engine-only deployments, tests). */
  database?: { stores: DatabaseRoutes; settings: StoreRouteSettings };
  /** Base of links to this service (photo URLs); the request's Host when absent. */
  publicUrl?: string;
  /** Re-embedding of faces stored by another recogniser, shown by /health. */
  migration?: EmbeddingMigration;
  /** Which database server this node writes to, shown by /health. */
  writer?: HealthDeps['writer'];
  /** Served at /metrics when given. */
  metrics?: ServiceMetrics;
  /** FACE_ROLE, shown by /health. */
  role?: 'all' | 'api';
  /** The cameras this node reads, shown by /health. */
  cameras?: HealthDeps['cameras'];
}

export function buildRegistry(deps: RouteDeps): RouteRegistry {
  const registry = new RouteRegistry();
  const faces = new PhotoAnalysis(deps.engine, deps.photos, deps.calibration);
  registerDetect(registry, faces);
  registerVerify(registry, faces);
  if (deps.database) {
    const db = deps.database.stores;
    const publicUrl = deps.publicUrl;
    const { thumbnailSize, minQuality, identify } = deps.database.settings;
    registerListings(registry, { ...db, publicUrl });
    registerGalleries(registry, db);
    registerPhoto(registry, db);
    registerFace(registry, { ...db, faces, thumbnailSize, minQuality, publicUrl });
    registerIdentify(registry, {
      ...db,
      faces,
      thumbnailSize,
      publicUrl,
      strict: identify.strict,
      maxN: identify.maxN,
    });
    registerHistory(registry, { ...db, faces, publicUrl });
    registerPersons(registry, { ...db, publicUrl });
    registerShardsReport(registry, db.index);
    if (db.control) registerShardsControl(registry, db.control, db.audit);
    registerTenantsAdmin(registry, db);
  }
  registerHealth(registry, {
    role: deps.role ?? 'all',
    engine: deps.engine,
    index: deps.database?.stores.index,
    migration: deps.migration,
    writer: deps.writer,
    cameras: deps.cameras,
    tenantFaces: deps.database ? tenantFaces(deps.database.stores.tenants) : undefined,
  });
  if (deps.metrics) registerMetrics(registry, deps.metrics);
  registerDocs(registry, {
    title: 'Face recognition service',
    serviceVersion: deps.serviceVersion,
    description:
      'Face detection, verification and identification over HTTP/JSON. Photos are uploaded (multipart/form-data) ' +
      'or given as http(s) URLs. Bounding boxes are returned with keys in the order x1, y1, x2, y2.',
  });
  return registry;
}

/** The faces of one tenant, as its administration counts them. */
const tenantFaces = (tenants: DatabaseRoutes['tenants']) => async (tenant: TenantId) => (await tenants.list({ tenant }))[0]?.faces ?? 0;

export interface ShardRouteDeps extends ShardServerDeps {
  /** The held shards as /health and /v0/admin/shards report them. */
  view: SearchShards;
  control: ShardControl;
  /** Where shard controls are recorded. */
  audit: AuditLog;
  metrics: ServiceMetrics;
  serviceVersion: string;
  writer: HealthDeps['writer'];
}

/** The routes of a shard server (FACE_ROLE=shard): no photos, no face database routes. */
export function buildShardRegistry(deps: ShardRouteDeps): RouteRegistry {
  const registry = new RouteRegistry();
  registerShardServer(registry, deps);
  registerShardsReport(registry, deps.view);
  registerShardsControl(registry, deps.control, deps.audit);
  return withNodeRoutes(registry, { role: 'shard', index: deps.view, writer: deps.writer }, deps.metrics, {
    title: 'Face recognition service: shard server',
    serviceVersion: deps.serviceVersion,
    description: 'A shard server of a face recognition cluster: it holds some search shards, follows the change log for them, and answers API nodes.',
  });
}

/** What every node other than an API node serves besides its own routes: /health, /metrics and its documentation. */
function withNodeRoutes(registry: RouteRegistry, health: HealthDeps, metrics: ServiceMetrics, docs: Parameters<typeof registerDocs>[1]): RouteRegistry {
  registerHealth(registry, health);
  registerMetrics(registry, metrics);
  registerDocs(registry, docs);
  return registry;
}

export interface CameraRouteDeps {
  engine: Engine;
  cameras: NonNullable<HealthDeps['cameras']>;
  metrics: ServiceMetrics;
  serviceVersion: string;
}

/** The routes of a camera worker (FACE_ROLE=camera): its health, with the cameras' states, and metrics. */
export function buildCameraRegistry(deps: CameraRouteDeps): RouteRegistry {
  return withNodeRoutes(new RouteRegistry(), { role: 'camera', engine: deps.engine, cameras: deps.cameras }, deps.metrics, {
    title: 'Face recognition service: camera worker',
    serviceVersion: deps.serviceVersion,
    description: 'A camera worker: it reads camera streams, follows the faces in view and writes one sighting per person passing by to an API node.',
  });
}
