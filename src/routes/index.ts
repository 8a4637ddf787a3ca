/**
 * Every route of the service, registered in one place.
 */
import { RouteRegistry } from '../http/registry.js';
import type { FaceStore } from '../db/faces.js';
import type { GalleryStore } from '../db/galleries.js';
import type { HistoryStore } from '../db/history-store.js';
import type { PhotoStore } from '../db/photos.js';
import type { Engine } from '../native/engine.js';
import type { FaceIndex } from '../native/face-index.js';
import { FaceService } from '../services/faces.js';
import type { IndexWrites } from '../services/index-writes.js';
import type { PhotoSource } from '../services/photo-source.js';
import type { EmbeddingMigration } from '../services/reembed.js';
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
import type { ServiceMetrics } from '../metrics/service-metrics.js';

/** The face database as the routes use it; all of it or none. */
export interface DatabaseRoutes {
  store: FaceStore;
  galleries: GalleryStore;
  photos: PhotoStore;
  history: HistoryStore;
  /** The search shards as identify and /health see them. */
  index: FaceIndex;
  /** How writes wait for the search index. */
  writes: IndexWrites;
  /** Takes a search shard out of service and rebuilds it from its snapshot and the change log (or the database). */
  rebuildShard(k: number): Promise<void>;
}

export interface RouteDeps {
  engine: Engine;
  photos: PhotoSource;
  serviceVersion: string;
  /** The face database; without it the database routes are not served (engine-only deployments, tests). */
  database?: DatabaseRoutes;
  /** Base of links to this service (photo URLs); the request's Host when absent. */
  publicUrl?: string;
  /** Re-embedding of faces stored by another recogniser, shown by /health. */
  migration?: EmbeddingMigration;
  identify?: { strict: boolean; maxN: number };
  /** Longer side of sighting thumbnails, in pixels. */
  thumbnailSize?: number;
  /** Enrolment refuses detected faces below this quality (0 or absent: all accepted). */
  minQuality?: number;
  /** Served at /metrics when given. */
  metrics?: ServiceMetrics;
}

export function buildRegistry(deps: RouteDeps): RouteRegistry {
  const registry = new RouteRegistry();
  const faces = new FaceService(deps.engine, deps.photos);
  registerDetect(registry, faces);
  registerVerify(registry, faces);
  const db = deps.database;
  if (db) {
    const { store, history, publicUrl } = { ...db, publicUrl: deps.publicUrl };
    const thumbnailSize = deps.thumbnailSize ?? 160;
    registerListings(registry, store, publicUrl);
    registerGalleries(registry, db);
    registerPhoto(registry, db.photos);
    registerFace(registry, { ...db, faces, thumbnailSize, minQuality: deps.minQuality ?? 0, publicUrl });
    registerIdentify(registry, {
      ...db,
      faces,
      thumbnailSize,
      publicUrl,
      strict: deps.identify?.strict ?? false,
      maxN: deps.identify?.maxN ?? 100,
    });
    registerHistory(registry, history, publicUrl);
    registerPersons(registry, { store, history, publicUrl });
  }
  registerHealth(registry, deps.engine, db?.index, deps.migration);
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
