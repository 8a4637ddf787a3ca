/**
 * Persons that form themselves, end to end on the real service, engine and
 * PostgreSQL: sightings of LFW people nobody enrolled, sent in shuffled order
 * over two cameras, are grouped into one person each; four clients seeing one
 * stranger at once make one person; a stranger seen often becomes a friend; a
 * stranger enrolled later is the same person; a restart keeps the groups;
 * strangers whose thumbnails expired are forgotten. In every shape
 * (test/harness/shapes.ts): in a cluster the strangers are grouped by two API
 * nodes taking turns, each with its own strangers' index.
 * Needs ../shared/testdata/lfw.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { form, haveLfw, lfwDir } from '../harness/images.js';
import { AUTH, request } from '../harness/service.js';
import { shapesUnderTest, startShape, type Shape } from '../harness/shapes.js';
import { until } from '../harness/until.js';

const suite = haveLfw ? describe : describe.skip;
if (!haveLfw) console.warn('persons.test.ts: skipped, LFW is not at ../shared/testdata/lfw');

/** People of LFW with at least `min` photos, in name order, each with their photos' paths. */
function lfwPeople(count: number, min: number): { name: string; photos: string[] }[] {
  const images = path.join(lfwDir, 'images');
  const out: { name: string; photos: string[] }[] = [];
  for (const name of readdirSync(images).sort()) {
    const files = readdirSync(path.join(images, name)).sort();
    if (files.length >= min) out.push({ name, photos: files.slice(0, min).map((f) => path.join(images, name, f)) });
    if (out.length === count) break;
  }
  return out;
}

