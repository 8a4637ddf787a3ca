/**
 * Stored photos as clients read them back (GET /v0/photo/<hash>/): the bytes
 * as uploaded, with the content type detected when they were stored.
 */
import type { PhotoStore } from '../db/photos.js';
import { notFound } from '../errors.js';

export interface PhotoDeps {
  photos: PhotoStore;
}

/** The photo stored under `hash`; NOT_FOUND when there is none (or it was deleted meanwhile). */
export async function storedPhoto(deps: PhotoDeps, hash: string): Promise<{ bytes: Buffer; contentType: string }> {
  const info = await deps.photos.info(hash);
  if (!info) throw notFound(`No photo ${hash}`);
  try {
    return { bytes: await deps.photos.read(hash), contentType: info.contentType };
  } catch (err) {
    // Deleted between the two reads.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw notFound(`No photo ${hash}`);
    throw err;
  }
}
