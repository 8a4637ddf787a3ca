import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { DomainError } from '../errors.js';
import { FaceStore } from './faces.js';
import { transaction } from './client.js';
import { PhotoBlobs, PhotoStore } from './photos.js';
import { ensureSightingPartitions } from './history-partitions.js';
import { HistoryStore, type HistoryEvent, type HistoryFilter, type HistoryListing, type SightingFace } from './history-store.js';
import { FIRST_TENANT } from '../auth.js';

let tdb: TestDatabase;
let dir: string;
let faces: FaceStore;
/** Friend once seen 3 times within an hour. */
let history: HistoryStore;

beforeAll(async () => {
  tdb = await freshDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'history-store-'));
  faces = new FaceStore(tdb.db.sql, new PhotoStore(tdb.db.sql, new PhotoBlobs(path.join(dir, 'photos'))), { model: 'test' });
  history = new HistoryStore(tdb.db.sql, { sightings: 3, windowS: 3600 });
});

afterAll(async () => {
  await tdb?.drop();
  await rm(dir, { recursive: true, force: true });
});

beforeEach(async () => {
  await tdb.db.owner`TRUNCATE sighting_thumbnails, sightings, face_galleries, faces, photos, photo_gc, persons RESTART IDENTITY CASCADE`;
});

const HASH = 'a'.repeat(64);
const JPEG = Buffer.from([0xff, 0xd8, 0xff, 0xd9]);
const box = { x1: 1, y1: 2, x2: 30, y2: 40 };
const seen = (f: Partial<SightingFace> = {}): SightingFace => ({ box, thumbnail: JPEG, ...f });

/** A time in the past, so sightings recorded now are newer than every seeded one. */
function at(minute: number): string {
  return new Date(Date.UTC(2025, 10, 21, 10, minute)).toISOString();
}

/** `at` as the API prints it: microseconds, no zone. */
const stamp = (minute: number) => at(minute).replace('Z', '000');

async function addFace(meta: string): Promise<number> {
  const photo = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), randomBytes(32)]);
  const {
    value: [f],
  } = await faces.addFaces({ tenant: FIRST_TENANT, photo, faces: [{ box, embedding: Float32Array.of(1, 0, 0, 0) }], meta, galleries: [] });
  return f.id;
}

async function drain(listing: HistoryListing): Promise<HistoryEvent[]> {
  const out: HistoryEvent[] = [];
  for await (const batch of listing.batches) out.push(...batch);
  return out;
}

const list = async (filter: HistoryFilter) => drain(await history.events.search(FIRST_TENANT, filter));

