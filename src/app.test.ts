import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from './app.js';
import { loadConfig } from './config.js';
import { createLogger } from './log.js';
import { mapEngineError, type Analysis, type AnalyzeOptions, type Engine } from './native/engine.js';

/**
 * An engine for HTTP-level tests: the "image" is JSON naming its faces and
 * their embeddings, so each test states exactly what the engine will see.
 */
class ScriptedEngine implements Engine {
  closed = false;
  calls: AnalyzeOptions[] = [];

  async analyze(image: Buffer, opts: AnalyzeOptions): Promise<Analysis> {
    this.calls.push(opts);
    let spec: { faces: number[][]; emb?: number[][]; error?: string };
    try {
      spec = JSON.parse(image.toString('utf8'));
    } catch {
      throw mapEngineError(Object.assign(new Error('not an image'), { code: 'IMAGE_UNSUPPORTED' }));
    }
    if (spec.error) throw mapEngineError(Object.assign(new Error('scripted'), { code: spec.error }));
    const boxes = opts.boxes ?? spec.faces;
    const dim = 3;
    const emb = new Float32Array(opts.embed ? boxes.length * dim : 0);
    if (opts.embed) boxes.forEach((_, i) => emb.set(spec.emb?.[i] ?? [1, 0, 0], i * dim));
    return {
      width: 640,
      height: 480,
      faces: boxes.map(([x1, y1, x2, y2]) => ({
        x1, y1, x2, y2, score: 0.9, landmarks: [],
        ...(opts.age ? { age: 30 } : {}),
        ...(opts.gender ? { gender: 'female' as const } : {}),
        ...(opts.emotions ? { emotions: ['happy', 'neutral', 'sad', 'surprise', 'angry', 'fear', 'disgust'] } : {}),
      })),
      embeddings: emb,
      dim,
    };
  }

  async similarity(a: Float32Array, b: Float32Array, dim: number): Promise<Float32Array> {
    const ra = a.length / dim;
    const rb = b.length / dim;
    const out = new Float32Array(ra * rb);
    for (let i = 0; i < ra; i++)
      for (let j = 0; j < rb; j++) {
        let s = 0;
        for (let k = 0; k < dim; k++) s += a[i * dim + k] * b[j * dim + k];
        out[i * rb + j] = s;
      }
    return out;
  }

  info() {
    return { providers: ['cpu'], simd: 'scalar', recognizer: 'test', dim: 3, models: [] };
  }

  close() {
    this.closed = true;
  }
}

const TOKEN = 'test-token-123';
let server: RunningServer;
let engine: ScriptedEngine;
let base: string;
let photoServer: http.Server;
let photoBase: string;

const auth = { Authorization: `Token ${TOKEN}` };
const img = (faces: number[][], emb?: number[][]) => JSON.stringify({ faces, emb });

