/**
 * Client code written for the API this one descends from, byte for byte as common HTTP
 * libraries write it: form arrays (`galleries[]`, `galleries[add][]`), empty strings for
 * optional fields, and the older paths. The real server, engine and database, in every shape
 * under `npm run test:shapes` (test/harness/shapes.ts).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shapeOf } from '../../src/http/params.js';
import { addFaceRequest } from '../../src/routes/face.js';
import { verifyRequest } from '../../src/routes/verify.js';
import { form, sample } from '../harness/images.js';
import { AUTH, request } from '../harness/service.js';
import { shapesUnderTest, startShape, type Shape } from '../harness/shapes.js';

describe.each(shapesUnderTest({ inCi: false }))('older clients (%s)', (shapeName) => {
  let shape: Shape;
  let photoServer: http.Server;
  let photoUrl: string;

  const call = (method: string, url: string, body?: FormData | object) => request(shape.base(), method, url, body, AUTH);

  /** A request with a body exactly as given. */
  async function raw(method: string, url: string, contentType: string, body: Buffer | string) {
    const res = await fetch(`${shape.base()}${url}`, { method, headers: { ...AUTH, 'Content-Type': contentType }, body: typeof body === 'string' ? body : new Uint8Array(body) });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : undefined };
  }

  /** A multipart body the way PHP's curl and Ruby's HTTParty write one, with bracketed names kept verbatim. */
  function multipart(fields: [string, string | Buffer][]): { type: string; body: Buffer } {
    const boundary = '------------------------d74496d66958873e';
    const parts = fields.map(([name, value]) =>
      Buffer.concat([
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${name}"` +
            (typeof value === 'string' ? '\r\n\r\n' : `; filename="photo.jpg"\r\nContent-Type: image/jpeg\r\n\r\n`),
        ),
        typeof value === 'string' ? Buffer.from(value) : value,
        Buffer.from('\r\n'),
      ]),
    );
    return { type: `multipart/form-data; boundary=${boundary}`, body: Buffer.concat([...parts, Buffer.from(`--${boundary}--\r\n`)]) };
  }

  const URLENCODED = 'application/x-www-form-urlencoded';

  beforeAll(async () => {
    shape = await startShape(shapeName);
    photoServer = http.createServer((_, res) => {
      res.writeHead(200, { 'Content-Type': 'image/jpeg' });
      res.end(sample(1));
    });
    await new Promise<void>((r) => photoServer.listen(0, '127.0.0.1', r));
    photoUrl = `http://127.0.0.1:${(photoServer.address() as AddressInfo).port}/sample1.jpg`;
    for (const g of ['staff', 'vip']) expect((await call('POST', `/v0/galleries/${g}/`)).status).toBe(201);
  });

  afterAll(async () => {
    await shape?.close();
    await new Promise((r) => photoServer?.close(r));
  });

  describe('form arrays as libraries write them', () => {
    it('takes galleries[] in a multipart body', async () => {
      const { type, body } = multipart([
        ['photo', sample(1)],
        ['meta', 'multipart'],
        ['galleries[]', 'staff'],
        ['galleries[]', 'vip'],
      ]);
      const r = await raw('POST', '/v0/face/', type, body);
      expect(r.status).toBe(200);
      expect(r.json.results[0].galleries.sort()).toEqual(['default', 'staff', 'vip']);
    });

    it('takes galleries[] in an urlencoded body, and galleries[add][] in a PUT', async () => {
      const r = await raw('POST', '/v0/face/', URLENCODED, `photo=${encodeURIComponent(photoUrl)}&meta=urlencoded&galleries%5B%5D=staff`);
      expect(r.status).toBe(200);
      const face = r.json.results[0];
      expect(face.galleries.sort()).toEqual(['default', 'staff']);
      const put = await raw('PUT', `/v0/face/id/${face.id}/`, URLENCODED, 'galleries%5Badd%5D%5B%5D=vip');
      expect(put.status).toBe(200);
      expect(put.json.galleries.sort()).toEqual(['default', 'staff', 'vip']);
      const del = await raw('PUT', `/v0/face/id/${face.id}/`, URLENCODED, 'galleries[del][]=staff&galleries[del][]=vip');
      expect(del.status).toBe(200);
      expect(del.json.galleries).toEqual(['default']);
    });

    it('still refuses a misspelt name, written as the client wrote it, with the nearest one', async () => {
      const a = await raw('POST', '/v0/face/', URLENCODED, `photo=${encodeURIComponent(photoUrl)}&galeries%5B%5D=staff`);
      expect(a.status).toBe(400);
      expect(a.json).toMatchObject({ code: 400, error: 'BAD_PARAM', param: 'galeries[]' });
      expect(a.json.reason).toContain('unknown parameter "galeries[]"; did you mean "galleries"?');
      const b = await raw('POST', '/v0/galleries/', URLENCODED, 'nam%5B%5D=x');
      expect(b.status).toBe(400);
      expect(b.json.reason).toContain('did you mean "name"?');
    });
  });

  describe('empty strings for optional fields', () => {
    /** Every optional field of a request schema, as an empty string. */
    const emptyOptionals = (schema: Parameters<typeof shapeOf>[0], required: string[]) =>
      Object.fromEntries(
        Object.keys(shapeOf(schema))
          .filter((k) => !required.includes(k))
          .map((k) => [k, '']),
      );

    it('count as not given in verify, identify and face add', async () => {
      const verify = await call('POST', '/v0/verify/', form({ photo1: sample(1), photo2: sample(1), ...emptyOptionals(verifyRequest, ['photo1', 'photo2']) }));
      expect(verify.status, verify.text).toBe(200);
      expect(verify.json.verified).toBe(true);
      const add = await call('POST', '/v0/face/', form({ photo: sample(2), ...emptyOptionals(addFaceRequest, ['photo']) }));
      expect(add.status, add.text).toBe(200);
      expect(add.json.results[0].meta).toBe('');
      const fields = ['bbox', 'x1', 'y1', 'x2', 'y2', 'threshold', 'n', 'strict', 'mf_selector', 'gallery', 'cam_id', 'timestamp'];
      const identify = await call('POST', '/v0/identify/', form({ photo: sample(2), ...Object.fromEntries(fields.map((f) => [f, ''])) }));
      expect(identify.status, identify.text).toBe(200);
      expect(Object.values(identify.json.results as Record<string, unknown[]>)[0]).toHaveLength(1);
      // A typed client's JSON zero values.
      const json = await call('POST', '/v0/verify/', { photo1: photoUrl, photo2: photoUrl, mf_selector: '', threshold: '' });
      expect(json.status, json.text).toBe(200);
    });

    it('keep a required field required, and say the enforced range of a number of any size', async () => {
      const r = await call('POST', '/v0/verify/', { photo1: '', photo2: photoUrl });
      expect(r.status).toBe(400);
      expect(r.json).toMatchObject({ error: 'BAD_PARAM', param: 'photo1', reason: 'photo1: is required' });
      const n = await call('POST', '/v0/identify/', form({ photo: sample(1), n: '99999999999999999999999' }));
      expect(n.status).toBe(400);
      expect(n.json.reason).toBe('n: must be at most 100');
    });
  });

  describe('paths of the older API', () => {
    it('POST /v0/detect/ is /v1/detect/', async () => {
      const r = await call('POST', '/v0/detect/', form({ photo: sample(1) }));
      expect(r.status).toBe(200);
      expect(r.json.faces).toHaveLength(3);
    });

    it('creates a gallery named in the body, answering 200 with a JSON body naming it', async () => {
      expect(await raw('POST', '/v0/galleries', URLENCODED, 'name=older')).toEqual({ status: 200, json: { name: 'older' } });
      expect(await raw('POST', '/v0/galleries/', 'application/json', '{"name":"older-json"}')).toEqual({ status: 200, json: { name: 'older-json' } });
      expect((await call('POST', '/v0/galleries/', { name: 'older-json' })).status).toBe(409);
      // The current route keeps its 201 with no body.
      expect((await call('POST', '/v0/galleries/newer/')).status).toBe(201);
      const list = await call('GET', '/v0/galleries/');
      expect(list.json.results).toEqual(expect.arrayContaining(['older', 'older-json']));
    });

    it('reads bracketed numbers as numbers: bbox[], bbox[0] and bbox1[x1], urlencoded and multipart', async () => {
      const [face] = (await call('POST', '/v1/detect/', form({ photo: sample(1) }))).json.faces as { x1: number; y1: number; x2: number; y2: number }[];
      const key = `[${face.x1}, ${face.y1}, ${face.x2}, ${face.y2}]`;
      const corners = [face.x1, face.y1, face.x2, face.y2];
      const photo = encodeURIComponent(photoUrl);
      // PHP's http_build_query writes bbox[0]=…; Ruby's HTTParty and qs write bbox[]=….
      for (const spelling of [corners.map((v) => `bbox%5B%5D=${v}`), corners.map((v, i) => `bbox%5B${i}%5D=${v}`), corners.map((v, i) => `bbox%5B0%5D%5B${i}%5D=${v}`)]) {
        const r = await raw('POST', '/v0/identify/', URLENCODED, [`photo=${photo}`, ...spelling, 'threshold=none'].join('&'));
        expect(r.status, JSON.stringify(r.json)).toBe(200);
        expect(Object.keys(r.json.results)).toEqual([key]);
      }
      const { type, body } = multipart([
        ['photo1', sample(1)],
        ['photo2', sample(1)],
        ...(['x1', 'y1', 'x2', 'y2'] as const).map((k): [string, string] => [`bbox1[${k}]`, String(face[k])]),
        ['threshold', 'none'],
      ]);
      const v = await raw('POST', '/v0/verify/', type, body);
      expect(v.status, JSON.stringify(v.json)).toBe(200);
      expect(v.json.results.every((p: { bbox1: object }) => JSON.stringify(p.bbox1) === JSON.stringify(face))).toBe(true);
      // Text that is no number is still refused, naming the field.
      const bad = await raw('POST', '/v0/identify/', URLENCODED, [`photo=${photo}`, 'bbox%5B%5D=1', 'bbox%5B%5D=two', 'bbox%5B%5D=3', 'bbox%5B%5D=4'].join('&'));
      expect(bad.json).toMatchObject({ code: 400, error: 'BAD_PARAM', param: 'bbox' });
    });

    it('refuses age, gender and emotions on face create, saying detect estimates them, and stores nothing', async () => {
      for (const name of ['age', 'gender', 'emotions']) {
        const r = await call('POST', '/v0/face/', form({ photo: sample(2), meta: 'with-attributes', [name]: 'true' }));
        expect(r.json).toMatchObject({ code: 400, error: 'BAD_PARAM', param: name });
        expect(r.json.reason).toContain('/v1/detect/');
      }
      expect((await call('GET', '/v0/face/meta/with-attributes/')).json.results).toEqual([]);
      // false is no request at all.
      const plain = await call('POST', '/v0/face/', form({ photo: sample(2), meta: 'with-attributes', age: 'false' }));
      expect(plain.status, plain.text).toBe(200);
    });

    it('lists a gallery by meta under the plural path', async () => {
      const r = await call('POST', '/v0/face/', form({ photo: sample(3), meta: 'plural', galleries: 'staff' }));
      expect(r.status).toBe(200);
      const plural = await call('GET', '/v0/faces/gallery/staff/meta/plural/');
      const singular = await call('GET', '/v0/face/gallery/staff/meta/plural/');
      expect(plural.status).toBe(200);
      expect(plural.json).toEqual(singular.json);
      expect(plural.json.results.map((f: { meta: string }) => f.meta)).toEqual(['plural']);
    });

    it('deletes every face with a meta, and answers 404 when there is none', async () => {
      for (const photo of [sample(4), sample(5)]) expect((await call('POST', '/v0/face/', form({ photo, meta: 'to-go' }))).status).toBe(200);
      expect((await call('GET', '/v0/face/meta/to-go/')).json.results).toHaveLength(2);
      expect((await call('DELETE', '/v0/face/meta/to-go/')).status).toBe(204);
      expect((await call('GET', '/v0/face/meta/to-go/')).json.results).toHaveLength(0);
      const again = await call('DELETE', '/v0/face/meta/to-go/');
      expect(again.status).toBe(404);
      expect(again.json).toMatchObject({ code: 404, error: 'NOT_FOUND' });
    });

    it('takes the gallery repeated in the body of a gallery identify when it is the same', async () => {
      const same = await call('POST', '/v0/faces/gallery/staff/identify/', form({ photo: sample(3), gallery: 'staff' }));
      expect(same.status).toBe(200);
      const other = await call('POST', '/v0/faces/gallery/staff/identify/', form({ photo: sample(3), gallery: 'vip' }));
      expect(other.status).toBe(400);
      expect(other.json).toMatchObject({ code: 400, error: 'BAD_PARAM', param: 'gallery' });
      expect(other.json.reason).toContain('differs from the gallery of the path');
    });

    it('marks every alias deprecated in the OpenAPI document, naming what it stands for', async () => {
      const doc = (await call('GET', '/docs/v0')).json;
      expect(doc, 'the v0 OpenAPI document').toBeDefined();
      for (const [path, method] of [
        ['/v0/detect/', 'post'],
        ['/v0/galleries/', 'post'],
        ['/v0/face/meta/{meta}/', 'delete'],
        ['/v0/faces/gallery/{gallery}/meta/{meta}/', 'get'],
      ]) {
        const op = doc.paths[path]?.[method];
        expect(op, `${method} ${path}`).toBeDefined();
        expect(op.deprecated).toBe(true);
        expect(op.description).toMatch(/^Deprecated alias of `/);
      }
      expect(doc.paths['/v0/galleries/'].get.deprecated).toBeUndefined();
    });
  });
});
