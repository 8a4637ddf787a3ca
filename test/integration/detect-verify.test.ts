/**
 * Detect and verify through the real server, real engine and real photos, in
 * every shape under `npm run test:shapes` (test/harness/shapes.ts); one
 * process in a plain run, since an API node answers these alone.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { blankPng, form, haveSharedFaces, sample, SAMPLE_FACES, sharedFace } from '../harness/images.js';
import { AUTH, request } from '../harness/service.js';
import { shapesUnderTest, startShape, type Shape } from '../harness/shapes.js';

describe.each(shapesUnderTest({ inCi: false }))('detect and verify (%s)', (shapeName) => {
  let shape: Shape;
  let photoServer: http.Server;
  let photoBase: string;

  beforeAll(async () => {
    shape = await startShape(shapeName);
    // A local photo host for URL inputs (private addresses are allowed in tests).
    photoServer = http.createServer((req, res) => {
      if (req.url === '/sample1.jpg') {
        res.writeHead(200, { 'Content-Type': 'image/jpeg' });
        res.end(sample(1));
      } else {
        res.writeHead(404).end();
      }
    });
    await new Promise<void>((r) => photoServer.listen(0, '127.0.0.1', r));
    photoBase = `http://127.0.0.1:${(photoServer.address() as AddressInfo).port}`;
  }, 240_000);

  afterAll(async () => {
    await shape?.close();
    await new Promise((r) => photoServer?.close(r));
  });

  async function post(path: string, body: FormData | object, headers: Record<string, string> = AUTH) {
    const r = await request(shape.base(), 'POST', path, body, headers);
    return { status: r.status, body: r.json, headers: r.headers };
  }

  describe('POST /v1/detect/', () => {
    it.each(Object.entries(SAMPLE_FACES).map(([i, n]) => [Number(i), n]))('finds every face on demo photo %i (%i faces)', async (i, n) => {
      const r = await post('/v1/detect/', form({ photo: sample(i) }));
      expect(r.status).toBe(200);
      expect(r.body.faces).toHaveLength(n);
      for (const f of r.body.faces) {
        expect(Object.keys(f)).toEqual(['x1', 'y1', 'x2', 'y2']);
        expect(f.x2).toBeGreaterThan(f.x1);
        expect(f.y2).toBeGreaterThan(f.y1);
      }
    });

    it('reports age, gender and emotions only when asked', async () => {
      const r = await post('/v1/detect/', form({ photo: sample(1), age: 'true', gender: 'true', emotions: 'true' }));
      expect(r.status).toBe(200);
      for (const f of r.body.faces) {
        expect(Number.isInteger(f.age)).toBe(true);
        expect(f.age).toBeGreaterThan(0);
        expect(['male', 'female']).toContain(f.gender);
        expect([...f.emotions].sort()).toEqual(['angry', 'disgust', 'fear', 'happy', 'neutral', 'sad', 'surprise']);
      }
      const some = await post('/v1/detect/', form({ photo: sample(1), age: 'true' }));
      expect(some.body.faces[0].age).toBeTypeOf('number');
      expect(some.body.faces[0].gender).toBeUndefined();
      expect(some.body.faces[0].emotions).toBeUndefined();
    });

    it('gives five landmarks and a quality per face only when asked', async () => {
      // Sample 6: four faces turned less than about 30 degrees (sample 2 has a profile, quality 0).
      const r = await post('/v1/detect/', form({ photo: sample(6), landmarks: 'true', quality: 'true' }));
      expect(r.status).toBe(200);
      expect(r.body.faces).toHaveLength(SAMPLE_FACES[6]);
      for (const f of r.body.faces) {
        expect(Object.keys(f)).toEqual(['x1', 'y1', 'x2', 'y2', 'landmarks', 'quality']);
        expect(f.quality).toBeGreaterThan(0.3);
        expect(f.quality).toBeLessThanOrEqual(1);
        expect(f.landmarks).toHaveLength(5);
        const [rightEye, leftEye, nose, mouthRight, mouthLeft] = f.landmarks as [number, number][];
        const w = f.x2 - f.x1;
        for (const [x, y] of f.landmarks) {
          expect(x).toBeGreaterThan(f.x1 - 0.1 * w);
          expect(x).toBeLessThan(f.x2 + 0.1 * w);
          expect(y).toBeGreaterThan(f.y1);
          expect(y).toBeLessThan(f.y2);
        }
        // The subject's right eye and mouth corner are on the image's left; eyes above the nose above the mouth.
        expect(rightEye[0]).toBeLessThan(leftEye[0]);
        expect(mouthRight[0]).toBeLessThan(mouthLeft[0]);
        expect(Math.max(rightEye[1], leftEye[1])).toBeLessThan(nose[1]);
        expect(nose[1]).toBeLessThan(Math.min(mouthRight[1], mouthLeft[1]));
      }
      const plain = await post('/v1/detect/', form({ photo: sample(6) }));
      expect(plain.body.faces[0].landmarks).toBeUndefined();
      expect(plain.body.faces[0].quality).toBeUndefined();
    });

    it('fetches a photo by URL given in JSON', async () => {
      const r = await post('/v1/detect/', { photo: `${photoBase}/sample1.jpg` });
      expect(r.status).toBe(200);
      expect(r.body.faces).toHaveLength(3);
    });

    it.runIf(haveSharedFaces)('finds exactly the labelled number of faces on every labelled photo', async () => {
      const labels = JSON.parse(sharedFace('labels.json').toString('utf8')) as { file: string; faces: number | null }[];
      const counted = labels.filter((l) => l.faces !== null);
      expect(counted.length).toBeGreaterThan(100);
      const wrong: string[] = [];
      for (const l of counted) {
        const r = await post('/v1/detect/', form({ photo: sharedFace(l.file) }));
        if (r.status !== 200 || r.body.faces.length !== l.faces) wrong.push(`${l.file}: ${r.status} ${r.body.faces?.length} != ${l.faces}`);
      }
      expect(wrong).toEqual([]);
    });

    it.runIf(haveSharedFaces)('finds no face on photos without people', async () => {
      for (const file of ['noface__dog.jpg', 'noface__giraffe.jpg', 'noface__blank_white.png']) {
        const r = await post('/v1/detect/', form({ photo: sharedFace(file) }));
        expect(r.status, file).toBe(200);
        expect(r.body.faces, file).toEqual([]);
      }
    });

    it.runIf(haveSharedFaces)('recognises the labelled emotion of a clear expression', async () => {
      const r = await post('/v1/detect/', form({ photo: sharedFace('anon__emotion_happy.jpg'), emotions: 'true' }));
      expect(r.body.faces[0].emotions[0]).toBe('happy');
    });
  });

  describe('bad input keeps the server serving', () => {
    const cases: [string, () => Promise<{ status: number; body: any }>, number, string][] = [
      ['a truncated JPEG', () => post('/v1/detect/', form({ photo: sample(1).subarray(0, 40_000) })), 400, 'IMAGE_CORRUPT'],
      ['a text file', () => post('/v1/detect/', form({ photo: Buffer.from('hello, I am not an image\n') }, 'text/plain')), 415, 'IMAGE_UNSUPPORTED'],
      ['a 0-byte upload', () => post('/v1/detect/', form({ photo: Buffer.alloc(0) })), 400, 'IMAGE_CORRUPT'],
      ['a 70-megapixel image (10000×7000, real pixels)', () => post('/v1/detect/', form({ photo: blankPng(10000, 7000) }, 'image/png')), 413, 'IMAGE_TOO_LARGE'],
      ['a URL to a closed port', () => post('/v1/detect/', { photo: 'http://127.0.0.1:1/photo.jpg' }), 400, 'PHOTO_FETCH_FAILED'],
      ['a URL with a non-http scheme', () => post('/v1/detect/', { photo: 'file:///etc/passwd' }), 400, 'BAD_PARAM'],
      ['a missing token', () => post('/v1/detect/', form({ photo: sample(1) }), {}), 401, 'AUTH_FAILED'],
      ['a wrong token', () => post('/v1/detect/', form({ photo: sample(1) }), { Authorization: 'Token nope' }), 401, 'AUTH_FAILED'],
      ['a missing photo', () => post('/v1/detect/', { age: true }), 400, 'BAD_PARAM'],
      ['a wrong type', () => post('/v1/detect/', form({ photo: sample(1), age: 'maybe' })), 400, 'BAD_PARAM'],
    ];

    it.each(cases)('answers %s with its documented error', async (_name, send, status, error) => {
      const r = await send();
      expect(r.status).toBe(status);
      expect(r.body).toMatchObject({ code: status, error });
      expect(r.body.reason).toBeTypeOf('string');
      const ok = await post('/v1/detect/', form({ photo: sample(4) }));
      expect(ok.status).toBe(200);
      expect(ok.body.faces).toHaveLength(4);
    });
  });

  describe('POST /v0/verify/', () => {
    it('matches a photo with itself at full confidence', async () => {
      const r = await post('/v0/verify/', form({ photo1: sample(2), photo2: sample(2) }));
      expect(r.status).toBe(200);
      expect(r.body.results).toHaveLength(1);
      expect(r.body.results[0].confidence).toBeGreaterThan(0.99);
      expect(r.body.results[0].verified).toBe(true);
      expect(r.body.verified).toBe(true);
    });

    it('rejects a group photo under mf_selector=reject with the faces listed', async () => {
      const r = await post('/v0/verify/', form({ photo1: sample(1), photo2: sample(2), mf_selector: 'reject' }));
      expect(r.status).toBe(400);
      expect(r.body).toMatchObject({ code: 400, reason: 'Too many faces: 3', error: 'TOO_MANY_FACES' });
      expect(r.body.faces).toHaveLength(3);
    });

    it('compares every pair under mf_selector=all, and gives no verdict with threshold=none', async () => {
      const r = await post('/v0/verify/', form({ photo1: sample(1), photo2: sample(1), mf_selector: 'all', threshold: 'none' }));
      expect(r.status).toBe(200);
      expect(r.body.results).toHaveLength(9);
      expect(r.body.verified).toBeUndefined();
      for (const p of r.body.results) {
        expect(p.verified).toBeUndefined();
        expect(p.confidence).toBeGreaterThanOrEqual(0);
        expect(p.confidence).toBeLessThanOrEqual(1);
      }
      // Each face matches itself best: the diagonal of the 3×3 comparison.
      const same = r.body.results.filter((p: any) => JSON.stringify(p.bbox1) === JSON.stringify(p.bbox2));
      expect(same).toHaveLength(3);
      for (const p of same) expect(p.confidence).toBeGreaterThan(0.99);
    });

    it('uses caller boxes instead of detection', async () => {
      const detected = await post('/v1/detect/', form({ photo: sample(1) }));
      const f = detected.body.faces[2];
      const box = [f.x1, f.y1, f.x2, f.y2];
      const r = await post('/v0/verify/', form({ photo1: sample(1), photo2: sample(1), bbox1: JSON.stringify([box]), bbox2: JSON.stringify([box]) }));
      expect(r.status).toBe(200);
      expect(r.body.results).toHaveLength(1);
      expect(r.body.results[0].bbox1).toEqual({ x1: f.x1, y1: f.y1, x2: f.x2, y2: f.y2 });
      expect(r.body.results[0].confidence).toBeGreaterThan(0.99);
    });

    it('is verified at the top level only when every face of photo1 has a match on photo2', async () => {
      const detected = await post('/v1/detect/', form({ photo: sample(1) }));
      const f = detected.body.faces[0];
      const one = JSON.stringify([[f.x1, f.y1, f.x2, f.y2]]);
      const allVsOne = await post('/v0/verify/', form({ photo1: sample(1), photo2: sample(1), mf_selector: 'all', bbox2: one }));
      expect(allVsOne.status).toBe(200);
      expect(allVsOne.body.results).toHaveLength(3);
      expect(allVsOne.body.results.filter((p: any) => p.verified)).toHaveLength(1);
      expect(allVsOne.body.verified).toBe(false);
      const oneVsAll = await post('/v0/verify/', form({ photo1: sample(1), photo2: sample(1), mf_selector: 'all', bbox1: one }));
      expect(oneVsAll.body.results).toHaveLength(3);
      expect(oneVsAll.body.verified).toBe(true);
    });

    it.runIf(haveSharedFaces)('verifies two different photos of one person', async () => {
      for (const [a, b] of [
        ['barack_obama__1.jpg', 'barack_obama__4.jpg'],
        ['joe_biden__1.jpg', 'joe_biden__2.jpg'],
        ['kit_harington__1.jpg', 'kit_harington__3.jpg'],
      ]) {
        const r = await post('/v0/verify/', form({ photo1: sharedFace(a), photo2: sharedFace(b) }));
        expect(r.status, `${a} ~ ${b}`).toBe(200);
        expect(r.body.verified, `${a} ~ ${b}: ${r.body.results[0]?.confidence}`).toBe(true);
      }
    });

    it.runIf(haveSharedFaces)('does not verify two different people', async () => {
      for (const [a, b] of [
        ['barack_obama__1.jpg', 'joe_biden__1.jpg'],
        ['kit_harington__1.jpg', 'rose_leslie__1.jpg'],
        ['alex_lacamoire__2.jpg', 'lin_manuel_miranda__1.png'],
      ]) {
        const r = await post('/v0/verify/', form({ photo1: sharedFace(a), photo2: sharedFace(b) }));
        expect(r.status, `${a} ~ ${b}`).toBe(200);
        expect(r.body.verified, `${a} ~ ${b}: ${r.body.results[0]?.confidence}`).toBe(false);
      }
    });

    it.runIf(haveSharedFaces)('answers a photo without a face with 422 NO_FACE naming it', async () => {
      const r = await post('/v0/verify/', form({ photo1: sample(2), photo2: sharedFace('noface__dog.jpg') }));
      expect(r.status).toBe(422);
      expect(r.body).toMatchObject({ code: 422, error: 'NO_FACE', param: 'photo2' });
    });
  });

  describe('verify on labelled people', () => {
    // Two photos each of six people: news photos and tight grey TV-series crops.
    const people = ['barack_obama', 'joe_biden', 'kit_harington', 'rose_leslie', 'sheldon', 'penny'];
    const photos = people.flatMap((p) => [1, 2].map((n) => ({ person: p, file: `${p}__${n}.${p === 'sheldon' || p === 'penny' ? 'png' : 'jpg'}` })));

    it.skipIf(!haveSharedFaces)('verifies every same-person pair and no other at the medium preset', async () => {
      const wrong: string[] = [];
      for (let i = 0; i < photos.length; i++) {
        for (let j = i + 1; j < photos.length; j++) {
          const r = await post('/v0/verify/', form({ photo1: sharedFace(photos[i].file), photo2: sharedFace(photos[j].file), threshold: 'medium' }));
          expect(r.status).toBe(200);
          const same = photos[i].person === photos[j].person;
          if (r.body.verified !== same) wrong.push(`${photos[i].file} vs ${photos[j].file}: ${JSON.stringify(r.body.results)}`);
        }
      }
      expect(wrong).toEqual([]);
    }, 120_000);
  });

  describe('docs', () => {
    it('lists versions and serves OpenAPI 3.1 per version without a token', async () => {
      const list = await fetch(`${shape.base()}/docs`);
      expect(list.status).toBe(200);
      const v0 = await (await fetch(`${shape.base()}/docs/v0`)).json();
      expect(v0.openapi).toMatch(/^3\.1/);
      expect(Object.keys(v0.paths)).toContain('/v0/verify/');
      const v1 = await (await fetch(`${shape.base()}/docs/v1`)).json();
      expect(Object.keys(v1.paths)).toContain('/v1/detect/');
      expect((await fetch(`${shape.base()}/docs/v7`)).status).toBe(404);
    });
  });
});
