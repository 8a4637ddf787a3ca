/**
 * Camera history end to end: sightings recorded by identify and face add
 * with cam_id on the real server, engine, search shards and PostgreSQL;
 * history search with every filter and both ways of following next_page;
 * persons; thumbnails. In every shape (test/harness/shapes.ts): one process,
 * and a cluster whose API nodes take turns answering.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HistoryStore } from '../../src/db/history-store.js';
import { form, sample } from '../harness/images.js';
import { AUTH, request } from '../harness/service.js';
import { shapesUnderTest, startShape, type Shape } from '../harness/shapes.js';
import { FIRST_TENANT } from '../../src/auth.js';

const CAMERA = '6F9619FF-8B86-D011-B42D-00C04FC964FF';
const CAMERA_ID = '6f9619ff8b86d011b42d00c04fc964ff';

describe.each(shapesUnderTest({ inCi: true }))('history (%s)', (shapeName) => {
  let shape: Shape;
  let enrolled: any[];

  const call = (method: string, url: string, body?: FormData | object) => request(shape.base(), method, url, body, AUTH);

  beforeAll(async () => {
    shape = await startShape(shapeName, { FACE_SHARDS: '2', FACE_FRIEND_SIGHTINGS: '3', FACE_FRIEND_WINDOW_S: '3600', FACE_THUMBNAIL_SIZE: '96' });
    const r = await call('POST', '/v0/face/', form({ photo: sample(1), mf_selector: 'all', meta: 'demo1' }));
    expect(r.status).toBe(200);
    enrolled = r.json.results;
  }, 240_000);

  afterAll(async () => {
    await shape?.close();
  }, 60_000);

  const boxFields = (f: any) => ({ x1: String(f.x1), y1: String(f.y1), x2: String(f.x2), y2: String(f.y2) });

  describe('sightings through identify and face add', () => {
    let first: any[];

    it('identify with cam_id records one event per face, attributed to the matched face', async () => {
      const r = await call('POST', '/v0/identify/', form({ photo: sample(1), mf_selector: 'all', cam_id: CAMERA }));
      expect(r.status).toBe(200);
      expect(Object.keys(r.json.results)).toHaveLength(3);
      first = r.json.sightings;
      expect(first).toHaveLength(3);
      const ids = new Set(enrolled.map((f) => f.id));
      for (const [k, key] of Object.keys(r.json.results).entries()) {
        const e = first[k];
        expect(e).toMatchObject({ cam_id: CAMERA_ID, meta: 'demo1', friend: false, photo: '' });
        expect(ids.has(e.face_id)).toBe(true);
        expect(e.face_id).toBe(r.json.results[key][0].face.id);
        expect(`[${e.x1}, ${e.y1}, ${e.x2}, ${e.y2}]`).toBe(key);
        expect(e.photo_hash).toMatch(/^[0-9a-f]{64}$/);
        expect(e.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/);
      }
      expect(new Set(first.map((e) => e.person_id)).size).toBe(3);
    });

    it('keeps a JPEG thumbnail of each face behind the screenshot URL, with auth', async () => {
      const url = new URL(first[0].screenshot);
      expect(url.pathname).toBe(`/v0/history/id/${first[0].id}/screenshot/`);
      const res = await fetch(`${shape.base()}${url.pathname}`, { headers: AUTH });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('image/jpeg');
      const jpeg = Buffer.from(await res.arrayBuffer());
      expect([...jpeg.subarray(0, 2)]).toEqual([0xff, 0xd8]);
      expect((await fetch(`${shape.base()}${url.pathname}`)).status).toBe(401);
      expect((await call('GET', '/v0/history/id/999999/screenshot/')).status).toBe(404);
    });

    it('the same face seen again joins its person, and becomes a friend at the configured count', async () => {
      const face = enrolled[0];
      const personId = first.find((e) => e.face_id === face.id).person_id;
      const again = async (at: string) => {
        const r = await call('POST', '/v0/identify/', form({ photo: sample(1), ...boxFields(face), cam_id: 'door-1', timestamp: at }));
        expect(r.status).toBe(200);
        return r.json.sightings[0];
      };
      const now = Date.now();
      const second = await again(new Date(now + 1000).toISOString());
      expect(second).toMatchObject({ person_id: personId, face_id: face.id, friend: false, cam_id: 'door-1' });
      const third = await again(new Date(now + 2000).toISOString().replace('Z', '+00:00'));
      expect(third).toMatchObject({ person_id: personId, friend: true });
      const person = await call('GET', `/person/id/${personId}`);
      expect(person.status).toBe(200);
      expect(person.json).toMatchObject({ id: personId, sightings_count: 3 });
      expect(person.json.faces.map((f: any) => f.id)).toEqual([face.id]);
      expect(person.json.sightings.map((s: any) => s.cam_id)).toEqual(['door-1', 'door-1', CAMERA_ID]);
      expect(person.json.sightings[0]).toMatchObject({ person_id: personId, face_id: face.id, meta: 'demo1' });
    });

    it('face add with cam_id stores the faces under their persons and records the sightings in one go', async () => {
      const r = await call('POST', '/v0/face/', form({ photo: sample(2), mf_selector: 'all', meta: 'crowd2', cam_id: 'lobby' }));
      expect(r.status).toBe(200);
      expect(r.json.sightings).toHaveLength(r.json.results.length);
      r.json.results.forEach((f: any, k: number) => {
        const e = r.json.sightings[k];
        expect(e).toMatchObject({ face_id: f.id, meta: 'crowd2', cam_id: 'lobby', photo: f.photo, photo_hash: f.photo_hash });
      });
      const [row] = await shape.tdb.db.owner`SELECT person_id, cam_id FROM faces WHERE id = ${r.json.results[0].id}`;
      expect(Number(row.person_id)).toBe(r.json.sightings[0].person_id);
      expect(row.cam_id).toBe('lobby');
    });

    it('refuses a timestamp without cam_id, bad camera ids and bad timestamps, storing nothing', async () => {
      const [before] = await shape.tdb.db.owner`SELECT count(*)::int AS n FROM sightings`;
      for (const [fields, param] of [
        [{ timestamp: '2026-01-01T00:00:00' }, 'timestamp'],
        [{ cam_id: 'has space' }, 'cam_id'],
        [{ cam_id: 'x'.repeat(65) }, 'cam_id'],
        [{ cam_id: 'c', timestamp: '2026-02-30T10:00:00' }, 'timestamp'],
        [{ cam_id: 'c', timestamp: 'yesterday' }, 'timestamp'],
      ] as const) {
        const r = await call('POST', '/v0/identify/', form({ photo: sample(1), ...fields }));
        expect(r.status, JSON.stringify(fields)).toBe(400);
        expect(r.json).toMatchObject({ code: 400, error: 'BAD_PARAM', param });
      }
      const [after] = await shape.tdb.db.owner`SELECT count(*)::int AS n FROM sightings`;
      expect(after.n).toBe(before.n);
    });
  });

  describe('history search', () => {
    let history: HistoryStore;
    const HASH = 'b'.repeat(64);
    const JPEG = Buffer.from([0xff, 0xd8, 0xff, 0xd9]);
    const t = (minute: number) => new Date(Date.UTC(2025, 0, 1, 12, minute)).toISOString();

    beforeAll(async () => {
      history = new HistoryStore(shape.tdb.db.sql, { sightings: 3, windowS: 3600 });
      // 3 cameras × 12 minutes in early 2025, each face alternating between two enrolled faces.
      for (let minute = 0; minute < 12; minute++) {
        for (const cam of ['north', 'south', 'west']) {
          const match = enrolled[minute % 2].id;
          await history.events.record({ tenant: FIRST_TENANT, camId: cam, seenAt: t(minute), photoHash: HASH, photoKept: false, faces: [{ box: { x1: 0, y1: 0, x2: 9, y2: 9 }, thumbnail: JPEG, matchFaceId: match }] });
        }
      }
    });

    const search = (body: object) => call('POST', '/v0/history/search', body);

    it('lists everything newest first without limit, and applies every filter', async () => {
      const all = await search({});
      expect(all.status).toBe(200);
      expect(all.json.next_page).toBeUndefined();
      const events = all.json.results;
      const stamps = events.map((e: any) => e.timestamp);
      expect([...stamps].sort().reverse()).toEqual(stamps);

      const personId = events.find((e: any) => e.cam_id === 'north' && e.face_id === enrolled[1].id).person_id;
      const byPerson = (await search({ person_id: personId })).json.results;
      expect(byPerson.length).toBeGreaterThan(0);
      expect(byPerson.every((e: any) => e.person_id === personId)).toBe(true);

      const cams = (await search({ cam_ids: ['north', 'west'] })).json.results;
      expect(cams).toHaveLength(24);
      expect(new Set(cams.map((e: any) => e.cam_id))).toEqual(new Set(['north', 'west']));
      // The other spelling, a single id, and a UUID in either form.
      expect((await search({ cam_id: 'south' })).json.results).toHaveLength(12);
      expect((await search({ cam_id: CAMERA.toLowerCase() })).json.results).toHaveLength(3);
      expect((await search({ cam_ids: [CAMERA_ID], cam_id: 'south' })).json.results).toHaveLength(15);

      const range = (await search({ start: t(2), end: t(5) })).json.results;
      expect(range).toHaveLength(9);
      // A zone is honoured: 13:02+01:00 is 12:02Z.
      expect((await search({ start: '2025-01-01T13:02:00+01:00', end: '2025-01-01T12:05:00' })).json.results).toHaveLength(9);
      expect((await search({ start: '2025-01-01', end: '2025-01-02' })).json.results).toHaveLength(36);

      const friends = (await search({ friend: true })).json.results;
      const foes = (await search({ friend: false })).json.results;
      expect(friends.every((e: any) => e.friend)).toBe(true);
      expect(foes.every((e: any) => !e.friend)).toBe(true);
      expect(friends.length + foes.length).toBe(events.length);

      const combined = (await search({ person_id: personId, cam_ids: ['north'], start: t(0), end: t(12), friend: true })).json.results;
      const expected = events.filter((e: any) => e.person_id === personId && e.cam_id === 'north' && e.friend && e.timestamp.startsWith('2025-'));
      expect(combined.map((e: any) => e.id)).toEqual(expected.map((e: any) => e.id));
    });

    it('follows next_page to the end by GET and by POST, with no repeats or gaps while sightings arrive', async () => {
      const filter = { cam_ids: ['north', 'south'], start: t(1) };
      for (const method of ['GET', 'POST'] as const) {
        // Includes what the previous round added: sightings recorded now match the filter too.
        const expected = (await search(filter)).json.results.map((e: any) => e.id);
        expect(expected.length).toBeGreaterThanOrEqual(22);
        const got: number[] = [];
        let r = await search({ ...filter, limit: 5 });
        for (let pages = 1; ; pages++) {
          expect(r.status).toBe(200);
          expect(r.json.results.length).toBeLessThanOrEqual(5);
          got.push(...r.json.results.map((e: any) => e.id));
          // A new sighting on a filtered camera between pages.
          await history.events.record({ tenant: FIRST_TENANT, camId: 'north', photoHash: HASH, photoKept: false, faces: [{ box: { x1: 0, y1: 0, x2: 9, y2: 9 }, thumbnail: JPEG }] });
          const next = r.json.next_page;
          if (next === undefined) break;
          expect(next).toMatch(/^\/v0\/history\/search\?/);
          expect(new URL(next, shape.base()).searchParams.get('max_id')).toBe(String(got[got.length - 1]));
          expect(pages).toBeLessThan(10);
          r = method === 'GET' ? await call('GET', next) : await call('POST', next, {});
        }
        expect(got).toEqual(expected);
      }
    });

    it('serves 404 for a thumbnail past the retention, while the event stays listed', async () => {
      const [old] = (await search({ cam_id: 'west', limit: 1 })).json.results;
      const [recent] = (await search({ cam_id: CAMERA_ID, limit: 1 })).json.results;
      expect(await history.events.expireThumbnailsAcrossTenants(30 * 86_400)).toBeGreaterThan(0);
      const gone = await call('GET', new URL(old.screenshot).pathname);
      expect(gone.status).toBe(404);
      expect(gone.json.reason).toMatch(/expired/);
      expect((await call('GET', new URL(recent.screenshot).pathname)).status).toBe(200);
      expect((await search({ cam_id: 'west' })).json.results).toHaveLength(12);
    });

    it('answers 400 for bad dates, bad ranges and unknown cursors', async () => {
      for (const [body, param] of [
        [{ start: 'last week' }, 'start'],
        [{ end: '2025-13-01' }, 'end'],
        [{ start: '2025-01-01T25:00:00' }, 'start'],
        [{ start: t(5), end: t(5) }, 'end'],
        [{ limit: -1 }, 'limit'],
        [{ friend: 'maybe' }, 'friend'],
        [{ cam_ids: [] }, 'cam_ids'],
        [{ person_id: 0 }, 'person_id'],
        [{ limit: 5, max_id: 987654321 }, 'max_id'],
      ] as const) {
        const r = await search(body);
        expect(r.status, JSON.stringify(body)).toBe(400);
        expect(r.json).toMatchObject({ code: 400, error: 'BAD_PARAM', param });
      }
    });
  });

  describe('persons', () => {
    it('person history filters by camera and time, newest first', async () => {
      const events = (await call('POST', '/v0/history/search', { cam_id: 'west' })).json.results;
      const personId = events[0].person_id;
      const mine = events.filter((e: any) => e.person_id === personId);
      const r = await call('POST', `/person/history/id/${personId}`, { cam_ids: ['west'], start: '2025-01-01T12:00:00', end: '2025-01-01T13:00:00' });
      expect(r.status).toBe(200);
      expect(r.json.results.map((x: any) => x.timestamp)).toEqual(mine.map((e: any) => e.timestamp));
      for (const rec of r.json.results) {
        expect(Object.keys(rec).sort()).toEqual(['cam_id', 'face_id', 'meta', 'person_id', 'screenshot', 'timestamp']);
        expect(rec).toMatchObject({ person_id: personId, cam_id: 'west' });
      }
      const viaGet = await call('GET', `/person/history/id/${personId}?cam_ids=west&start=2025-01-01T12:00:00&end=2025-01-01T13:00:00`);
      expect(viaGet.json).toEqual(r.json);
      expect((await call('POST', `/person/history/id/${personId}`, { start: 'soon' })).status).toBe(400);
    });

    it('an unknown person is 404 on both person routes', async () => {
      for (const [method, url] of [
        ['GET', '/person/id/99999999'],
        ['POST', '/person/history/id/99999999'],
        ['GET', '/person/history/id/99999999'],
      ] as const) {
        const r = await call(method, url, method === 'POST' ? {} : undefined);
        expect(r.status, url).toBe(404);
        expect(r.json).toMatchObject({ code: 404, error: 'NOT_FOUND' });
      }
      expect((await call('GET', '/person/id/abc')).status).toBe(400);
    });

    it('PUT person_id links a face to a person, creating it when new', async () => {
      const face = enrolled[2];
      const r = await call('PUT', `/v0/face/id/${face.id}/`, { person_id: 424242 });
      expect(r.status).toBe(200);
      const p = await call('GET', '/person/id/424242');
      expect(p.status).toBe(200);
      expect(p.json).toMatchObject({ id: 424242, sightings_count: 0, last_seen: null, friend: false, sightings: [] });
      expect(p.json.faces.map((f: any) => f.id)).toEqual([face.id]);
    });

    it('every history and person route is in the OpenAPI document', async () => {
      const doc = (await fetch(`${shape.base()}/docs/v0`, { headers: { accept: 'application/json' } }).then((r) => r.json())) as any;
      for (const p of ['/v0/history/search', '/v0/history/id/{id}/screenshot/', '/person/id/{id}', '/person/history/id/{id}']) {
        expect(doc.paths[p], p).toBeDefined();
      }
      expect(Object.keys(doc.paths['/v0/history/search']).sort()).toEqual(['get', 'post']);
    });
  });
});
