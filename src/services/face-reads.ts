/**
 * Reading the face database: one face (GET /v0/face/id/<id>/), and the
 * listings (faces by meta, all faces, a gallery's faces, per-meta summaries,
 * each also restricted to one gallery). Listings stream from a database
 * cursor; the routes render them as they come.
 */
import type { FaceFilter, FaceStore, Listing, MetaSummary, Page, Reach, StoredFace } from '../db/faces.js';
import { checkGalleries } from '../auth.js';
import { notFound } from '../errors.js';

export type { Listing, MetaSummary, Page, PageLinks, Reach, StoredFace } from '../db/faces.js';

export interface FaceReadDeps {
  store: FaceStore;
}

export const unknownFace = (id: number) => notFound(`No face with id ${id}`);

/** The face with `id` within `reach`; NOT_FOUND when there is none. */
export async function getFace(deps: FaceReadDeps, reach: Reach, id: number): Promise<StoredFace> {
  const face = await deps.store.getFace(reach, id);
  if (!face) throw unknownFace(id);
  return face;
}

/** Faces within `reach` matching `filter` (an unknown gallery is NOT_FOUND), by id, one page or all. */
export function listFaces(deps: FaceReadDeps, reach: Reach, filter: FaceFilter, page: Page): Promise<Listing<StoredFace>> {
  if (filter.gallery !== undefined) checkGalleries(reach, [filter.gallery]);
  return deps.store.listFaces(reach, filter, page);
}

/** One summary per distinct meta (in `gallery`, when given), ordered by the id of its first face. */
export function listMeta(deps: FaceReadDeps, reach: Reach, gallery: string | undefined, page: Page): Promise<Listing<MetaSummary>> {
  if (gallery !== undefined) checkGalleries(reach, [gallery]);
  return deps.store.listMeta(reach, { gallery }, page);
}
