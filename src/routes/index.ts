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
  identify?: { strict: boolean; maxN: number };
}

export function buildRegistry(deps: RouteDeps): RouteRegistry {
  const registry = new RouteRegistry();
  const faces = new FaceService(deps.engine, deps.photos);
  registerDetect(registry, faces);
  registerVerify(registry, faces);
  if (deps.store) {
    registerFace(registry, { faces, store: deps.store, publicUrl: deps.publicUrl });
    registerListings(registry, deps.store, deps.publicUrl);
    registerGalleries(registry, deps.store);
    registerPhoto(registry, deps.store);
    if (deps.index) {
      registerIdentify(registry, {
        faces,
        store: deps.store,
        index: deps.index,
        publicUrl: deps.publicUrl,
        strict: deps.identify?.strict ?? false,
        maxN: deps.identify?.maxN ?? 100,
      });
    }
  }
  registerHealth(registry, deps.engine, deps.index);
  registerDocs(registry, {
    title: 'Face recognition service',
    serviceVersion: deps.serviceVersion,
    description:
      'Face detection, verification and identification over HTTP/JSON. Photos are uploaded (multipart/form-data) ' +
      'or given as http(s) URLs. Bounding boxes are returned with keys in the order x1, y1, x2, y2.',
  });
  return registry;
}
