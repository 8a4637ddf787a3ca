/**
 * Persons, GET /person/id/<id> and /person/history/id/<id>: who a person is
 * (faces and newest sightings) and every sighting of them; POST /person/merge:
 * an operator's word that several persons are one, and POST /person/split
 * that some sightings are someone else.
 *
 * the person (404 when unknown) → their faces → the answer; or, for the
 * history: the person must exist → their sightings, streamed; or, for a
 * merge or split: in turn with grouping steps, the persons changed in the
 * database (which every strangers' index match is read against) → the
 * survivor's answer.
 */
import type { FaceStore, Reach, StoredFace } from '../db/faces.js';
import { unknownPerson, type HistoryFilter, type HistoryListing, type HistoryStore, type Person } from '../db/history-store.js';
import { requireHistory, type Grouping } from './sightings.js';

export { PERSON_RECENT_SIGHTINGS } from '../db/history-store.js';
export type { HistoryEvent } from '../db/history-store.js';

export interface PersonDeps {
  store: FaceStore;
  history: HistoryStore;
  /** Strangers grouped into persons: a merge or split waits its turn with grouping steps. */
  grouping?: Grouping;
}

export async function person(deps: PersonDeps, reach: Reach, id: number): Promise<{ person: Person; faces: StoredFace[] }> {
  requireHistory(reach);
  const found = await deps.history.persons.person(reach.tenant, id);
  if (!found) throw unknownPerson(id);
  return { person: found, faces: await deps.store.getFaces(reach, found.face_ids) };
}

/** Every sighting of the person matching `filter`, newest first; the person must exist. */
export async function personHistory(deps: PersonDeps, reach: Reach, id: number, filter: Omit<HistoryFilter, 'personId'>): Promise<HistoryListing> {
  requireHistory(reach);
  if (!(await deps.history.persons.personExists(reach.tenant, id))) throw unknownPerson(id);
  return deps.history.events.search(reach.tenant, { ...filter, personId: id });
}

/** Merges persons into the lowest of them (their survivors); answers as GET /person/id/<survivor>. */
export async function mergePersons(deps: PersonDeps, reach: Reach, ids: number[]): Promise<{ person: Person; faces: StoredFace[] }> {
  requireHistory(reach);
  const step = async () => (await deps.history.persons.mergePersons(reach.tenant, ids)).survivor;
  return person(deps, reach, deps.grouping ? await deps.grouping.exclusive(step) : await step());
}

/** Splits sightings (all of one person) off into a new person; answers as GET /person/id/<new>. */
export async function splitPerson(deps: PersonDeps, reach: Reach, sightingIds: number[]): Promise<{ person: Person; faces: StoredFace[] }> {
  requireHistory(reach);
  const step = async () => (await deps.history.persons.splitPerson(reach.tenant, sightingIds)).person;
  return person(deps, reach, deps.grouping ? await deps.grouping.exclusive(step) : await step());
}
