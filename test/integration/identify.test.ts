/**
 * Identify end to end, in every shape the service runs in (test/harness/shapes.ts): the real
 * server, a real PostgreSQL (a database of this file's own), the real engine and the real
 * search shards, in one process and in a cluster of API nodes and shard servers, with the same
 * assertions; including a restart on the same data.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TokenStore } from '../../src/db/tokens.js';
import { form, haveSharedFaces, sample, sharedFace } from '../harness/images.js';
import { request } from '../harness/service.js';
import { shapesUnderTest, startShape, type Shape } from '../harness/shapes.js';
import { until } from '../harness/until.js';
import { CLI_ACTOR } from '../../src/db/audit.js';

const SHARDS = 4;
const KEY = /^\[-?\d+, -?\d+, -?\d+, -?\d+\]$/;

describe.each(shapesUnderTest({ inCi: true }))('identify (%s)', (shapeName) => {
  let shape: Shape;
  let token: string;
  let OPERATOR: string;
  /** Faces of sample1 (default gallery only) and sample4 (also in `crowd`). */
  let demo1: any[];
  let crowd: any[];

  const call = (method: string, url: string, body?: FormData | object, as = token) =>
    request(shape.base(), method, url, body, { Authorization: `Token ${as}` });

  const identify = (fields: Record<string, string | Buffer>, url = '/v0/identify/') => call('POST', url, form(fields));

  beforeAll(async () => {
    shape = await startShape(shapeName, { FACE_SHARDS: String(SHARDS), FACE_IDENTIFY_MAX_N: '50' });
    OPERATOR = shape.operator;
    ({ token } = await new TokenStore(shape.tdb.db.sql).create(CLI_ACTOR, 'deployment', 'tests'));
    expect((await call('POST', '/v0/galleries/crowd/')).status).toBe(201);
    const a = await call('POST', '/v0/face/', form({ photo: sample(1), mf_selector: 'all', meta: 'demo1' }));
    expect(a.status).toBe(200);
    demo1 = a.json.results;
    const b = await call('POST', '/v0/face/', form({ photo: sample(4), mf_selector: 'all', meta: 'demo4', galleries: 'crowd' }));
    expect(b.status).toBe(200);
    crowd = b.json.results;
  }, 240_000);

  afterAll(async () => {
    await shape?.close();
  }, 60_000);

  describe('identify', () => {
    it('finds every face of an enrolled photo as itself, keys in face order', async () => {
      const r = await identify({ photo: sample(1), mf_selector: 'all' });
      expect(r.status).toBe(200);
      expect(r.headers.get('x-live-servers')).toBe(shape.live());
      const keys = Object.keys(r.json.results);
      expect(keys).toHaveLength(demo1.length);
      const ids = new Set(demo1.map((f) => f.id));
      for (const key of keys) {
        expect(key).toMatch(KEY);
        const [m] = r.json.results[key];
        expect(m.confidence).toBeGreaterThan(0.99);
        expect(ids.has(m.face.id)).toBe(true);
        // The matched face is the one at that box, with its full representation.
        expect(`[${m.face.x1}, ${m.face.y1}, ${m.face.x2}, ${m.face.y2}]`).toBe(key);
        expect(m.face).toMatchObject({ meta: 'demo1', galleries: ['default'] });
        expect(typeof m.face.photo).toBe('string');
      }
    });

    it('searches a caller-given box instead of detecting', async () => {
      const f = crowd[1];
      const r = await identify({ photo: sample(4), x1: String(f.x1), y1: String(f.y1), x2: String(f.x2), y2: String(f.y2) });
      expect(r.status).toBe(200);
      expect(Object.keys(r.json.results)).toEqual([`[${f.x1}, ${f.y1}, ${f.x2}, ${f.y2}]`]);
      expect(r.json.results[`[${f.x1}, ${f.y1}, ${f.x2}, ${f.y2}]`][0].face.id).toBe(f.id);
    });

    it('takes the box as bbox too, with or without the list around it, and refuses both spellings at once', async () => {
      const f = crowd[1];
      const key = `[${f.x1}, ${f.y1}, ${f.x2}, ${f.y2}]`;
      for (const bbox of [[[f.x1, f.y1, f.x2, f.y2]], [f.x1, f.y1, f.x2, f.y2], { x1: f.x1, y1: f.y1, x2: f.x2, y2: f.y2 }]) {
        const r = await identify({ photo: sample(4), bbox: JSON.stringify(bbox) });
        expect(r.status, JSON.stringify(bbox)).toBe(200);
        expect(Object.keys(r.json.results)).toEqual([key]);
        expect(r.json.results[key][0].face.id).toBe(f.id);
      }
      const both = await identify({ photo: sample(4), bbox: JSON.stringify([f.x1, f.y1, f.x2, f.y2]), x1: String(f.x1), y1: String(f.y1), x2: String(f.x2), y2: String(f.y2) });
      expect(both.status).toBe(400);
      expect(both.json).toMatchObject({ error: 'BAD_PARAM', param: 'bbox' });
      const partial = await identify({ photo: sample(4), x1: '1', y1: '2' });
      expect(partial.json).toMatchObject({ error: 'BAD_PARAM', param: 'x1' });
      expect(partial.json.reason).toContain('give all four of x1, y1, x2, y2');
    });

    it('returns up to n matches best first, only above the threshold', async () => {
      const open = await identify({ photo: sample(1), n: '5', threshold: 'none' });
      const [list] = Object.values(open.json.results) as any[][];
      expect(list).toHaveLength(5);
      for (let i = 1; i < list.length; i++) expect(list[i - 1].confidence).toBeGreaterThanOrEqual(list[i].confidence);
      const strictT = await identify({ photo: sample(1), n: '5', threshold: '0.9' });
      const [only] = Object.values(strictT.json.results) as any[][];
      expect(only.length).toBeGreaterThanOrEqual(1);
      expect(only.every((m) => m.confidence >= 0.9)).toBe(true);
      expect(only.length).toBeLessThan(5);
    });

    it('restricts to a gallery, by body field and by path, and still fills n', async () => {
      const inCrowd = new Set(crowd.map((f) => f.id));
      for (const r of [
        await identify({ photo: sample(1), n: '3', threshold: 'none', gallery: 'crowd' }),
        await identify({ photo: sample(1), n: '3', threshold: 'none' }, '/v0/faces/gallery/crowd/identify/'),
      ]) {
        expect(r.status).toBe(200);
        const [list] = Object.values(r.json.results) as any[][];
        expect(list).toHaveLength(3);
        for (const m of list) {
          expect(inCrowd.has(m.face.id)).toBe(true);
          expect(m.face.galleries).toContain('crowd');
        }
      }
    });

    it("gives the same match a lower confidence among more faces: identify's odds are divided by the faces searched", async () => {
      const all = await call('GET', '/v0/faces/');
      const stored = all.json.results.length as number;
      expect(stored).toBeGreaterThan(crowd.length);
      const odds = (p: number) => p / (1 - p);
      const among = async (fields: Record<string, string | Buffer>) => {
        const r = await identify({ photo: sample(1), n: String(crowd.length), threshold: 'none', ...fields });
        expect(r.status).toBe(200);
        const [list] = Object.values(r.json.results) as any[][];
        return new Map(list.map((m) => [m.face.id, m.confidence as number]));
      };
      const inCrowd = await among({ gallery: 'crowd' });
      const inAll = await among({ n: '50' });
      // sample1's people are not on sample4: every crowd face is an impostor, with a confidence well inside (0, 1).
      for (const [id, c] of inCrowd) {
        expect(c).toBeGreaterThan(0);
        expect(c).toBeLessThan(0.5);
        expect(odds(inAll.get(id)!) / odds(c)).toBeCloseTo(crowd.length / stored, 3);
      }
    });

    it('answers 404 for an unknown gallery and 400 for n over the maximum, with the header', async () => {
      const a = await identify({ photo: sample(1), gallery: 'nope' });
      expect(a.status).toBe(404);
      expect(a.json).toMatchObject({ code: 404, error: 'NOT_FOUND' });
      expect(a.json.reason).toContain('nope');
      expect(a.headers.get('x-live-servers')).toBe(shape.live());
      const b = await identify({ photo: sample(1) }, '/v0/faces/gallery/nope/identify/');
      expect(b.status).toBe(404);
      const c = await identify({ photo: sample(1), n: '51' });
      expect(c.status).toBe(400);
      expect(c.json).toMatchObject({ error: 'BAD_PARAM', param: 'n' });
      expect(c.headers.get('x-live-servers')).toBe(shape.live());
    });

    it('with a shard offline: strict answers 503, otherwise the live shards answer', async () => {
      const one = shape.shard(1);
      const control = (action: string, as = OPERATOR) => request(one.base, 'POST', `/v0/admin/shards/1/${action}`, undefined, { Authorization: `Token ${as}` });
      // Only an operator's token switches shards: a client token from the store is valid but may not (403); a
      // shard server, between the nodes of one deployment, knows no token but the operator's (401).
      expect((await control('offline', token)).status).toBe(shape.name === 'one' ? 403 : 401);
      expect((await call('GET', '/v0/admin/shards')).status).toBe(403);
      const off = await control('offline');
      expect(off.status).toBe(200);
      expect(off.json.shards.find((s: any) => s.shard === 1).state).toBe('offline');
      try {
        const strict = await identify({ photo: sample(1), strict: 'true' });
        expect(strict.status).toBe(503);
        expect(strict.json).toEqual({ code: 503, reason: `Search shards unavailable: ${one.name}`, error: 'SHARDS_UNAVAILABLE' });
        expect(strict.headers.get('x-live-servers')).toBe(shape.live(1));
        const lenient = await identify({ photo: sample(1), strict: 'false' });
        expect(lenient.status).toBe(200);
        expect(lenient.headers.get('x-live-servers')).toBe(shape.live(1));
      } finally {
        expect((await control('online')).status).toBe(200);
      }
      expect((await request(one.base, 'POST', '/v0/admin/shards/99/offline', undefined, { Authorization: `Token ${OPERATOR}` })).status).toBe(404);
      // Every node sees the shard back within its state poll.
      for (let n = 0; n < 2; n++) {
        await until('the shard back in every view', async () => {
          const r = await call('GET', '/v0/admin/shards', undefined, OPERATOR);
          return `${r.json.live}/${r.json.total}` === shape.live() ? r : undefined;
        }, 5_000);
      }
      const shards = await call('GET', '/v0/admin/shards', undefined, OPERATOR);
      expect(shards.json.shards).toHaveLength(SHARDS);
      expect(shards.json.shards.reduce((n: number, s: any) => n + s.size, 0)).toBe(demo1.length + crowd.length);
    });

    it.skipIf(!haveSharedFaces)('finds other photos of enrolled people', async () => {
      for (const [file, meta] of [
        ['barack_obama__1.jpg', 'obama'],
        ['joe_biden__1.jpg', 'biden'],
        ['kit_harington__1.jpg', 'harington'],
        ['rose_leslie__1.jpg', 'leslie'],
      ]) {
        expect((await call('POST', '/v0/face/', form({ photo: sharedFace(file), meta }))).status).toBe(200);
      }
      for (const [file, meta] of [
        ['barack_obama__4.jpg', 'obama'],
        ['joe_biden__2.jpg', 'biden'],
        ['kit_harington__2.jpg', 'harington'],
        ['rose_leslie__2.jpg', 'leslie'],
      ]) {
        const r = await identify({ photo: sharedFace(file), threshold: 'none', n: '3' });
        expect(r.status).toBe(200);
        const [list] = Object.values(r.json.results) as any[][];
        expect(list[0].face.meta, file).toBe(meta);
      }
    }, 60_000);

    it('never returns a deleted face, also after a restart on the same data', async () => {
      const gone = demo1[0];
      expect((await call('DELETE', `/v0/face/id/${gone.id}/`)).status).toBe(204);
      const box = { x1: String(gone.x1), y1: String(gone.y1), x2: String(gone.x2), y2: String(gone.y2) };
      const ids = (r: any) => (Object.values(r.json.results) as any[][]).flat().map((m) => m.face.id);
      const before = await identify({ photo: sample(1), ...box, threshold: 'none', n: '20' });
      expect(before.status).toBe(200);
      expect(ids(before)).not.toContain(gone.id);

      await shape.restart();
      const shards = await call('GET', '/v0/admin/shards', undefined, OPERATOR);
      expect(`${shards.json.live}/${shards.json.total}`).toBe(shape.live());
      // Saved at the graceful stop and loaded at start.
      expect(shards.json.shards.every((s: any) => s.snapshot_age_s !== null)).toBe(true);
      const after = await identify({ photo: sample(1), ...box, threshold: 'none', n: '20' });
      expect(after.status).toBe(200);
      expect(ids(after)).not.toContain(gone.id);
      const again = await identify({ photo: sample(1), mf_selector: 'all' });
      const found = (Object.values(again.json.results) as any[][]).map((l) => l[0]?.face.id);
      expect(found).toEqual(expect.arrayContaining([demo1[1].id, demo1[2].id]));
    }, 60_000);
  });
});
