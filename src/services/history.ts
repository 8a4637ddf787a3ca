/**
 * Camera history reads: the search of sightings (POST and GET
 * /v0/history/search), streamed newest first, and the thumbnail kept with
 * each sighting.
 */
import type { HistoryFilter, HistoryListing, HistoryPage, HistoryStore } from '../db/history-store.js';
import { notFound } from '../errors.js';

export type { HistoryEvent, HistoryFilter, HistoryListing } from '../db/history-store.js';

export interface HistoryDeps {
  history: HistoryStore;
}

/** Sightings matching every filter given, newest first; one page (with `limit`) or all of them. */
export function searchHistory(deps: HistoryDeps, filter: HistoryFilter, page: HistoryPage): Promise<HistoryListing> {
  return deps.history.search(filter, page);
}

/** The JPEG kept with sighting `id`; NOT_FOUND for an unknown sighting or an expired thumbnail. */
export async function sightingThumbnail(deps: HistoryDeps, id: number): Promise<Buffer> {
  const jpeg = await deps.history.thumbnail(id);
  if (!jpeg) throw notFound(`No history event ${id}`);
  if (jpeg === 'expired') throw notFound(`The thumbnail of history event ${id} has expired`);
  return jpeg;
}
