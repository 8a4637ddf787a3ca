/**
 * The face database end to end: the real server on loopback, a real
 * PostgreSQL (a database of this file's own) and the real engine. In every
 * shape under `npm run test:shapes` (test/harness/shapes.ts); one process in a
 * plain run.
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIRST_TENANT } from '../../src/auth.js';
import { CLI_ACTOR } from '../../src/db/audit.js';
import { FaceStore } from '../../src/db/faces.js';
import { PhotoBlobs, PhotoStore } from '../../src/db/photos.js';
import { TokenStore } from '../../src/db/tokens.js';
import { blankPng, form, haveSharedFaces, sample, SAMPLE_FACES, sharedFace } from '../harness/images.js';
import { request } from '../harness/service.js';
import { shapesUnderTest, startShape, type Shape } from '../harness/shapes.js';

describe.each(shapesUnderTest({ inCi: false }))('the face database (%s)', (shapeName) => {
  let shape: Shape;
  let token: string;
  let tokenId: number;
  let photoServer: http.Server;
  let photoBase: string;

  const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
  const auth = () => ({ Authorization: `Token ${token}` });

  beforeAll(async () => {
    // 50 parallel adds test the database, not admission: the engine queue is sized to take them all.
    shape = await startShape(shapeName, { FACE_DB_POOL: '20', FACE_MAX_ENGINE_INFLIGHT: '64' });
    ({ id: tokenId, token } = await new TokenStore(shape.tdb.db.sql).create(CLI_ACTOR, 'deployment', 'tests'));
    photoServer = http.createServer((req, res) => {
      const m = /^\/sample(\d)\.jpg$/.exec(req.url ?? '');
      if (!m) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'content-type': 'image/jpeg' }).end(sample(Number(m[1])));
    });
    await new Promise<void>((r) => photoServer.listen(0, '127.0.0.1', r));
    photoBase = `http://127.0.0.1:${(photoServer.address() as AddressInfo).port}`;
  }, 240_000);

  afterAll(async () => {
    await shape?.close();
    if (photoServer) await new Promise((r) => photoServer.close(r));
  }, 60_000);

  const call = (method: string, url: string, body?: FormData | object, headers: Record<string, string> = auth()) =>
    request(shape.base(), method, url, body, headers);

  const add = (fields: Record<string, string | Buffer>, type?: string) => call('POST', '/v0/face/', form(fields, type));

  async function faceCount(): Promise<number> {
    const [r] = await shape.tdb.db.owner`SELECT count(*)::int AS n FROM faces`;
    return r.n;
  }

  const FACE_KEYS = ['id', 'meta', 'photo', 'photo_hash', 'timestamp', 'x1', 'y1', 'x2', 'y2', 'galleries'];

  describe('authentication', () => {
    it('refuses missing, malformed and unknown tokens with 401 AUTH_FAILED', async () => {
      for (const headers of [{}, { Authorization: 'Bearer x' }, { Authorization: 'Token nope' }] as Record<string, string>[]) {
        const r = await call('GET', '/v0/galleries/', undefined, headers);
        expect(r.status).toBe(401);
        expect(r.json).toMatchObject({ code: 401, error: 'AUTH_FAILED' });
      }
      expect((await call('GET', '/v0/galleries/')).status).toBe(200);
    });

    it('stops accepting a token as soon as it is revoked', async () => {
      const tokens = new TokenStore(shape.tdb.db.sql);
      const extra = await tokens.create(CLI_ACTOR, 'deployment', 'short-lived');
      const h = { Authorization: `Token ${extra.token}` };
      expect((await call('GET', '/v0/galleries/', undefined, h)).status).toBe(200);
      expect(await tokens.revoke(CLI_ACTOR, 'deployment', extra.id)).toBe(true);
      let status = 0;
      for (let i = 0; i < 50; i++) {
        status = (await call('GET', '/v0/galleries/', undefined, h)).status;
        if (status === 401) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(status).toBe(401);
      expect(await tokens.revoke(CLI_ACTOR, 'deployment', extra.id)).toBe(false);
      expect((await tokens.list('deployment')).map((t) => t.id)).toContain(tokenId);
    });
  });

  describe('POST /v0/face/', () => {
    it('adds the biggest face by default, with the documented Face shape', async () => {
      const bytes = sample(1);
      const r = await add({ photo: bytes, meta: 'first' });
      expect(r.status).toBe(200);
      expect(r.json.results).toHaveLength(1);
      const f = r.json.results[0];
      expect(Object.keys(f)).toEqual(FACE_KEYS);
      expect(f).toMatchObject({ meta: 'first', photo_hash: sha(bytes), galleries: ['default'] });
      expect(f.photo).toBe(`${shape.publicUrl}/v0/photo/${sha(bytes)}/`);
      expect(f.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/);
      expect(f.x2).toBeGreaterThan(f.x1);
      expect(f.y2).toBeGreaterThan(f.y1);
    });

    it('adds every face with mf_selector=all, into extra galleries, with a camera id', async () => {
      expect((await call('POST', '/v0/galleries/visitors/')).status).toBe(201);
      const r = await add({
        photo: sample(5),
        meta: 'crowd',
        mf_selector: 'all',
        galleries: '["visitors"]',
        cam_id: '0b0e5c9a-52c6-4d47-9a0e-7a1f2e3d4c5b',
      });
      expect(r.status).toBe(200);
      expect(r.json.results).toHaveLength(SAMPLE_FACES[5]);
      for (const f of r.json.results) expect(f.galleries).toEqual(['default', 'visitors']);
      const ids = r.json.results.map((f: { id: number }) => f.id);
      expect([...ids].sort((a, b) => a - b)).toEqual(ids);
      // A UUID camera id is kept as 32 lower-case hex digits; each face added is also a sighting.
      const rows = await shape.tdb.db.owner`SELECT DISTINCT cam_id FROM faces WHERE meta = 'crowd'`;
      expect(rows.map((x) => x.cam_id)).toEqual(['0b0e5c9a52c64d479a0e7a1f2e3d4c5b']);
      expect(r.json.sightings.map((e: { face_id: number }) => e.face_id)).toEqual(ids);
    });

    it('answers 400 TOO_MANY_FACES listing every face with mf_selector=reject, storing nothing', async () => {
      const before = await faceCount();
      const r = await add({ photo: sample(4), mf_selector: 'reject' });
      expect(r.status).toBe(400);
      expect(r.json).toMatchObject({ code: 400, error: 'TOO_MANY_FACES', reason: `Too many faces: ${SAMPLE_FACES[4]}` });
      expect(r.json.faces).toHaveLength(SAMPLE_FACES[4]);
      expect(Object.keys(r.json.faces[0])).toEqual(['x1', 'y1', 'x2', 'y2']);
      expect(await faceCount()).toBe(before);
    });

    it('answers 422 NO_FACE for a photo without a face', async () => {
      const r = await add({ photo: blankPng() }, 'image/png');
      expect(r.status).toBe(422);
      expect(r.json).toMatchObject({ code: 422, error: 'NO_FACE', param: 'photo' });
    });

    it.skipIf(!haveSharedFaces)('answers 422 NO_FACE for a real photo of a dog (shared test data)', async () => {
      const r = await add({ photo: sharedFace('noface__dog.jpg') });
      expect(r.status).toBe(422);
    });

    it('answers 404 naming an unknown gallery and stores nothing', async () => {
      const before = await faceCount();
      const r = await add({ photo: sample(2), galleries: '["visitors","ghosts"]' });
      expect(r.status).toBe(404);
      expect(r.json).toMatchObject({ code: 404, error: 'NOT_FOUND' });
      expect(r.json.reason).toContain('ghosts');
      expect(await faceCount()).toBe(before);
    });

    it('rejects bad parameters with 400 BAD_PARAM naming them', async () => {
      for (const [fields, param] of [
        [{ photo: sample(2), cam_id: 'not a camera!' }, 'cam_id'],
        [{ photo: sample(2), galleries: '["bad name"]' }, 'galleries'],
        [{ photo: sample(2), mf_selector: 'most' }, 'mf_selector'],
        [{ meta: 'no photo' }, 'photo'],
      ] as const) {
        const r = await add(fields as Record<string, string | Buffer>);
        expect(r.status, param).toBe(400);
        expect(r.json).toMatchObject({ code: 400, error: 'BAD_PARAM', param });
      }
    });

    it('uses the given boxes instead of detection', async () => {
      const boxes = [
        [10, 10, 110, 120],
        [200, 40, 280, 150],
      ];
      const r = await add({ photo: sample(3), bbox: JSON.stringify(boxes), mf_selector: 'reject' });
      expect(r.status).toBe(200);
      expect(r.json.results.map((f: any) => [f.x1, f.y1, f.x2, f.y2])).toEqual(boxes);
    });

    it('takes a photo by URL in a JSON body and keeps that URL', async () => {
      const url = `${photoBase}/sample2.jpg`;
      const r = await call('POST', '/v0/face/', { photo: url, meta: 'by-url', galleries: ['visitors'] });
      expect(r.status).toBe(200);
      expect(r.json.results[0]).toMatchObject({ photo: url, photo_hash: sha(sample(2)), galleries: ['default', 'visitors'] });
    });

    it.skipIf(!haveSharedFaces)('stores a PNG upload and serves it back as image/png (shared test data)', async () => {
      const png = sharedFace('barack_obama__8.png');
      const r = await add({ photo: png, meta: 'obama' }, 'image/png');
      expect(r.status).toBe(200);
      const photo = await fetch(r.json.results[0].photo, { headers: auth() });
      expect(photo.headers.get('content-type')).toBe('image/png');
      expect(Buffer.from(await photo.arrayBuffer()).equals(png)).toBe(true);
    });
  });

  describe('GET /v0/photo/<hash>/', () => {
    it('serves the stored bytes with their content type, to token holders only', async () => {
      const bytes = sample(6);
      const r = await add({ photo: bytes, meta: 'photo-test' });
      const url = r.json.results[0].photo as string;
      const res = await fetch(url, { headers: auth() });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('image/jpeg');
      expect(sha(Buffer.from(await res.arrayBuffer()))).toBe(sha(bytes));
      expect((await fetch(url)).status).toBe(401);
      expect((await call('GET', `/v0/photo/${'0'.repeat(64)}/`)).status).toBe(404);
      expect((await call('GET', '/v0/photo/xyz/')).json).toMatchObject({ code: 400, error: 'BAD_PARAM', param: 'hash' });
    });
  });

  describe('one face by id', () => {
    it('gets, updates and deletes a face; the photo goes with its last face', async () => {
      expect((await call('POST', '/v0/galleries/g1/')).status).toBe(201);
      expect((await call('POST', '/v0/galleries/g2/')).status).toBe(201);
      const bytes = sample(2);
      // A photo of its own for this test: a byte appended after the JPEG end changes the hash only.
      const own = Buffer.concat([bytes, Buffer.from([0])]);
      const r = await add({ photo: own, meta: 'before', galleries: '["g1"]' });
      const f = r.json.results[0];
      const got = await call('GET', `/v0/face/id/${f.id}/`);
      expect(got.status).toBe(200);
      expect(got.json).toEqual(f);

      let u = await call('PUT', `/v0/face/id/${f.id}/`, { meta: 'after', person_id: 77, galleries: { add: ['g2'] } });
      expect(u.status).toBe(200);
      expect(u.json).toMatchObject({ id: f.id, meta: 'after', galleries: ['default', 'g1', 'g2'] });
      const [row] = await shape.tdb.db.owner`SELECT person_id FROM faces WHERE id = ${f.id}`;
      expect(Number(row.person_id)).toBe(77);
      u = await call('PUT', `/v0/face/id/${f.id}/`, { galleries: { del: ['g1', 'default'] } });
      expect(u.json.galleries).toEqual(['default', 'g2']);
      u = await call('PUT', `/v0/face/id/${f.id}/`, form({ galleries: '{"set":["g1"]}' }));
      expect(u.json.galleries).toEqual(['default', 'g1']);

      for (const body of [{ galleries: { add: ['g1'], set: ['g2'] } }, { galleries: {} }, { galleries: { move: ['g1'] } }, { person_id: 'x' }]) {
        const bad = await call('PUT', `/v0/face/id/${f.id}/`, body);
        expect(bad.status, JSON.stringify(body)).toBe(400);
        expect(bad.json.error).toBe('BAD_PARAM');
      }
      const ghost = await call('PUT', `/v0/face/id/${f.id}/`, { meta: 'lost', galleries: { add: ['ghost'] } });
      expect(ghost.status).toBe(404);
      expect(ghost.json.reason).toContain('ghost');
      expect((await call('GET', `/v0/face/id/${f.id}/`)).json.meta).toBe('after');

      expect((await call('DELETE', `/v0/face/id/${f.id}/`)).status).toBe(204);
      expect((await call('GET', `/v0/face/id/${f.id}/`)).status).toBe(404);
      expect((await call('DELETE', `/v0/face/id/${f.id}/`)).status).toBe(404);
      expect((await call('PUT', `/v0/face/id/${f.id}/`, { meta: 'x' })).status).toBe(404);
      expect((await call('GET', `/v0/photo/${sha(own)}/`)).status).toBe(404);
      expect(await new PhotoBlobs(shape.photos).exists(sha(own))).toBe(false);
    });

    it('answers 400 for ids that are not positive integers', async () => {
      for (const id of ['abc', '1.5', '-3', '0']) {
        for (const method of ['GET', 'DELETE']) {
          const r = await call(method, `/v0/face/id/${id}/`);
          expect(r.status, `${method} ${id}`).toBe(400);
          expect(r.json).toMatchObject({ error: 'BAD_PARAM', param: 'id' });
        }
      }
    });
  });

  describe('lookups by meta', () => {
    it('matches exactly and case-sensitively, decoding %20 but keeping + as a plus', async () => {
      const metas = ['John Smith', 'John+Smith', 'john smith', 'a/b'];
      const ids: Record<string, number> = {};
      for (const meta of metas) ids[meta] = (await add({ photo: sample(3), meta })).json.results[0].id;
      const lookup = async (encoded: string) =>
        (await call('GET', `/v0/face/meta/${encoded}/`)).json.results.map((f: { id: number }) => f.id);
      expect(await lookup('John%20Smith')).toEqual([ids['John Smith']]);
      expect(await lookup('John+Smith')).toEqual([ids['John+Smith']]);
      expect(await lookup('John%2BSmith')).toEqual([ids['John+Smith']]);
      expect(await lookup('john%20smith')).toEqual([ids['john smith']]);
      expect(await lookup('a%2Fb')).toEqual([ids['a/b']]);
      expect(await lookup('nobody')).toEqual([]);
    });

    it('restricts to a gallery, and 404s an unknown one', async () => {
      await call('POST', '/v0/galleries/vip/');
      const inside = (await add({ photo: sample(4), meta: 'shared-meta', galleries: '["vip"]' })).json.results[0].id;
      await add({ photo: sample(4), meta: 'shared-meta' });
      const r = await call('GET', '/v0/face/gallery/vip/meta/shared-meta/');
      expect(r.json.results.map((f: { id: number }) => f.id)).toEqual([inside]);
      expect((await call('GET', '/v0/face/meta/shared-meta/')).json.results).toHaveLength(2);
      expect((await call('GET', '/v0/face/gallery/nope/meta/shared-meta/')).status).toBe(404);
    });
  });

  describe('listings', () => {
    it('lists all faces newest first, and pages through them with next_page and prev_page', async () => {
      const all = (await call('GET', '/v0/faces/')).json.results as Array<{ id: number }>;
      const [n] = await shape.tdb.db.owner`SELECT count(*)::int AS n FROM faces`;
      expect(all).toHaveLength(n.n);
      expect(all.map((f) => f.id)).toEqual([...all.map((f) => f.id)].sort((a, b) => b - a));
      expect(Object.keys(all[0])).toEqual(FACE_KEYS);

      const seen: number[] = [];
      let url: string | undefined = '/v0/faces/?limit=4';
      const pages: any[] = [];
      while (url) {
        const page = await call('GET', url);
        expect(page.status).toBe(200);
        expect(page.json.results.length).toBeLessThanOrEqual(4);
        seen.push(...page.json.results.map((f: { id: number }) => f.id));
        pages.push(page.json);
        url = page.json.next_page;
      }
      expect(seen).toEqual(all.map((f) => f.id));
      expect(pages[0].prev_page).toBeUndefined();
      expect(pages[1].prev_page).toBeDefined();
      const back = await call('GET', pages[1].prev_page);
      expect(back.json.results).toEqual(pages[0].results);
    });

    it('lists a gallery, and answers 404 / 400 for unknown / invalid names', async () => {
      const r = await call('GET', '/v0/faces/gallery/visitors/');
      expect(r.status).toBe(200);
      expect(r.json.results.length).toBeGreaterThanOrEqual(SAMPLE_FACES[5]);
      for (const f of r.json.results) expect(f.galleries).toContain('visitors');
      expect((await call('GET', '/v0/faces/gallery/default/')).json.results.length).toBe(await faceCount());
      expect((await call('GET', '/v0/faces/gallery/unknown/')).status).toBe(404);
      expect((await call('GET', '/v0/faces/gallery/bad%20name/')).status).toBe(400);
    });

    it('summarises metas with counts and first faces, overall and per gallery', async () => {
      const r = await call('GET', '/v0/meta/');
      expect(r.status).toBe(200);
      const crowd = r.json.results.find((m: { meta: string }) => m.meta === 'crowd');
      const rows = await shape.tdb.db.owner`SELECT min(id)::int AS first, count(*)::int AS n FROM faces WHERE meta = 'crowd'`;
      expect(crowd).toMatchObject({ count: rows[0].n, face: { id: rows[0].first, meta: 'crowd' } });
      expect(Object.keys(crowd.face)).toEqual(FACE_KEYS);
      const metas = r.json.results.map((m: { meta: string }) => m.meta);
      expect(new Set(metas).size).toBe(metas.length);
      const g = await call('GET', '/v0/meta/gallery/vip/');
      expect(g.json.results).toEqual([expect.objectContaining({ meta: 'shared-meta', count: 1 })]);
      const paged = await call('GET', '/v0/meta/?limit=2');
      expect(paged.json.results).toEqual(r.json.results.slice(0, 2));
      expect(paged.json.next_page).toMatch(/^\/v0\/meta\/\?limit=2&max_id=\d+$/);
      expect((await call('GET', '/v0/meta/gallery/nope/')).status).toBe(404);
    });

    it('rejects bad paging parameters', async () => {
      for (const q of ['limit=0', 'limit=abc', 'max_id=-1', 'limit=100001']) {
        const r = await call('GET', `/v0/faces/?${q}`);
        expect(r.status, q).toBe(400);
        expect(r.json.error).toBe('BAD_PARAM');
      }
    });

    it('streams a large listing, and survives clients that hang up mid-stream', async () => {
      // Bulk rows written by the store itself, as a restore or an import would.
      const store = new FaceStore(shape.tdb.db.sql, new PhotoStore(shape.tdb.db.sql, new PhotoBlobs(shape.photos)), { model: 'bulk' });
      const photo = sample(1);
      const many = Array.from({ length: 50 }, (_, i) => ({
        box: { x1: i, y1: i, x2: i + 20, y2: i + 20 },
        embedding: new Float32Array(1024).fill(0.03),
      }));
      for (let i = 0; i < 40; i++) await store.addFaces({ tenant: FIRST_TENANT, photo, faces: many, meta: `bulk-${i % 7}`, galleries: [] });
      const total = await faceCount();
      const res = await fetch(`${shape.base()}/v0/faces/`, { headers: auth() });
      expect(res.headers.get('content-type')).toBe('application/json');
      const body = (await res.json()) as { results: unknown[] };
      expect(body.results).toHaveLength(total);

      // Hang up after the first bytes, many times over: cursors must be released, or the pool would run dry.
      for (let i = 0; i < 30; i++) {
        const ac = new AbortController();
        const r = await fetch(`${shape.base()}/v0/faces/`, { headers: auth(), signal: ac.signal });
        const reader = r.body!.getReader();
        await reader.read();
        ac.abort();
        await reader.cancel().catch(() => {});
      }
      const after = await call('GET', '/v0/faces/?limit=1');
      expect(after.status).toBe(200);
      expect(after.json.results).toHaveLength(1);
    });
  });

  describe('galleries', () => {
    it('creates, lists and deletes galleries with their faces', async () => {
      expect((await call('POST', '/v0/galleries/temp-1/')).status).toBe(201);
      const dup = await call('POST', '/v0/galleries/temp-1/');
      expect(dup.status).toBe(409);
      expect(dup.json).toMatchObject({ code: 409, error: 'CONFLICT' });
      for (const bad of ['bad%20name', 'x'.repeat(49), 'dot.ted']) {
        const r = await call('POST', `/v0/galleries/${bad}/`);
        expect(r.status, bad).toBe(400);
        expect(r.json).toMatchObject({ error: 'BAD_PARAM', param: 'gallery' });
      }
      expect((await call('POST', `/v0/galleries/${'y'.repeat(48)}/`)).status).toBe(201);
      const list = (await call('GET', '/v0/galleries/')).json.results as string[];
      expect(list[0]).toBe('default');
      expect(list).toEqual(expect.arrayContaining(['temp-1', 'visitors', 'y'.repeat(48)]));

      const own = Buffer.concat([sample(5), Buffer.from('gallery-delete')]);
      const added = (await add({ photo: own, meta: 'temp', mf_selector: 'all', galleries: '["temp-1"]' })).json.results;
      const kept = (await add({ photo: sample(6), meta: 'temp-kept', galleries: '["temp-1"]' })).json.results[0];
      // A face in two galleries is deleted with either.
      expect((await call('PUT', `/v0/face/id/${kept.id}/`, { galleries: { add: ['visitors'] } })).status).toBe(200);
      expect((await call('DELETE', '/v0/galleries/temp-1/')).status).toBe(204);
      for (const f of [...added, kept]) expect((await call('GET', `/v0/face/id/${f.id}/`)).status).toBe(404);
      expect((await call('GET', `/v0/photo/${sha(own)}/`)).status).toBe(404);
      expect((await call('GET', `/v0/photo/${sha(sample(6))}/`)).status).toBe(200);
      expect((await call('GET', '/v0/galleries/')).json.results).not.toContain('temp-1');
      expect((await call('DELETE', '/v0/galleries/temp-1/')).status).toBe(404);
      const d = await call('DELETE', '/v0/galleries/default/');
      expect(d.status).toBe(400);
      expect(d.json).toMatchObject({ code: 400, error: 'BAD_PARAM' });
    });
  });

  describe('concurrency', () => {
    const BOX = '[[40,40,160,170]]';

    it('50 parallel adds and deletes leave counts, galleries and photos consistent', { timeout: 300_000 }, async () => {
      await call('POST', '/v0/galleries/busy/');
      const photos = [1, 2, 3, 4, 5].map((n) => Buffer.concat([sample(n), Buffer.from(`busy-${n}`)]));
      const results = await Promise.all(
        Array.from({ length: 50 }, async (_, i) => {
          // Caller boxes skip the detector (seconds per photo on a small CPU) but keep the embedding path.
          const r = await add({ photo: photos[i % 5], meta: `busy-${i}`, galleries: '["busy"]', bbox: BOX });
          expect(r.status).toBe(200);
          const id = r.json.results[0].id as number;
          if (i % 2 === 0) expect((await call('DELETE', `/v0/face/id/${id}/`)).status).toBe(204);
          return { i, id };
        }),
      );
      const survivors = results.filter((r) => r.i % 2 === 1).map((r) => r.id).sort((a, b) => b - a);
      const listed = (await call('GET', '/v0/faces/gallery/busy/')).json.results.map((f: { id: number }) => f.id);
      expect(listed).toEqual(survivors);

      const sql = shape.tdb.db.owner;
      const [c] = await sql`
        SELECT (SELECT count(*) FROM photos p WHERE NOT EXISTS (SELECT 1 FROM faces f WHERE f.photo_hash = p.hash))::int AS unused,
               (SELECT count(*) FROM faces f WHERE NOT EXISTS (SELECT 1 FROM photos p WHERE p.hash = f.photo_hash))::int AS dangling,
               (SELECT count(*) FROM photo_gc)::int AS queued`;
      expect(c).toEqual({ unused: 0, dangling: 0, queued: 0 });
      const rows = (await sql`SELECT hash FROM photos ORDER BY hash`).map((r) => r.hash as string);
      const files: string[] = [];
      for await (const e of new PhotoBlobs(shape.photos).walk()) files.push(e.hash);
      expect(files.sort()).toEqual(rows);

      // Now delete the gallery while adds into it are running: every add either lands before (and is deleted) or fails 404.
      const racing = Array.from({ length: 10 }, (_, i) => add({ photo: photos[i % 5], meta: 'race', galleries: '["busy"]', bbox: BOX }));
      const del = call('DELETE', '/v0/galleries/busy/');
      const statuses = (await Promise.all(racing)).map((r) => r.status);
      expect((await del).status).toBe(204);
      for (const s of statuses) expect([200, 404]).toContain(s);
      const [left] = await sql`SELECT count(*)::int AS n FROM face_galleries WHERE gallery = 'busy'`;
      expect(left.n).toBe(0);
    });
  });

  describe('documentation', () => {
    it('documents every database route in the v0 OpenAPI document', async () => {
      const doc = (await call('GET', '/docs/v0', undefined, {})).json;
      for (const [p, m] of [
        ['/v0/face/', 'post'],
        ['/v0/face/id/{id}/', 'get'],
        ['/v0/face/id/{id}/', 'put'],
        ['/v0/face/id/{id}/', 'delete'],
        ['/v0/face/meta/{meta}/', 'get'],
        ['/v0/face/gallery/{gallery}/meta/{meta}/', 'get'],
        ['/v0/faces/', 'get'],
        ['/v0/faces/gallery/{gallery}/', 'get'],
        ['/v0/meta/', 'get'],
        ['/v0/meta/gallery/{gallery}/', 'get'],
        ['/v0/galleries/', 'get'],
        ['/v0/galleries/{gallery}/', 'post'],
        ['/v0/galleries/{gallery}/', 'delete'],
        ['/v0/photo/{hash}/', 'get'],
      ]) {
        expect(doc.paths[p]?.[m], `${m} ${p}`).toBeDefined();
      }
      expect(doc.components.schemas.Face).toBeDefined();
    });
  });
});
