import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { detachSightingPartitionsBefore, ensureSightingPartitions } from '../db/history-partitions.js';
import { HistoryStore, type SightingFace } from '../db/history-store.js';
import { shardOf } from '../native/face-index.js';
import { historyStrangers, STRANGER_REPRESENTATIVES, StrangerIndex } from './stranger-index.js';
import { FIRST_TENANT } from '../auth.js';

let tdb: TestDatabase;
let history: HistoryStore;
const open: StrangerIndex[] = [];

beforeAll(async () => {
  tdb = await freshDatabase();
  history = new HistoryStore(tdb.db.sql, { sightings: 3, windowS: 3600 });
});

afterAll(async () => {
  for (const s of open) s.close();
  await tdb?.drop();
});

beforeEach(async () => {
  await tdb.db.owner`TRUNCATE sighting_thumbnails, sightings, persons RESTART IDENTITY CASCADE`;
});

const DIMS = 16;
/** A unit vector of DIMS from its first values (the rest 0). */
const unit = (...v: number[]) => {
  const n = Math.hypot(...v);
  return Float32Array.from({ length: DIMS }, (_, i) => (v[i] ?? 0) / n);
};
/** The k-th axis: as far from every other as can be. */
const axis = (k: number) => unit(...Array.from({ length: k + 1 }, (_, i) => (i === k ? 1 : 0)));

/** A stranger's sighting with its embedding, joining `persons` when given; returns its event. */
async function sight(vector: Float32Array, quality: number, persons: number[] = [], seenAt?: string) {
  const face: SightingFace = { box: { x1: 0, y1: 0, x2: 10, y2: 10 }, thumbnail: Buffer.from([0xff, 0xd8, 0xff, 0xd9]), strangerPersons: persons, embedding: { vector, quality } };
  const [event] = await history.events.record({ tenant: FIRST_TENANT, model: 'test', camId: 'gate', seenAt, photoHash: 'a'.repeat(64), photoKept: false, faces: [face] });
  return event;
}

async function openIndex(owns?: (id: number) => boolean) {
  const index = await StrangerIndex.open({ dims: DIMS, rerank: 0, owns }, historyStrangers(history, 'test'));
  open.push(index);
  return index;
}

describe("the strangers' index", () => {
  it('opens with what is recorded, and reads what is recorded later before a search up to it', async () => {
    const a = await sight(unit(1, 0, 0, 0), 0.9);
    const index = await openIndex();
    expect(index.size()).toBe(1);
    const b = await sight(unit(0, 1, 0, 0), 0.9);
    // Asked up to `b`: read first, then found.
    const [found] = await index.search(unit(0, 1, 0, 0), 4, b.id, -Infinity, FIRST_TENANT);
    expect(found.searched).toBe(2);
    expect(found.hits[0].sightingId).toBe(b.id);
    expect(found.hits.map((h) => h.sightingId)).toContain(a.id);
    // Seen before `since`: left out.
    const [recent] = await index.search(unit(1, 0, 0, 0), 4, b.id, Date.parse(`${b.timestamp}Z`), FIRST_TENANT);
    expect(recent.hits.map((h) => h.sightingId)).toEqual([b.id]);
  });

  it("holds a person's best few sightings by quality, not every one", async () => {
    const first = await sight(unit(1, 1, 0, 0), 0.1);
    const person = first.person_id;
    const qualities = [0.5, 0.9, 0.3, 0.8, 0.7, 0.2];
    for (const q of qualities) await sight(unit(1, 1, 0, 0), q, [person]);
    const index = await openIndex();
    expect(index.size()).toBe(STRANGER_REPRESENTATIVES);
    // And the same when they arrive one by one after it opened.
    for (const q of [0.95, 0.05]) await sight(unit(1, 1, 0, 0), q, [person]);
    await index.catchUp(Infinity);
    expect(index.size()).toBe(STRANGER_REPRESENTATIVES);
    expect(index.persons()).toBe(1);
  });

  it("split over shard servers by sighting id: each holds those on its shards, together all of them", async () => {
    const ids: number[] = [];
    for (let k = 0; k < 12; k++) ids.push((await sight(axis(k), 0.9)).id);
    const shards = 3;
    const servers = await Promise.all([[0], [1, 2]].map((held) => openIndex((id) => held.includes(shardOf(id, shards)))));
    const heldBy = (k: number) => (shardOf(ids[k], shards) === 0 ? 0 : 1);
    expect(servers[0].size() + servers[1].size()).toBe(ids.length);
    expect(servers[0].size()).toBe(ids.filter((_, k) => heldBy(k) === 0).length);
    // Each finds only its own; what they searched adds up to all.
    for (const k of [0, 5, 11]) {
      const answers = await Promise.all(servers.map((s) => s.search(axis(k), 1, ids[ids.length - 1], -Infinity, FIRST_TENANT)));
      expect(answers[heldBy(k)][0].hits[0]).toMatchObject({ sightingId: ids[k] });
      expect(answers[0][0].searched + answers[1][0].searched).toBe(ids.length);
    }
  });

  it('a sweep drops the sightings whose embeddings left the database: month detached, thumbnails expired', async () => {
    await ensureSightingPartitions(tdb.db.owner, { since: new Date('2024-01-01T00:00:00Z'), monthsAhead: 0 });
    const detached = await sight(unit(0, 0, 1, 0), 0.9, [], '2024-01-15T00:00:00Z');
    const expired = await sight(unit(0, 1, 1, 0), 0.9, [], '2024-06-15T00:00:00Z');
    const fresh = await sight(unit(0, 0, 0, 1), 0.9);
    const index = await openIndex();
    expect(index.size()).toBe(3);
    expect(await detachSightingPartitionsBefore(tdb.db.owner, new Date('2024-02-01T00:00:00Z'))).toHaveLength(1);
    expect(await index.sweep()).toBe(1);
    await history.events.expireThumbnailsAcrossTenants(86_400);
    expect(await index.sweep()).toBe(1);
    const [found] = await index.search(unit(0, 0, 1, 0), 4, fresh.id, -Infinity, FIRST_TENANT);
    expect(found.hits.map((h) => h.sightingId)).toEqual([fresh.id]);
    expect([detached.id, expired.id]).not.toContain(found.hits[0].sightingId);
  });
});
