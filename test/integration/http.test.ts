/**
 * HTTP behaviour of the real server with tight body limits: size limits,
 * content types, malformed bodies, routing, docs and health.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { form, sample } from '../helpers/images.js';
import { AUTH, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;

beforeAll(async () => {
  svc = await startTestService({ FACE_MAX_UPLOAD_BYTES: '300000', FACE_MAX_BODY_BYTES: '400000' });
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

  it('serves docs per version, as JSON or HTML, without a token', async () => {
    const list = await fetch(url('/docs'));
    expect((await list.json()).versions).toEqual(expect.arrayContaining(['v0', 'v1']));
    const doc = await (await fetch(url('/docs/v1'))).json();
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths)).toContain('/v1/detect/');
    expect(Object.keys(doc.paths)).not.toContain('/v0/verify/');
    const page = await fetch(url('/docs/v0/'), { headers: { accept: 'text/html,*/*;q=0.8' } });
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    expect(await page.text()).toContain('/v0/verify/');
    expect((await fetch(url('/docs/v9'))).status).toBe(404);
  });

  it('reports health without a token', async () => {
    const res = await fetch(url('/health'));
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body).toMatchObject({ status: 'ok', engine: { providers: ['cpu'], recognizer: 'sface', detector: 'yunet', dim: 128 } });
  });
});