describe('recording sightings', () => {
  it('a face that matches nothing starts a new person; one that matches joins the match’s person', async () => {
    const [first] = await history.events.record({ tenant: FIRST_TENANT, camId: 'cam1', photoHash: HASH, photoKept: false, faces: [seen()] });
    expect(first).toMatchObject({ cam_id: 'cam1', face_id: null, meta: '', friend: false, photo: null, x1: 1, y2: 40 });
    const [second] = await history.events.record({ tenant: FIRST_TENANT, camId: 'cam1', photoHash: HASH, photoKept: false, faces: [seen()] });
    expect(second.person_id).not.toBe(first.person_id);

    const alice = await addFace('alice');
    const [a1] = await history.events.record({ tenant: FIRST_TENANT, camId: 'cam2', photoHash: HASH, photoKept: false, faces: [seen({ matchFaceId: alice })] });
    expect(a1).toMatchObject({ face_id: alice, meta: 'alice' });
    // The matched face had no person: it keeps the one just created.
    const [row] = await tdb.db.owner`SELECT person_id FROM faces WHERE id = ${alice}`;
    expect(Number(row.person_id)).toBe(a1.person_id);
    const [a2] = await history.events.record({ tenant: FIRST_TENANT, camId: 'cam3', photoHash: HASH, photoKept: false, faces: [seen({ matchFaceId: alice })] });
    expect(a2.person_id).toBe(a1.person_id);
    expect(await history.events.thumbnail(FIRST_TENANT, a2.id)).toEqual(JPEG);
  });

  it('a match deleted before the sighting is written counts as no match', async () => {
    const gone = await addFace('gone');
    await faces.deleteFace({ tenant: FIRST_TENANT }, gone);
    const [e] = await history.events.record({ tenant: FIRST_TENANT, camId: 'c', photoHash: HASH, photoKept: false, faces: [seen({ matchFaceId: gone })] });
    expect(e.face_id).toBeNull();
    expect(e.meta).toBe('');
  });

  it('friend once seen the configured number of times within the window, counted at each sighting’s time', async () => {
    const bob = await addFace('bob');
    const sight = async (minute: number) =>
      (await history.events.record({ tenant: FIRST_TENANT, camId: 'c', seenAt: at(minute), photoHash: HASH, photoKept: false, faces: [seen({ matchFaceId: bob })] }))[0];
    expect((await sight(0)).friend).toBe(false);
    expect((await sight(10)).friend).toBe(false);
    expect((await sight(20)).friend).toBe(true); // 3 within an hour
    // 2 hours later the window holds only this one.
    expect((await sight(140)).friend).toBe(false);
    const person = await history.persons.person(FIRST_TENANT, (await list({}))[0].person_id);
    expect(person).toMatchObject({ sightings: 4, face_ids: [bob], friend: false });
    expect(person?.recent.map((e) => e.timestamp)).toEqual([140, 20, 10, 0].map(stamp));
  });

  it('concurrent sightings of one person count each other', async () => {
    const carol = await addFace('carol');
    const events = await Promise.all(
      Array.from({ length: 6 }, () => history.events.record({ tenant: FIRST_TENANT, camId: 'c', photoHash: HASH, photoKept: false, faces: [seen({ matchFaceId: carol })] })),
    );
    // Serialised by the person lock: exactly the 3rd and later are friends, whatever the order.
    expect(events.flat().filter((e) => e.friend)).toHaveLength(4);
  });

  it('history is append-only; thumbnails cannot change', async () => {
    const [e] = await history.events.record({ tenant: FIRST_TENANT, camId: 'c', photoHash: HASH, photoKept: false, faces: [seen()] });
    await expect(tdb.db.owner`UPDATE sightings SET meta = 'x' WHERE id = ${e.id}`).rejects.toThrow(/append-only/);
    await expect(tdb.db.owner`DELETE FROM sightings`).rejects.toThrow(/append-only/);
    await expect(tdb.db.owner`UPDATE sighting_thumbnails SET jpeg = '\\x00'`).rejects.toThrow(/append-only/);
  });

  it('expires thumbnails past the retention, oldest first, keeping every event', async () => {
    const day = 86_400_000;
    const ago = (days: number) => new Date(Date.now() - days * day).toISOString();
    // Recorded out of time order: a backfilled old sighting after two young ones.
    const ages = [40, 35, 31, 2, 1, 45];
    const events = [];
    for (const d of ages) events.push((await history.events.record({ tenant: FIRST_TENANT, camId: 'c', seenAt: ago(d), photoHash: HASH, photoKept: false, faces: [seen()] }))[0]);
    expect(await history.events.expireThumbnailsAcrossTenants(30 * 86_400, 2)).toBe(3);
    const kept = await Promise.all(events.map((e) => history.events.thumbnail(FIRST_TENANT, e.id)));
    // The backfilled one waits behind the young sightings recorded before it (beyond one batch).
    expect(kept.map((k) => (Buffer.isBuffer(k) ? 'kept' : k))).toEqual(['expired', 'expired', 'expired', 'kept', 'kept', 'kept']);
    expect(await list({})).toHaveLength(ages.length);
    expect(await history.events.thumbnail(FIRST_TENANT, 987654)).toBeUndefined();
    // Nothing left to expire at the front: the sweep stops at once.
    expect(await history.events.expireThumbnailsAcrossTenants(30 * 86_400, 2)).toBe(0);
  });

  it('the friend window, a person’s newest sightings, thumbnails and cursors reach across a month boundary', async () => {
    const sql = tdb.db.owner;
    await ensureSightingPartitions(sql, { now: new Date('2025-02-10T00:00:00Z'), since: new Date('2025-01-01T00:00:00Z'), monthsAhead: 0 });
    const dave = await addFace('dave');
    const sight = async (seenAt: string) =>
      (await history.events.record({ tenant: FIRST_TENANT, camId: 'c', seenAt, photoHash: HASH, photoKept: false, faces: [seen({ matchFaceId: dave })] }))[0];
    const a = await sight('2025-01-31T23:20:00Z');
    const b = await sight('2025-01-31T23:50:00Z');
    const c = await sight('2025-02-01T00:10:00Z');
    const parts = await sql`SELECT id, tableoid::regclass::text AS part FROM sightings ORDER BY id`;
    expect(parts.map((r) => r.part)).toEqual(['sightings_2025_01', 'sightings_2025_01', 'sightings_2025_02']);
    // The third within the hour, counting the two of the month before.
    expect([a.friend, b.friend, c.friend]).toEqual([false, false, true]);
    expect((await history.persons.person(FIRST_TENANT, c.person_id))?.recent.map((e) => e.id)).toEqual([c.id, b.id, a.id]);
    expect(await history.events.thumbnail(FIRST_TENANT, a.id)).toEqual(JPEG);
    const next = await history.events.search(FIRST_TENANT, {}, { limit: 1, maxId: c.id });
    expect((await drain(next)).map((e) => e.id)).toEqual([b.id]);
    expect(next.nextMaxId()).toBe(b.id);
  });

  it('a failed sighting leaves no person, event or thumbnail behind', async () => {
    await expect(
      history.events.record({ tenant: FIRST_TENANT, camId: 'not a valid camera id!', photoHash: HASH, photoKept: false, faces: [seen()] }),
    ).rejects.toThrow();
    const [n] = await tdb.db.owner`SELECT (SELECT count(*) FROM persons)::int AS p, (SELECT count(*) FROM sightings)::int AS s, (SELECT count(*) FROM sighting_thumbnails)::int AS t`;
    expect(n).toEqual({ p: 0, s: 0, t: 0 });
  });
});

