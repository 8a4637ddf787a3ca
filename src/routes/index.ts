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

export interface RouteDeps {
  engine: Engine;
  photos: PhotoSource;
  serviceVersion: string;
}

export function buildRegistry(deps: RouteDeps): RouteRegistry {
  const registry = new RouteRegistry();
  const faces = new FaceService(deps.engine, deps.photos);
  registerDetect(registry, faces);
  registerVerify(registry, faces);
  registerHealth(registry, deps.engine);
  registerDocs(registry, {
    title: 'Face recognition service',
    serviceVersion: deps.serviceVersion,
    description:
      'Face detection, verification and identification over HTTP/JSON. Photos are uploaded (multipart/form-data) ' +
      'or given as http(s) URLs. Bounding boxes are returned with keys in the order x1, y1, x2, y2.',
  });
  return registry;
}