beforeAll(async () => {
  engine = new ScriptedEngine();
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    FACE_TOKEN: TOKEN,
    FACE_MAX_UPLOAD_BYTES: '4096',
    FACE_MAX_BODY_BYTES: '16384',
    FACE_FETCH_ALLOW_PRIVATE: 'true',
  });
  server = await startServer({ config, engine, log: createLogger('silent') });
  base = `http://127.0.0.1:${server.port}`;
  photoServer = http.createServer((req, res) => {
    if (req.url === '/two-faces') {
      res.writeHead(200, { 'content-type': 'image/jpeg' });
      res.end(img([[0, 0, 100, 100], [200, 200, 250, 250]]));
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise<void>((r) => photoServer.listen(0, '127.0.0.1', r));
  photoBase = `http://127.0.0.1:${(photoServer.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await server?.close();
  await new Promise((r) => photoServer?.close(r));
});

function form(fields: Record<string, string | Buffer>): FormData {
  const fd = new FormData();
  for (const [k, v] of Object.entries(fields)) {
    if (typeof v === 'string') fd.append(k, v);
    else fd.append(k, new Blob([new Uint8Array(v)], { type: 'image/jpeg' }), `${k}.jpg`);
  }
  return fd;
}

describe('detect', () => {
  it('finds faces in an upload, keys in x1,y1,x2,y2 order, attributes only when asked', async () => {
    const res = await fetch(`${base}/v1/detect/`, {
      method: 'POST',
      headers: auth,
      body: form({ photo: Buffer.from(img([[1, 2, 30, 40]])), age: 'true', gender: 'false' }),
    });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body).toEqual({ faces: [{ x1: 1, y1: 2, x2: 30, y2: 40, age: 30 }] });
    expect(Object.keys(body.faces[0])).toEqual(['x1', 'y1', 'x2', 'y2', 'age']);
  });

  it('fetches a URL photo given as JSON, without the trailing slash', async () => {
    const res = await fetch(`${base}/v1/detect`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ photo: `${photoBase}/two-faces`, emotions: true }),
    });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.faces).toHaveLength(2);
    expect(body.faces[0].emotions[0]).toBe('happy');
  });

  it('reports a failed URL fetch as 400 PHOTO_FETCH_FAILED naming the parameter', async () => {
    const res = await fetch(`${base}/v1/detect/`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ photo: `${photoBase}/missing` }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: 400, error: 'PHOTO_FETCH_FAILED', param: 'photo' });
  });

  it('maps engine errors to HTTP statuses', async () => {
    const res = await fetch(`${base}/v1/detect/`, {
      method: 'POST',
      headers: auth,
      body: form({ photo: Buffer.from('not json at all') }),
    });
    expect(res.status).toBe(415);
    expect(await res.json()).toMatchObject({ code: 415, error: 'IMAGE_UNSUPPORTED', param: 'photo' });
  });

  it('answers a missing photo with 400 BAD_PARAM', async () => {
    const res = await fetch(`${base}/v1/detect/`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ age: true }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ code: 400, error: 'BAD_PARAM', param: 'photo', reason: 'photo: is required' });
  });

  it('rejects malformed JSON', async () => {
    const res = await fetch(`${base}/v1/detect/`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: '{"photo": ',
    });
    expect(res.status).toBe(400);
    expect((await res.json()).error).toBe('MALFORMED_JSON');
  });

  it('refuses an upload over the limit with 413', async () => {
    const res = await fetch(`${base}/v1/detect/`, {
      method: 'POST',
      headers: auth,
      body: form({ photo: Buffer.alloc(5000, 1) }),
    });
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({ code: 413, error: 'PAYLOAD_TOO_LARGE' });
  });

  it('refuses a body over the limit with 413 before reading it', async () => {
    const res = await fetch(`${base}/v1/detect/`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: 'x'.repeat(20000),
    });
    expect(res.status).toBe(413);
  });

  it('refuses an unsupported content type with 415', async () => {
    const res = await fetch(`${base}/v1/detect/`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'text/plain' },
      body: 'hello',
    });
    expect(res.status).toBe(415);
    expect((await res.json()).error).toBe('UNSUPPORTED_MEDIA_TYPE');
  });
});

describe('auth', () => {
  it('answers a missing token with 401 AUTH_FAILED', async () => {
    const res = await fetch(`${base}/v1/detect/`, { method: 'POST', body: form({ photo: Buffer.from(img([])) }) });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ code: 401, error: 'AUTH_FAILED' });
  });

  it('answers a wrong token with 401', async () => {
    const res = await fetch(`${base}/v1/detect/`, {
      method: 'POST',
      headers: { Authorization: 'Token nope' },
      body: form({ photo: Buffer.from(img([])) }),
    });
    expect(res.status).toBe(401);
  });
});

describe('verify', () => {
  const a = [1, 0, 0];
  const b = [0, 1, 0];

  it('verifies the biggest faces by default', async () => {
    const res = await fetch(`${base}/v0/verify/`, {
      method: 'POST',
      headers: auth,
      body: form({
        photo1: Buffer.from(img([[0, 0, 10, 10], [0, 0, 5, 5]], [a, b])),
        photo2: Buffer.from(img([[5, 5, 20, 20]], [a])),
      }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      results: [{ bbox1: { x1: 0, y1: 0, x2: 10, y2: 10 }, bbox2: { x1: 5, y1: 5, x2: 20, y2: 20 }, confidence: 1, verified: true }],
      verified: true,
    });
  });

  it('compares all faces, with threshold none giving no verdicts', async () => {
    const res = await fetch(`${base}/v0/verify/`, {
      method: 'POST',
      headers: auth,
      body: form({
        photo1: Buffer.from(img([[0, 0, 10, 10], [0, 0, 5, 5]], [a, b])),
        photo2: Buffer.from(img([[5, 5, 20, 20]], [a])),
        mf_selector: 'all',
        threshold: 'none',
      }),
    });
    const body = await res.json();
    expect(body.verified).toBeUndefined();
    expect(body.results).toHaveLength(2);
    expect(body.results[0].verified).toBeUndefined();
    expect(body.results[1].confidence).toBeLessThan(body.results[0].confidence);
  });

  it('top-level verified needs a match for every face of photo1', async () => {
    const res = await fetch(`${base}/v0/verify/`, {
      method: 'POST',
      headers: auth,
      body: form({
        photo1: Buffer.from(img([[0, 0, 10, 10], [0, 0, 5, 5]], [a, b])),
        photo2: Buffer.from(img([[5, 5, 20, 20]], [a])),
        mf_selector: 'all',
        threshold: '0.9',
      }),
    });
    const body = await res.json();
    expect(body.results.map((r: { verified: boolean }) => r.verified)).toEqual([true, false]);
    expect(body.verified).toBe(false);
  });

  it('uses given boxes (JSON-encoded in multipart) instead of detection', async () => {
    const res = await fetch(`${base}/v0/verify/`, {
      method: 'POST',
      headers: auth,
      body: form({
        photo1: Buffer.from(img([])),
        photo2: Buffer.from(img([[5, 5, 20, 20]])),
        bbox1: '[[1,2,3,4],{"x1":5,"y1":6,"x2":7,"y2":8}]',
        mf_selector: 'reject',
      }),
    });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.results.map((r: { bbox1: unknown }) => r.bbox1)).toEqual([
      { x1: 1, y1: 2, x2: 3, y2: 4 },
      { x1: 5, y1: 6, x2: 7, y2: 8 },
    ]);
    expect(engine.calls.at(-2)?.boxes ?? engine.calls.at(-1)?.boxes).toBeDefined();
  });

  it('rejects several faces with mf_selector=reject, listing them', async () => {
    const res = await fetch(`${base}/v0/verify/`, {
      method: 'POST',
      headers: auth,
      body: form({
        photo1: Buffer.from(img([[0, 0, 10, 10]])),
        photo2: Buffer.from(img([[0, 0, 10, 10], [20, 20, 30, 30]])),
        mf_selector: 'reject',
      }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      code: 400,
      reason: 'Too many faces: 2',
      error: 'TOO_MANY_FACES',
      param: 'photo2',
      faces: [
        { x1: 0, y1: 0, x2: 10, y2: 10 },
        { x1: 20, y1: 20, x2: 30, y2: 30 },
      ],
    });
  });

  it('answers a photo without faces with 422 NO_FACE naming it', async () => {
    const res = await fetch(`${base}/v0/verify/`, {
      method: 'POST',
      headers: auth,
      body: form({ photo1: Buffer.from(img([])), photo2: Buffer.from(img([[0, 0, 10, 10]])) }),
    });
    expect(res.status).toBe(422);
    expect(await res.json()).toMatchObject({ code: 422, error: 'NO_FACE', param: 'photo1' });
  });

  it('validates threshold', async () => {
    const res = await fetch(`${base}/v0/verify/`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ photo1: 'http://x/a', photo2: 'http://x/b', threshold: 2 }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: 'BAD_PARAM', param: 'threshold' });
  });
});

describe('routing, docs and health', () => {
  it('answers unknown routes with 404 JSON', async () => {
    const res = await fetch(`${base}/v0/nothing/`, { headers: auth });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ code: 404, error: 'NOT_FOUND' });
  });

  it('answers a wrong method with 405 and Allow', async () => {
    const res = await fetch(`${base}/v1/detect/`, { headers: auth });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
  });

  it('lists versions and serves OpenAPI without a token', async () => {
    const list = await fetch(`${base}/docs`);
    expect(await list.json()).toEqual({ versions: ['v0', 'v1'] });
    const doc = await (await fetch(`${base}/docs/v1`)).json();
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths)).toContain('/v1/detect/');
    expect(Object.keys(doc.paths)).not.toContain('/v0/verify/');
    const page = await fetch(`${base}/docs/v0/`, { headers: { accept: 'text/html,*/*;q=0.8' } });
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    expect(await page.text()).toContain('/v0/verify/');
    expect((await fetch(`${base}/docs/v9`)).status).toBe(404);
    // Path parameters arrive percent-decoded.
    expect((await fetch(`${base}/docs/v%30`)).status).toBe(200);
  });

  it('reports health without a token', async () => {
    const res = await fetch(`${base}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'ok', engine: { providers: ['cpu'] }, inflight: 0 });
  });
});