describe('persons formed by strangers', () => {
  const vector = Float32Array.of(0, 1, 0, 0);
  const stranger = (f: Partial<SightingFace> = {}) => seen({ embedding: { vector, quality: 0.9 }, ...f });
  const sight = async (minute: number, f: SightingFace) =>
    (await history.events.record({ tenant: FIRST_TENANT, model: 'test', camId: 'gate', seenAt: at(minute), photoHash: HASH, photoKept: false, faces: [f] }))[0];

  it('a face matching two persons joins the lower id; the other merges into it everywhere it is read', async () => {
    const a = await sight(1, stranger());
    const b = await sight(2, stranger());
    expect(b.person_id).not.toBe(a.person_id);
    const c = await sight(3, stranger({ strangerPersons: [b.person_id, a.person_id] }));
    expect(c.person_id).toBe(a.person_id);
    // b's event now reads under a; b's id answers with a, and its history holds all three.
    const listed = await drain(await history.events.search(FIRST_TENANT, {}));
    expect(listed.map((e) => e.person_id)).toEqual([a.person_id, a.person_id, a.person_id]);
    expect((await history.persons.person(FIRST_TENANT, b.person_id))?.id).toBe(a.person_id);
    expect((await drain(await history.events.search(FIRST_TENANT, { personId: b.person_id }))).map((e) => e.id)).toEqual([c.id, b.id, a.id]);
    // Counted together: the third sighting of the merged person makes a friend.
    expect(c.friend).toBe(true);
  });

  it('merges along: persons merged into a loser follow it to the survivor', async () => {
    const [p1, p2, p3] = [await sight(1, stranger()), await sight(2, stranger()), await sight(3, stranger())].map((e) => e.person_id);
    await sight(4, stranger({ strangerPersons: [p2, p3] }));
    await sight(5, stranger({ strangerPersons: [p1, p2] }));
    const rows = await tdb.db.owner`SELECT id, merged_into FROM persons ORDER BY id`;
    expect(rows.map((r) => [Number(r.id), r.merged_into === null ? null : Number(r.merged_into)])).toEqual([
      [p1, null],
      [p2, p1],
      [p3, p1],
    ]);
  });

  it('keeps each stranger face\'s embedding with its thumbnail, and gives the best few per person back', async () => {
    const a = await sight(1, stranger({ embedding: { vector, quality: 0.5 } }));
    await sight(2, stranger({ strangerPersons: [a.person_id], embedding: { vector, quality: 0.7 } }));
    await sight(3, stranger({ strangerPersons: [a.person_id], embedding: { vector, quality: 0.6 } }));
    // A face of a stored person is not a stranger's: not given back.
    await sight(4, stranger({ matchFaceId: await addFace('known') }));
    const reps = [];
    for await (const batch of history.strangers.strangerRepresentativesAcrossTenants('test', 2, Number.MAX_SAFE_INTEGER)) reps.push(...batch);
    expect(reps.map((r) => [r.person, r.quality.toFixed(1)])).toEqual([
      [a.person_id, '0.7'],
      [a.person_id, '0.6'],
    ]);
    expect([...reps[0].vector]).toEqual([...vector]);
    // Another recogniser's embeddings are not comparable: none.
    const other = [];
    for await (const batch of history.strangers.strangerRepresentativesAcrossTenants('other', 2, Number.MAX_SAFE_INTEGER)) other.push(...batch);
    expect(other).toEqual([]);
    // Read after a known sighting, as the strangers' indexes catch up; the newest from there.
    expect((await history.strangers.strangersAcrossTenantsAfter('test', a.id, 10)).map((r) => r.quality.toFixed(1))).toEqual(['0.7', '0.6']);
    expect((await history.strangers.strangersAcrossTenantsAfter('test', a.id, 1)).map((r) => r.quality.toFixed(1))).toEqual(['0.7']);
    const newest = await history.strangers.lastStrangerSighting('test');
    expect(await history.strangers.lastStrangerSighting('test', a.id)).toBe(newest);
    expect(await history.strangers.lastStrangerSighting('test', newest)).toBe(newest);
    // What a match stands for: the sighting's person now (a merge moves it), while it keeps its embedding.
    const c = await sight(5, stranger());
    expect(Object.fromEntries(await history.persons.personsOfSightings(FIRST_TENANT, [a.id, c.id]))).toEqual({ [a.id]: a.person_id, [c.id]: c.person_id });
    await history.persons.mergePersons(FIRST_TENANT, [a.person_id, c.person_id]);
    expect(Object.fromEntries(await history.persons.personsOfSightings(FIRST_TENANT, [a.id, c.id]))).toEqual({ [a.id]: a.person_id, [c.id]: a.person_id });
    // Expired with the thumbnails: no longer kept, nor standing for anyone.
    expect(await history.events.expireThumbnailsAcrossTenants(1, 100)).toBe(5);
    expect(await history.strangers.keptEmbeddingsAcrossTenants([a.id, c.id])).toEqual([]);
    expect((await history.persons.personsOfSightings(FIRST_TENANT, [a.id, c.id])).size).toBe(0);
    const left = [];
    for await (const batch of history.strangers.strangerRepresentativesAcrossTenants('test', 2, Number.MAX_SAFE_INTEGER)) left.push(...batch);
    expect(left).toEqual([]);
  });

  it('splits sightings of one person off into a new person, the one change history takes', async () => {
    const a = await sight(1, stranger());
    const b = await sight(2, stranger({ strangerPersons: [a.person_id] }));
    const c = await sight(3, stranger({ strangerPersons: [a.person_id] }));
    const other = await sight(4, stranger());
    await expect(history.persons.splitPerson(FIRST_TENANT, [b.id, other.id])).rejects.toThrow(/belong to 2 persons/);
    await expect(history.persons.splitPerson(FIRST_TENANT, [b.id, 99_999_999])).rejects.toThrow(/No history event 99999999/);
    const { person, from } = await history.persons.splitPerson(FIRST_TENANT, [b.id, c.id]);
    expect(from).toBe(a.person_id);
    expect((await drain(await history.events.search(FIRST_TENANT, { personId: person }))).map((e) => e.id)).toEqual([c.id, b.id]);
    expect((await history.persons.person(FIRST_TENANT, a.person_id))?.sightings).toBe(1);
    // Anything but the person is still refused.
    await expect(tdb.db.owner`UPDATE sightings SET cam_id = 'x' WHERE id = ${b.id}`).rejects.toThrow(/append-only/);
    await expect(tdb.db.owner`UPDATE sightings SET person_id = ${a.person_id}, friend = true WHERE id = ${b.id}`).rejects.toThrow(/append-only/);
  });

  it('a stored face found to be a stranger joins the survivor of their persons', async () => {
    const [p1, p2] = [await sight(1, stranger()), await sight(2, stranger())].map((e) => e.person_id);
    const face = await addFace('enrolled later');
    const joined = await transaction(tdb.db.sql, FIRST_TENANT, (tx) => history.persons.joinFaces(tx, FIRST_TENANT, [{ faceId: face, persons: [p2, p1] }]));
    expect(joined).toEqual([p1]);
    expect((await history.persons.person(FIRST_TENANT, p2))?.face_ids).toEqual([face]);
  });
});

