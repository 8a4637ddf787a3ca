/**
 * Persons, GET /person/id/<id> and /person/history/id/<id>: who a person is
 * (faces and newest sightings) and every sighting of them.
 *
 * the person (404 when unknown) → their faces → the answer; or, for the
 * history: the person must exist → their sightings, streamed.
 */
import type { FaceStore, StoredFace } from '../db/faces.js';
import { unknownPerson, type HistoryFilter, type HistoryListing, type HistoryStore, type Person } from '../db/history-store.js';

export { PERSON_RECENT_SIGHTINGS } from '../db/history-store.js';
export type { HistoryEvent } from '../db/history-store.js';

export interface PersonDeps {
  store: FaceStore;
  history: HistoryStore;
}

export async function person(deps: PersonDeps, id: number): Promise<{ person: Person; faces: StoredFace[] }> {
  const found = await deps.history.person(id);
  if (!found) throw unknownPerson(id);
  return { person: found, faces: await deps.store.getFaces(found.face_ids) };
}

/** Every sighting of the person matching `filter`, newest first; the person must exist. */
export async function personHistory(deps: PersonDeps, id: number, filter: Omit<HistoryFilter, 'personId'>): Promise<HistoryListing> {
  if (!(await deps.history.personExists(id))) throw unknownPerson(id);
  return deps.history.search({ ...filter, personId: id });
}
