/**
 * Every route of the service, registered in one place.
 */
import { RouteRegistry } from '../http/registry.js';
import type { Engine } from '../native/engine.js';
import { FaceService } from '../services/faces.js';
import type { PhotoSource } from '../services/photo-source.js';
import { registerDetect } from './detect.js';
import { registerDocs } from './docs.js';
import { registerHealth } from './health.js';
import { registerVerify } from './verify.js';
import type { FaceStore } from '../db/face-store.js';
import { registerFace } from './face.js';
import { registerGalleries } from './galleries.js';
import { registerListings } from './listings.js';
import { registerPhoto } from './photo.js';
import { registerIdentify } from './identify.js';
import type { FaceIndex } from '../native/face-index.js';
import type { HistoryStore } from '../db/history-store.js';
import { registerHistory } from './history.js';
import { registerPersons } from './persons.js';
import type { EmbeddingMigration } from '../services/reembed.js';

export interface RouteDeps {
  engine: Engine;
  photos: PhotoSource;
  serviceVersion: string;
  /** The face database; without it the database routes are not served (engine-only deployments, tests). */
  store?: FaceStore;
  /** Base of links to this service (photo URLs); the request's Host when absent. */
  publicUrl?: string;
  /** The search shards following `store`; identify is served with both. */
  index?: FaceIndex;
  /** Re-embedding of faces stored by another recogniser, shown by /health. */
  migration?: EmbeddingMigration;
  identify?: { strict: boolean; maxN: number };
  /** Camera history, served with `store` and `index`. */
  history?: HistoryStore;
  /** Longer side of sighting thumbnails, in pixels. */
  thumbnailSize?: number;
  /** Enrolment refuses detected faces below this quality (0 or absent: all accepted). */
  minQuality?: number;
}

export function buildRegistry(deps: RouteDeps): RouteRegistry {
  const registry = new RouteRegistry();
  const faces = new FaceService(deps.engine, deps.photos);
  registerDetect(registry, faces);
  registerVerify(registry, faces);
  if (deps.store) {
    const { store, index, history, publicUrl } = deps;
    registerListings(registry, store, publicUrl);
    registerGalleries(registry, store);
    registerPhoto(registry, store);
    if (!index || !history) throw new Error('the face database routes need the search index and the history store');
    const sightings = { history, thumbnailSize: deps.thumbnailSize ?? 160 };
    registerFace(registry, { faces, store, index, sightings, publicUrl, minQuality: deps.minQuality ?? 0 });
    registerIdentify(registry, {
      faces,
      store,
      index,
      sightings,
      publicUrl,
      strict: deps.identify?.strict ?? false,
      maxN: deps.identify?.maxN ?? 100,
    });
    registerHistory(registry, history, publicUrl);
    registerPersons(registry, { store, history, publicUrl });
  }
  registerHealth(registry, deps.engine, deps.index, deps.migration);
  registerDocs(registry, {
    title: 'Face recognition service',
    serviceVersion: deps.serviceVersion,
    description:
      'Face detection, verification and identification over HTTP/JSON. Photos are uploaded (multipart/form-data) ' +
      'or given as http(s) URLs. Bounding boxes are returned with keys in the order x1, y1, x2, y2.',
  });
  return registry;
}