/** A fixed shuffle (the order must not depend on luck). */
function shuffled<T>(items: T[]): T[] {
  const out = [...items];
  let seed = 7;
  for (let i = out.length - 1; i > 0; i--) {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    const j = seed % (i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

const FRIEND_AT = 4;

const SETTINGS = { FACE_SHARDS: '2', FACE_FRIEND_SIGHTINGS: String(FRIEND_AT), FACE_FRIEND_WINDOW_S: '3600' };

suite.each(shapesUnderTest({ inCi: true }))('persons formed by strangers (%s)', (shapeName) => {
  let shape: Shape;
  const people = haveLfw ? lfwPeople(8, 4) : [];
  const grouped = people.slice(0, 6);
  const [crowd, late] = people.slice(6);
  const call = (method: string, url: string, body?: FormData | object) => request(shape.base(), method, url, body, AUTH);
  const sight = async (file: string, cam: string) => {
    const r = await call('POST', '/v0/identify/', form({ photo: readFileSync(file), cam_id: cam }));
    expect(r.status, r.text).toBe(200);
    expect(r.json.sightings).toHaveLength(1);
    return r.json.sightings[0] as { id: number; person_id: number; face_id: number | null; friend: boolean };
  };

  beforeAll(async () => {
    shape = await startShape(shapeName, SETTINGS);
  }, 240_000);
  afterAll(async () => shape?.close(), 60_000);

  const personOf = new Map<string, number[]>();

  it('groups each stranger into one person, across two cameras and in any order, never two people in one', async () => {
    const sightings = shuffled(grouped.flatMap((p) => p.photos.map((file, k) => ({ who: p.name, file, cam: k % 2 ? 'gate' : 'door' }))));
    const whoseEvent = new Map<number, string>();
    for (const s of sightings) {
      const e = await sight(s.file, s.cam);
      expect(e.face_id).toBeNull();
      whoseEvent.set(e.id, s.who);
    }
    // Persons as the history reads them now: a merge puts earlier events under the survivor.
    const listed = (await call('POST', '/v0/history/search', {})).json.results as { id: number; person_id: number }[];
    expect(listed).toHaveLength(sightings.length);
    const whoIn = new Map<number, Set<string>>();
    for (const e of listed) {
      const who = whoseEvent.get(e.id)!;
      personOf.set(who, [...(personOf.get(who) ?? []), e.person_id]);
      whoIn.set(e.person_id, (whoIn.get(e.person_id) ?? new Set()).add(who));
    }
    for (const [person, who] of whoIn) expect([...who], `person ${person}`).toHaveLength(1);
    // Every stranger's four photos are one person, or at worst two.
    const spread = grouped.map((p) => new Set(personOf.get(p.name)).size);
    expect(spread.every((n) => n <= 2), `persons per stranger: ${spread}`).toBe(true);
    expect(spread.filter((n) => n === 1).length, `persons per stranger: ${spread}`).toBeGreaterThanOrEqual(5);
  });

  it("a grouped stranger's person lists their sightings, and a stranger seen often is a friend", async () => {
    const p = grouped.find((x) => new Set(personOf.get(x.name)).size === 1)!;
    const person = personOf.get(p.name)![0];
    const r = await call('GET', `/person/id/${person}`);
    expect(r.status).toBe(200);
    expect(r.json.sightings_count).toBe(4);
    expect(r.json.friend).toBe(true);
    const again = await sight(p.photos[0], 'door');
    expect(again).toMatchObject({ person_id: person, friend: true });
  });

  it('an operator merges two persons: the lowest id survives, the other answers as it, and later sightings join it', async () => {
    const [p, q] = grouped.filter((x) => new Set(personOf.get(x.name)).size === 1).slice(-2);
    const [a, b] = [personOf.get(p.name)![0], personOf.get(q.name)![0]];
    expect((await call('POST', '/person/merge', { ids: [a] })).status).toBe(400);
    const unknown = await call('POST', '/person/merge', { ids: [a, 99_999_999] });
    expect(unknown.status).toBe(404);
    expect((await call('GET', `/person/id/${Math.max(a, b)}`)).json.id).toBe(Math.max(a, b));
    const merged = await call('POST', '/person/merge', { ids: [b, a] });
    expect(merged.status, merged.text).toBe(200);
    expect(merged.json).toMatchObject({ id: Math.min(a, b), sightings_count: 8 });
    expect((await call('GET', `/person/id/${Math.max(a, b)}`)).json.id).toBe(Math.min(a, b));
    const history = await call('POST', `/person/history/id/${Math.max(a, b)}`, {});
    expect(history.json.results).toHaveLength(8);
    expect((await sight(q.photos[2], 'door')).person_id).toBe(Math.min(a, b));
    personOf.set(p.name, [Math.min(a, b)]);
    personOf.set(q.name, [Math.min(a, b)]);
  });

  it('searches the history by a face on a photo: the events of the persons it is, paged by their ids', async () => {
    const p = grouped.find((x) => new Set(personOf.get(x.name)).size === 1 && personOf.get(x.name)!.length === 4)!;
    const person = personOf.get(p.name)![0];
    const byPhoto = (fields: Record<string, string | Buffer>) => call('POST', '/v0/history/search', form({ photo: readFileSync(p.photos[0]), ...fields }));
    const all = await byPhoto({});
    expect(all.status, all.text).toBe(200);
    expect(all.json.results.length).toBeGreaterThanOrEqual(4);
    expect(new Set(all.json.results.map((e: { person_id: number }) => e.person_id))).toEqual(new Set([person]));
    // The other filters narrow it; next_page names the persons, and GET follows it.
    const page = await byPhoto({ cam_ids: JSON.stringify(['door']), limit: '1' });
    expect(page.json.results).toHaveLength(1);
    expect(page.json.next_page).toContain(`person_ids=${encodeURIComponent(JSON.stringify([person]))}`);
    const next = await call('GET', page.json.next_page);
    expect(next.json.results.every((e: { person_id: number; cam_id: string }) => e.person_id === person && e.cam_id === 'door')).toBe(true);
    // Someone never seen: nobody, no events.
    const stranger = lfwPeople(12, 4)[11];
    const none = await call('POST', '/v0/history/search', form({ photo: readFileSync(stranger.photos[0]) }));
    expect(none.status).toBe(200);
    expect(none.json.results).toEqual([]);
    // A box or a threshold without a photo describes nothing.
    const bad = await call('POST', '/v0/history/search', { bbox: [0, 0, 10, 10] });
    expect([bad.status, bad.json.param]).toEqual([400, 'bbox']);
  });

  it('an operator splits sightings off into a new person', async () => {
    const p = grouped.find((x) => new Set(personOf.get(x.name)).size === 1 && personOf.get(x.name)!.length === 4)!;
    const person = personOf.get(p.name)![0];
    const events = (await call('POST', '/v0/history/search', { person_id: person })).json.results as { id: number }[];
    expect((await call('POST', '/person/split', { sighting_ids: [] })).status).toBe(400);
    expect((await call('POST', '/person/split', { sighting_ids: [99_999_999] })).status).toBe(404);
    const split = await call('POST', '/person/split', { sighting_ids: events.slice(0, 2).map((e) => e.id) });
    expect(split.status, split.text).toBe(200);
    expect(split.json.id).not.toBe(person);
    expect(split.json.sightings_count).toBe(2);
    expect((await call('GET', `/person/id/${person}`)).json.sightings_count).toBe(events.length - 2);
  });

  it('four clients seeing one stranger at once make one person', async () => {
    const events = await Promise.all(crowd.photos.map((file, k) => sight(file, k % 2 ? 'gate' : 'door')));
    expect(new Set(events.map((e) => e.person_id)).size).toBe(1);
  });

  it('a stranger enrolled later joins the person they were, and later sightings name the face', async () => {
    const before = await sight(late.photos[0], 'door');
    const second = await sight(late.photos[1], 'gate');
    expect(second.person_id).toBe(before.person_id);
    const added = await call('POST', '/v0/face/', form({ photo: readFileSync(late.photos[2]), meta: late.name }));
    expect(added.status, added.text).toBe(200);
    const face = added.json.results[0];
    const person = await call('GET', `/person/id/${before.person_id}`);
    expect(person.json.faces.map((f: { id: number }) => f.id)).toContain(face.id);
    const after = await sight(late.photos[3], 'door');
    expect(after).toMatchObject({ person_id: before.person_id, face_id: face.id });
  });

  it('keeps the groups across a restart', async () => {
    await shape.restart();
    const p = grouped.find((x) => new Set(personOf.get(x.name)).size === 1)!;
    const e = await sight(p.photos[1], 'gate');
    expect(e.person_id).toBe(personOf.get(p.name)![0]);
  });

  it('forgets strangers whose thumbnails expired: their faces are no longer matched', async () => {
    const [old, recent] = lfwPeople(14, 4).slice(12);
    const daysAgo = (d: number) => new Date(Date.now() - d * 86_400_000).toISOString();
    const at = async (file: string, timestamp: string) => {
      const r = await call('POST', '/v0/identify/', form({ photo: readFileSync(file), cam_id: 'door', timestamp }));
      expect(r.status, r.text).toBe(200);
      return r.json.sightings[0] as { id: number; person_id: number };
    };
    const seenLongAgo = await at(old.photos[0], daysAgo(40));
    const seenLately = await at(recent.photos[0], daysAgo(1));
    // Restarted with a 30-day retention: the sweep at start takes the old thumbnail and its embedding.
    await shape.restart({ FACE_THUMBNAIL_RETENTION_DAYS: '30' });
    await until('the old thumbnail expired', async () => ((await call('GET', `/v0/history/id/${seenLongAgo.id}/screenshot/`)).status === 404 ? true : undefined), 10_000);
    // The same photos again: kept, each would match itself.
    expect((await at(old.photos[0], daysAgo(0))).person_id).not.toBe(seenLongAgo.person_id);
    expect((await at(recent.photos[0], daysAgo(0))).person_id).toBe(seenLately.person_id);
  });
});
