/**
 * Reading the face database: one face (GET /v0/face/id/<id>/), and the
 * listings (faces by meta, all faces, a gallery's faces, per-meta summaries,
 * each also restricted to one gallery). Listings stream from a database
 * cursor; the routes render them as they come.
 */
import type { FaceFilter, FaceStore, Listing, MetaSummary, Page, StoredFace } from '../db/faces.js';
import { notFound } from '../errors.js';

export type { Listing, MetaSummary, Page, PageLinks, StoredFace } from '../db/faces.js';

export interface FaceReadDeps {
  store: FaceStore;
}

export const unknownFace = (id: number) => notFound(`No face with id ${id}`);

/** The face with `id`; NOT_FOUND when there is none. */
export async function getFace(deps: FaceReadDeps, id: number): Promise<StoredFace> {
  const face = await deps.store.getFace(id);
  if (!face) throw unknownFace(id);
  return face;
}

/** Faces matching `filter` (an unknown gallery is NOT_FOUND), by id, one page or all. */
export function listFaces(deps: FaceReadDeps, filter: FaceFilter, page: Page): Promise<Listing<StoredFace>> {
  return deps.store.listFaces(filter, page);
}

/** One summary per distinct meta (in `gallery`, when given), ordered by the id of its first face. */
export function listMeta(deps: FaceReadDeps, gallery: string | undefined, page: Page): Promise<Listing<MetaSummary>> {
  return deps.store.listMeta({ gallery }, page);
}
