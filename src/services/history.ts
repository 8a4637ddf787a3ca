/**
 * Camera history reads: the search of sightings (POST and GET
 * /v0/history/search), streamed newest first, by filters or by a face on a
 * photo, and the thumbnail kept with each sighting.
 *
 * By a face: load the photo → analyse it → its subject (or the boxes given)
 * → the stored faces it matches (identify's 1:N decision) and the earlier
 * strangers it matches (grouping's) → their persons → the events of those
 * persons that pass the other filters.
 */
import type { FaceStore, Reach } from '../db/faces.js';
import { searchScope } from '../db/tenants.js';
import type { HistoryFilter, HistoryListing, HistoryPage, HistoryStore } from '../db/history-store.js';
import { notFound } from '../errors.js';
import type { SearchShards } from '../search/search-shards.js';
import { pickRows, selectFaces, type Box, type PhotoAnalysis } from './analysis.js';
import { identifyAccepts, type ThresholdPreset } from './calibration.js';
import type { PhotoInput } from './photo-source.js';
import { requireHistory, strangerPersons, type Grouping } from './sightings.js';

export type { HistoryEvent, HistoryFilter, HistoryListing } from '../db/history-store.js';

export interface HistoryDeps {
  history: HistoryStore;
}

/** What finding a face's persons needs: the photo's analysis, the stored faces and their shards, the strangers. */
export interface FacePersonsDeps {
  faces: PhotoAnalysis;
  store: FaceStore;
  index: SearchShards;
  grouping?: Grouping;
}

/** Stored faces searched per face on the photo: a person is found through any of its faces. */
const CANDIDATE_FACES = 20;

/**
 * The persons the face on a photo is: the subject (`biggest`), or each box given. A stored face
 * it matches at `threshold` (identify's, default its default) gives its person; an earlier
 * stranger it matches at the same threshold (grouping's when not given) gives theirs.
 */
export async function personsOnPhoto(
  deps: FacePersonsDeps,
  reach: Reach,
  req: { photo: PhotoInput; bbox?: Box[]; threshold?: ThresholdPreset | number },
  signal?: AbortSignal,
): Promise<number[]> {
  requireHistory(reach);
  const photo = { photo: req.photo, param: 'photo', boxes: req.bbox, boxesParam: 'bbox' };
  const bytes = await deps.faces.load(photo, signal);
  const analysis = await deps.faces.analyzeBytes(bytes, photo, { embed: true, age: false, gender: false, emotions: false, party: reach.tenant }, signal);
  const rows = pickRows(analysis, selectFaces(analysis, 'biggest', 'photo', req.bbox !== undefined));
  const searches = await deps.index.searchBatch(rows, CANDIDATE_FACES, searchScope(reach.tenant));
  const faceIds = searches.flatMap((s) => {
    const accepts = identifyAccepts(req.threshold, s.faces, deps.faces.calibration);
    return s.matches.filter((m) => accepts(m.similarity)).map((m) => m.id);
  });
  const persons = await deps.store.personsOf(reach, [...new Set(faceIds)]);
  const { grouping } = deps;
  if (grouping) persons.push(...(await strangerPersons({ ...grouping, threshold: req.threshold ?? grouping.threshold }, reach.tenant, rows)).flat());
  return [...new Set(persons)].sort((a, b) => a - b);
}

/** Sightings matching every filter given, newest first; one page (with `limit`) or all of them. */
export async function searchHistory(deps: HistoryDeps, reach: Reach, filter: HistoryFilter, page: HistoryPage): Promise<HistoryListing> {
  requireHistory(reach);
  return deps.history.events.search(reach.tenant, filter, page);
}

/** The JPEG kept with sighting `id`; NOT_FOUND for an unknown sighting or an expired thumbnail. */
export async function sightingThumbnail(deps: HistoryDeps, reach: Reach, id: number): Promise<Buffer> {
  requireHistory(reach);
  const jpeg = await deps.history.events.thumbnail(reach.tenant, id);
  if (!jpeg) throw notFound(`No history event ${id}`);
  if (jpeg === 'expired') throw notFound(`The thumbnail of history event ${id} has expired`);
  return jpeg;
}