describe('searching history', () => {
  /** 4 cameras × 10 minutes, one sighting each; persons alternate between two faces. */
  async function seed() {
    const [f1, f2] = [await addFace('one'), await addFace('two')];
    for (let minute = 0; minute < 10; minute++) {
      for (const cam of ['a', 'b', 'c', 'd']) {
        await history.events.record({ tenant: FIRST_TENANT, camId: cam, seenAt: at(minute), photoHash: HASH, photoKept: false, faces: [seen({ matchFaceId: minute % 2 ? f2 : f1 })] });
      }
    }
    const all = await list({});
    return { all, p1: all.find((e) => e.face_id === f1)!.person_id, p2: all.find((e) => e.face_id === f2)!.person_id };
  }

  const order = (events: HistoryEvent[]) =>
    events.every((e, i) => i === 0 || e.timestamp < events[i - 1].timestamp || (e.timestamp === events[i - 1].timestamp && e.id < events[i - 1].id));

  it('every filter alone and together, newest first', async () => {
    const { all, p1 } = await seed();
    expect(all).toHaveLength(40);
    expect(order(all)).toBe(true);
    const byPerson = await list({ personId: p1 });
    expect(byPerson).toHaveLength(20);
    expect(byPerson.every((e) => e.person_id === p1)).toBe(true);
    const twoCams = await list({ camIds: ['b', 'd'] });
    expect(twoCams).toHaveLength(20);
    expect(order(twoCams)).toBe(true);
    expect(new Set(twoCams.map((e) => e.cam_id))).toEqual(new Set(['b', 'd']));
    const range = await list({ start: at(3), end: at(6) });
    expect(range).toHaveLength(12); // minutes 3, 4, 5: start inclusive, end exclusive
    const friends = await list({ friend: true });
    expect(friends.every((e) => e.friend)).toBe(true);
    const foes = await list({ friend: false });
    expect(friends.length + foes.length).toBe(40);
    const combined = await list({ personId: p1, camIds: ['a', 'c'], start: at(2), end: at(9), friend: true });
    expect(combined.map((e) => [e.cam_id, e.timestamp])).toEqual(
      all.filter((e) => e.person_id === p1 && ['a', 'c'].includes(e.cam_id) && e.timestamp >= stamp(2) && e.timestamp < stamp(9) && e.friend).map((e) => [e.cam_id, e.timestamp]),
    );
    expect(combined.length).toBeGreaterThan(0);
  });

  it('pages to the end with no repeats and no gaps while new sightings arrive', async () => {
    const { all } = await seed();
    for (const filter of [{}, { camIds: ['a', 'c', 'd'] }] as HistoryFilter[]) {
      const expected = (await list(filter)).map((e) => e.id);
      const seenIds: number[] = [];
      let maxId: number | undefined;
      for (let pages = 0; ; pages++) {
        expect(pages).toBeLessThan(100);
        const listing = await history.events.search(FIRST_TENANT, filter, { limit: 7, maxId });
        const page = await drain(listing);
        expect(page.length).toBeLessThanOrEqual(7);
        seenIds.push(...page.map((e) => e.id));
        // New sightings (now) keep arriving between pages, on every camera.
        await history.events.record({ tenant: FIRST_TENANT, camId: 'a', photoHash: HASH, photoKept: false, faces: [seen()] });
        maxId = listing.nextMaxId();
        if (maxId === undefined) break;
      }
      expect(seenIds).toEqual(expected);
    }
    expect(all).toHaveLength(40);
  });

  it('an unknown cursor is a 400 naming max_id', async () => {
    const err = await history.events.search(FIRST_TENANT, {}, { limit: 5, maxId: 999_999 }).catch((e) => e);
    expect(err).toBeInstanceOf(DomainError);
    expect(err).toMatchObject({ code: 'BAD_PARAM', param: 'max_id' });
  });

  it('an unknown person is undefined', async () => {
    expect(await history.persons.person(FIRST_TENANT, 12345)).toBeUndefined();
    expect(await history.persons.personExists(FIRST_TENANT, 12345)).toBe(false);
  });
});
