/**
 * HTTP behaviour of the real server with tight body limits: size limits,
 * content types, malformed bodies, routing, docs and health.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { form, sample } from '../harness/images.js';
import { AUTH, startTestService, type TestService } from '../harness/service.js';

let svc: TestService;

beforeAll(async () => {
  // Fixed shapes as a GPU host has them, so /health reports a warm-up (the answers do not change: crates/engine/tests/fixed_shapes.rs).
  svc = await startTestService({ FACE_MAX_UPLOAD_BYTES: '300000', FACE_MAX_BODY_BYTES: '400000', FACE_FIXED_SHAPES: 'on' });
});

afterAll(async () => {
  await svc?.close();
});

const url = (p: string) => `${svc.base}${p}`;
const json = { ...AUTH, 'content-type': 'application/json' };

describe('limits and body formats', () => {
  it('accepts an upload under the limit', async () => {
    const photo = sample(2);
    expect(photo.length).toBeLessThan(300_000);
    const res = await fetch(url('/v1/detect/'), { method: 'POST', headers: AUTH, body: form({ photo }) });
    expect(res.status).toBe(200);
    expect((await res.json()).faces).toHaveLength(3);
  });

  it('refuses an upload over the limit with 413', async () => {
    const photo = Buffer.concat([sample(1), sample(3)]);
    expect(photo.length).toBeGreaterThan(300_000);
    const res = await fetch(url('/v1/detect/'), { method: 'POST', headers: AUTH, body: form({ photo }) });
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({ code: 413, error: 'PAYLOAD_TOO_LARGE' });
  });

  it('refuses a body over the limit with 413', async () => {
    const res = await fetch(url('/v1/detect/'), { method: 'POST', headers: json, body: 'x'.repeat(500_000) });
    expect(res.status).toBe(413);
  });

  it('answers a missing photo with 400 BAD_PARAM naming it', async () => {
    const res = await fetch(url('/v1/detect/'), { method: 'POST', headers: json, body: JSON.stringify({ age: true }) });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ code: 400, error: 'BAD_PARAM', param: 'photo', reason: 'photo: is required' });
  });

  it('rejects malformed JSON', async () => {
    const res = await fetch(url('/v1/detect/'), { method: 'POST', headers: json, body: '{"photo": ' });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: 400, error: 'MALFORMED_JSON' });
  });

  it('refuses an unsupported content type with 415', async () => {
    const res = await fetch(url('/v1/detect/'), { method: 'POST', headers: { ...AUTH, 'content-type': 'text/plain' }, body: 'hello' });
    expect(res.status).toBe(415);
    expect((await res.json()).error).toBe('UNSUPPORTED_MEDIA_TYPE');
  });

  it('validates threshold and mf_selector', async () => {
    for (const [field, value] of [['threshold', 2], ['threshold', 'lenient'], ['mf_selector', 'first']] as const) {
      const res = await fetch(url('/v0/verify/'), {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ photo1: 'http://127.0.0.1/a', photo2: 'http://127.0.0.1/b', [field]: value }),
      });
      expect(res.status, `${field}=${value}`).toBe(400);
      expect(await res.json()).toMatchObject({ code: 400, error: 'BAD_PARAM', param: field });
    }
  });

  it('rejects a malformed box', async () => {
    const res = await fetch(url('/v0/verify/'), {
      method: 'POST',
      headers: AUTH,
      body: form({ photo1: sample(2), photo2: sample(2), bbox1: '[[10, 10, 5]]' }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: 400, error: 'BAD_PARAM', param: 'bbox1' });
  });
});

describe('strict parameters', () => {
  const detect = (fields: Record<string, string | Buffer>) => fetch(url('/v1/detect/'), { method: 'POST', headers: AUTH, body: form(fields) });

  it('refuses a misspelt field, suggesting the name it was close to and listing the accepted ones', async () => {
    for (const [given, meant] of [['emotion', 'emotions'], ['agee', 'age'], ['Gender', 'gender']]) {
      const res = await detect({ photo: sample(2), [given]: 'true' });
      expect(res.status, given).toBe(400);
      const body = await res.json();
      expect(body).toMatchObject({ code: 400, error: 'BAD_PARAM', param: given });
      expect(body.reason).toBe(
        `unknown parameter "${given}"; did you mean "${meant}"? Accepted: photo, age, gender, emotions, landmarks, quality.`,
      );
    }
  });

  it('refuses an unknown field without a near name, in the query string too', async () => {
    const res = await fetch(url('/v1/detect/?colour=red'), { method: 'POST', headers: AUTH, body: form({ photo: sample(2) }) });
    expect(await res.json()).toMatchObject({ error: 'BAD_PARAM', param: 'colour', reason: expect.stringMatching(/^unknown parameter "colour"\. Accepted: photo,/) });
  });

  it('refuses parameters on routes that take none', async () => {
    const res = await fetch(url('/health?verbose=1'));
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ param: 'verbose', reason: 'unknown parameter "verbose": this endpoint takes no parameters.' });
  });

  it('gives every malformed box the same message, and takes a single box where a list is expected', async () => {
    for (const bbox1 of ['[[10, 10, 5]]', '[[10, 10, 5, 5]]', '[{"x1": 1, "y1": 1, "x2": 9}]', '[["a", 1, 2, 3]]']) {
      const res = await fetch(url('/v0/verify/'), { method: 'POST', headers: AUTH, body: form({ photo1: sample(2), photo2: sample(2), bbox1 }) });
      expect(res.status, bbox1).toBe(400);
      expect(await res.json(), bbox1).toMatchObject({
        param: 'bbox1',
        reason: 'bbox1[0]: a box is [x1, y1, x2, y2] or {"x1": …, "y1": …, "x2": …, "y2": …} in pixels, with x2 > x1 and y2 > y1',
      });
    }
    const notAList = await fetch(url('/v0/verify/'), { method: 'POST', headers: AUTH, body: form({ photo1: sample(2), photo2: sample(2), bbox1: '"face"' }) });
    expect((await notAList.json()).reason).toMatch(/^bbox1: expected a box or a list of boxes; a box is/);
    const single = await fetch(url('/v0/verify/'), {
      method: 'POST',
      headers: AUTH,
      body: form({ photo1: sample(2), photo2: sample(2), bbox1: '[40, 40, 160, 170]', bbox2: '{"x1": 40, "y1": 40, "x2": 160, "y2": 170}', threshold: 'none' }),
    });
    expect(single.status).toBe(200);
    // No face of sample2's lies there: the box is cropped upright, and said to be.
    expect((await single.json()).results[0].bbox1).toEqual({ x1: 40, y1: 40, x2: 160, y2: 170, aligned: false });
  });

  it('lists the values an enumerated field takes', async () => {
    const body = (extra: object) => JSON.stringify({ photo1: 'http://127.0.0.1/a', photo2: 'http://127.0.0.1/b', ...extra });
    const threshold = await fetch(url('/v0/verify/'), { method: 'POST', headers: json, body: body({ threshold: 'high' }) });
    expect((await threshold.json()).reason).toBe('threshold: expected a number from 0 to 1 or one of strict, medium, low, none');
    const selector = await fetch(url('/v0/verify/'), { method: 'POST', headers: json, body: body({ mf_selector: 'first' }) });
    expect((await selector.json()).reason).toBe('mf_selector: expected one of reject, biggest, all');
  });
});

describe('routing, docs and health', () => {
  it('answers unknown routes with 404 JSON', async () => {
    const res = await fetch(url('/v0/nothing/'), { headers: AUTH });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ code: 404, error: 'NOT_FOUND' });
  });

  it('answers a wrong method with 405 and Allow', async () => {
    const res = await fetch(url('/v1/detect/'), { headers: AUTH });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
  });

  it('serves docs per version, as JSON or as Swagger UI, without a token', async () => {
    const list = await fetch(url('/docs'));
    expect(await list.json()).toMatchObject({ versions: expect.arrayContaining(['v0', 'v1']), documents: { v0: '/docs/v0', v1: '/docs/v1' } });
    const doc = await (await fetch(url('/docs/v1'))).json();
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths)).toContain('/v1/detect/');
    expect(Object.keys(doc.paths)).not.toContain('/v0/verify/');
    const page = await fetch(url('/docs/v0/'), { headers: { accept: 'text/html,*/*;q=0.8' } });
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(page.headers.get('vary')).toBe('Accept');
    const html = await page.text();
    expect(html).toContain('{"name":"v0","url":"/docs/v0"}');
    const script = /src="(\/docs\/assets\/swagger-ui-bundle\.js\?v=[0-9a-f]+)"/.exec(html)?.[1];
    const bundle = await fetch(url(script ?? '/missing'));
    expect(bundle.status).toBe(200);
    expect(bundle.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(bundle.headers.get('cache-control')).toContain('max-age=31536000');
    expect((await bundle.arrayBuffer()).byteLength).toBeGreaterThan(100_000);
    expect((await fetch(url('/docs/assets/index.html'))).status).toBe(404);
    expect((await fetch(url('/docs/v9'))).status).toBe(404);
  });

  it('reports health without a token', async () => {
    const res = await fetch(url('/health'));
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body).toMatchObject({ status: 'ok', engine: { providers: ['cpu'], recognizer: 'sface:mirror', detector: 'yunet', dim: 128, fixed_shapes: true } });
    // Every model warmed up before the service listened: the detector at its 9 buckets, each face model at each batch size.
    const warmup = body.engine.warmup as { model: string; shapes: number; ms: number }[];
    expect(warmup.map((w) => w.model)).toEqual(body.engine.models.map((m: { id: string }) => m.id));
    expect(warmup.find((w) => w.model === 'yunet')?.shapes).toBe(9);
    for (const w of warmup) expect(w.ms, w.model).toBeGreaterThan(0);
  });
});
