/**
 * Galleries: listing and creating them. Deleting one deletes its faces, a
 * write that waits for the search index: that is face-changes.ts's.
 */
import type { Reach } from '../db/faces.js';
import { checkGalleries } from '../auth.js';
import type { GalleryStore } from '../db/galleries.js';
import { DomainError } from '../errors.js';

export interface GalleryDeps {
  galleries: GalleryStore;
}

/** The galleries within `reach`: default first, then the others sorted. */
export function listGalleries(deps: GalleryDeps, reach: Reach): Promise<string[]> {
  return deps.galleries.list(reach.tenant, reach.galleries);
}

/** Creates the tenant's gallery `name`; an invalid name is BAD_PARAM, an existing one CONFLICT. */
export async function createGallery(deps: GalleryDeps, reach: Reach, name: string): Promise<void> {
  checkGalleries(reach, [name]);
  if (!(await deps.galleries.create(reach.tenant, name))) {
    throw new DomainError('CONFLICT', `Gallery ${name} already exists`, { param: 'gallery' });
  }
}
