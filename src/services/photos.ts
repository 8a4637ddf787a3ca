/**
 * Stored photos as clients read them back (GET /v0/photo/<hash>/): the bytes
 * as uploaded, with the content type detected when they were stored.
 */
import type { FaceStore, Reach } from '../db/faces.js';
import type { PhotoStore } from '../db/photos.js';
import { notFound } from '../errors.js';

export interface PhotoDeps {
  photos: PhotoStore;
  store: FaceStore;
}

/**
 * The photo stored under `hash`, when a face within `reach` came from it (photos are shared by
 * content, so another tenant's is answered as one that does not exist); NOT_FOUND otherwise, or
 * when it was deleted meanwhile.
 */
export async function storedPhoto(deps: PhotoDeps, reach: Reach, hash: string): Promise<{ bytes: Buffer; contentType: string }> {
  const info = (await deps.store.hasPhoto(reach, hash)) ? await deps.photos.info(hash) : undefined;
  if (!info) throw notFound(`No photo ${hash}`);
  try {
    return { bytes: await deps.photos.read(hash), contentType: info.contentType };
  } catch (err) {
    // Deleted between the two reads.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw notFound(`No photo ${hash}`);
    throw err;
  }
}
