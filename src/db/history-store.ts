/**
 * Camera history (003-history.sql), by role: the events (sightings recorded,
 * searched, their thumbnails: history-events.ts), the persons they belong to
 * (views, merges, splits: history-persons.ts) and the strangers among them,
 * read across tenants for the strangers' indexes (history-strangers.ts). One
 * store holds the three over the same pools, so the services take one.
 */
import type { ReplicaRead, Sql } from './client.js';
import { HistoryEvents, type FriendRule } from './history-events.js';
import { HistoryPersons } from './history-persons.js';
import { HistoryStrangers } from './history-strangers.js';

export type { FriendRule, HistoryEvent, HistoryFilter, HistoryListing, HistoryPage, Sighting, SightingFace } from './history-events.js';
export { PERSON_RECENT_SIGHTINGS, type Person } from './history-persons.js';
export type { Representative } from './history-strangers.js';
export { ensurePerson, unknownPerson } from './persons.js';

export class HistoryStore {
  readonly events: HistoryEvents;
  readonly persons: HistoryPersons;
  readonly strangers: HistoryStrangers;

  /**
   * `listings` runs searches, which stream (on Database.stream or a replica);
   * `views` person views (short queries, so not on the listing pool, where
   * slow readers may hold every connection). Both the main pool when absent.
   */
  constructor(sql: Sql, rule: FriendRule, listings?: ReplicaRead, views?: ReplicaRead) {
    this.events = new HistoryEvents(sql, rule, listings);
    this.persons = new HistoryPersons(sql, rule, views);
    this.strangers = new HistoryStrangers(sql);
  }
}
