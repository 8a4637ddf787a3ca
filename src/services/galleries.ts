/**
 * Galleries: listing and creating them. Deleting one deletes its faces, a
 * write that waits for the search index: that is face-changes.ts's.
 */
import type { GalleryStore } from '../db/galleries.js';
import { DomainError } from '../errors.js';

export interface GalleryDeps {
  galleries: GalleryStore;
}

/** Every gallery name: default first, then the others sorted. */
export function listGalleries(deps: GalleryDeps): Promise<string[]> {
  return deps.galleries.list();
}

/** Creates gallery `name`; an invalid name is BAD_PARAM, an existing one CONFLICT. */
export async function createGallery(deps: GalleryDeps, name: string): Promise<void> {
  if (!(await deps.galleries.create(name))) {
    throw new DomainError('CONFLICT', `Gallery ${name} already exists`, { param: 'gallery' });
  }
}
