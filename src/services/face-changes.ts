/**
 * The writes to stored faces besides enrolment: changing a face (PUT), deleting
 * one, deleting a gallery with its faces. Each commits, then waits for the
 * search index like enrolment does (search/index-writes.ts), so an answered
 * change is what search shows, or the answer says it is not yet. An update
 * must name at least one field to change.
 */
import type { FaceStore, FaceUpdate, Reach, StoredFace } from '../db/faces.js';
import { checkGalleries, type Principal } from '../auth.js';
import { unknownGallery, type GalleryStore } from '../db/galleries.js';
import { DomainError, notFound } from '../errors.js';
import type { IndexLag, IndexWrites } from '../search/index-writes.js';
import { unknownFace } from './face-reads.js';
import { requireHistory } from './sightings.js';

export type { FaceUpdate, GalleryChange } from '../db/faces.js';

export interface FaceChangeDeps {
  store: FaceStore;
  galleries: GalleryStore;
  writes: IndexWrites;
}

/** An update whose every field was left out (an empty body): nothing to change. */
const isEmptyUpdate = (update: FaceUpdate) => Object.values(update).every((v) => v === undefined);

export async function updateFace(deps: FaceChangeDeps, reach: Reach, id: number, update: FaceUpdate): Promise<{ face: StoredFace; indexLag?: IndexLag }> {
  if (isEmptyUpdate(update)) throw new DomainError('BAD_PARAM', 'An update needs at least one field to change');
  const change = update.galleries;
  if (change) checkGalleries(reach, 'add' in change ? change.add : 'del' in change ? change.del : change.set);
  // Persons are the tenant's, not a gallery's (as sightings are).
  if (update.personId !== undefined) requireHistory(reach);
  const written = await deps.store.updateFace(reach, id, update);
  if (!written) throw unknownFace(id);
  // Only a gallery change is logged; it decides where the face can be found.
  const indexLag = await deps.writes.settle(written.position, true, [id]);
  return { face: written.value, ...(indexLag ? { indexLag } : {}) };
}

export async function deleteFace(deps: FaceChangeDeps, reach: Reach, id: number): Promise<{ indexLag?: IndexLag }> {
  const deleted = await deps.store.deleteFace(reach, id);
  if (!deleted) throw unknownFace(id);
  const indexLag = await deps.writes.settle(deleted.position, false, [id]);
  return indexLag ? { indexLag } : {};
}

/** Deletes a gallery of the principal's tenant with its faces; recorded in the audit log. */
export async function deleteGallery(deps: FaceChangeDeps, principal: Principal, name: string): Promise<{ deleted: number; indexLag?: IndexLag }> {
  checkGalleries(principal, [name]);
  const gone = await deps.galleries.delete(principal.tenant, name, principal);
  if (!gone) throw unknownGallery([name], 'gallery');
  // Its faces may be in any shard.
  const indexLag = await deps.writes.settle(gone.position, false);
  return { deleted: gone.deleted, ...(indexLag ? { indexLag } : {}) };
}

/** Deletes every face with this meta (an older API's call); NOT_FOUND when there is none. */
export async function deleteFacesByMeta(deps: FaceChangeDeps, reach: Reach, meta: string): Promise<{ deleted: number; indexLag?: IndexLag }> {
  const gone = await deps.store.deleteByMeta(reach, meta);
  if (!gone) throw notFound(`No face with meta ${JSON.stringify(meta)}`);
  const indexLag = await deps.writes.settle(gone.position, false, gone.ids);
  return { deleted: gone.ids.length, ...(indexLag ? { indexLag } : {}) };
}
