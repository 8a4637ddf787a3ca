/**
 * The HTTP layer against a hostile client: raw sockets (node:net) for what
 * fetch would normalise away, through the real uWS server with small test
 * routes. Each block names what it guards against.
 */
import net from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { StaticTokenVerifier } from '../auth.js';
import { loadConfig } from '../config/index.js';
import { createLogger, type Logger } from '../log.js';
import { idParam } from './params.js';
import { Reply, RouteRegistry } from './registry.js';
import { listen, type HttpServer, type HttpServerOptions } from './server.js';

const TOKEN = 'hardening-token';
const AUTH = `Authorization: Token ${TOKEN}`;

let server: HttpServer | undefined;

afterEach(async () => {
  await server?.close();
  server = undefined;
});

type Limits = Partial<HttpServerOptions['limits']>;

/** The settings' defaults, for the limits a test leaves alone. */
const { maxEngineInflight, maxBodyMemory, requestTimeoutMs } = loadConfig({});

async function start(registry: RouteRegistry, limits: Limits = {}, log: Logger = createLogger('silent')): Promise<number> {
  server = await listen({
    host: '127.0.0.1',
    port: 0,
    registry,
    verifier: new StaticTokenVerifier(TOKEN),
    limits: { maxBodyBytes: 64 * 1024, maxUploadBytes: 32 * 1024, maxInflight: 8, maxEngineInflight, maxBodyMemory, requestTimeoutMs, ...limits },
    shutdownTimeoutMs: 2000,
    log,
  });
  return server.port;
}

interface RawAnswer {
  text: string;
  /** The server closed the connection. */
  closed: boolean;
  /** HTTP status lines seen, in order. */
  statuses: number[];
}

/**
 * Writes `parts` to a fresh connection, each as its own TCP segment (a pause
 * between them, Nagle off), and collects what comes back until the server
 * closes, `done` says the answer is complete, or `waitMs` passes.
 */
function raw(port: number, parts: Array<string | Buffer>, opts: { gapMs?: number; waitMs?: number; done?: (text: string) => boolean } = {}): Promise<RawAnswer> {
  const { gapMs = 40, waitMs = 1000, done } = opts;
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    let text = '';
    let settled = false;
    const finish = (closed: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ text, closed, statuses: [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1])) });
    };
    let timer = setTimeout(() => finish(false), waitMs + gapMs * parts.length);
    socket.on('data', (d) => {
      text += d.toString('latin1');
      if (done?.(text)) finish(false);
    });
    socket.on('close', () => finish(true));
    socket.on('error', () => finish(true));
    let i = 0;
    const next = () => {
      if (settled || i >= parts.length) return;
      socket.write(parts[i++]);
      setTimeout(next, gapMs);
    };
    socket.on('connect', next);
  });
}

/** The JSON body of the last answer in `text` (Content-Length framed). */
function lastJson(text: string): any {
  const at = text.lastIndexOf('\r\n\r\n');
  // The socket text is latin1 (one character per byte); the body is UTF-8.
  return JSON.parse(Buffer.from(text.slice(at + 4), 'latin1').toString('utf8'));
}

function headerOf(text: string, name: string): string | undefined {
  return new RegExp(`\\r\\n${name}: ([^\\r]*)`, 'i').exec(text)?.[1];
}

const get = (path: string, extra: string[] = []) => [`GET ${path} HTTP/1.1`, 'Host: x', ...extra, '', ''].join('\r\n');

/** Routes covering every case below: public and authenticated, instant and waiting, light and engine. */
function testRegistry() {
  const registry = new RouteRegistry();
  const held: Array<() => void> = [];
  const seen = { aborted: 0, ids: [] as number[], metas: [] as string[] };
  const waitForRelease = (signal: AbortSignal) =>
    new Promise<void>((resolve) => {
      held.push(resolve);
      signal.addEventListener('abort', () => {
        seen.aborted++;
        resolve();
      });
    });
  registry.define({
    method: 'GET',
    path: '/health',
    summary: 'Answers at once',
    auth: false,
    limited: false,
    response: { status: 200, description: 'ok', schema: z.object({ ok: z.boolean() }) },
    errors: [],
    handler: async () => ({ ok: true }),
  });
  registry.define({
    method: 'GET',
    path: '/v0/io/:id/',
    summary: 'Awaits I/O (a timer) before answering, like every database route',
    auth: true,
    params: z.object({ id: idParam('An id.') }),
    response: { status: 200, description: 'the id', schema: z.object({ id: z.number() }) },
    errors: [],
    async handler({ params }) {
      await new Promise((r) => setTimeout(r, 20));
      seen.ids.push(params.id);
      return { id: params.id };
    },
  });
  registry.define({
    method: 'PUT',
    path: '/v0/io/:id/',
    summary: 'Changes a thing',
    auth: true,
    params: z.object({ id: idParam('An id.') }),
    request: z.object({ meta: z.string().optional(), tags: z.array(z.string()).optional() }),
    response: { status: 200, description: 'as changed', schema: z.object({ meta: z.string().optional() }) },
    errors: [],
    async handler({ input }) {
      if (input.meta !== undefined) seen.metas.push(input.meta);
      return { meta: input.meta };
    },
  });
  registry.define({
    method: 'POST',
    path: '/v0/light/',
    summary: 'Waits until released; light',
    auth: true,
    request: z.object({ meta: z.string().optional(), pad: z.string().optional() }),
    response: { status: 200, description: 'done', schema: z.object({ meta: z.string().optional() }) },
    errors: [],
    async handler({ input, signal }) {
      if (input.meta === 'wait') await waitForRelease(signal);
      if (input.meta !== undefined) seen.metas.push(input.meta);
      return { meta: input.meta };
    },
  });
  registry.define({
    method: 'POST',
    path: '/v0/engine/',
    summary: 'Takes a photo and waits until released',
    auth: true,
    request: z.object({ photo: z.custom<Buffer>((v) => Buffer.isBuffer(v)).meta({ type: 'string', format: 'binary' }) }),
    response: { status: 200, description: 'done', schema: z.object({ bytes: z.number() }) },
    errors: [],
    async handler({ input, signal }) {
      await waitForRelease(signal);
      return { bytes: input.photo.length };
    },
  });
  registry.define({
    method: 'GET',
    path: '/v0/stream/:when/',
    summary: 'A listing whose producer fails',
    auth: true,
    params: z.object({ when: z.enum(['before', 'after']) }),
    response: { status: 200, description: 'a listing', alternatives: ['application/json'] },
    errors: [],
    async handler({ params }) {
      async function* rows() {
        if (params.when === 'before') throw new Error('cursor failed before the first row');
        yield '{"results":[';
        yield '{"id":1}';
        await new Promise((r) => setTimeout(r, 20));
        throw new Error('cursor failed after the first row');
      }
      return Reply.stream(rows());
    },
  });
  return { registry, seen, release: () => held.splice(0).forEach((r) => r()), held: () => held.length };
}

const until = async (cond: () => boolean) => {
  for (let i = 0; i < 400 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
};

describe('pipelining', () => {
  it('answers pipelined requests in order when each answer is ready before the next request is parsed', async () => {
    const port = await start(testRegistry().registry);
    const res = await raw(port, [get('/health') + get('/health') + get('/health')], { done: (t) => (t.match(/HTTP\/1\.1/g) ?? []).length === 3 && t.endsWith('}') });
    expect(res.statuses).toEqual([200, 200, 200]);
    expect(res.closed).toBe(false);
  });

  it('closes the connection without answering when a request pipelined behind one awaiting I/O arrives (uWS refuses async pipelining)', async () => {
    const t = testRegistry();
    const port = await start(t.registry);
    const res = await raw(port, [get('/v0/io/1/', [AUTH]) + get('/v0/io/2/', [AUTH])]);
    // uWS closes the socket as soon as it parses the second request while the first is pending:
    // neither is answered, none out of order, and the first one's work is told the client has gone.
    expect(res.closed).toBe(true);
    expect(res.statuses).toEqual([]);
    // The server is unharmed; the same requests one at a time on one connection are fine.
    const one = await raw(port, [get('/v0/io/1/', [AUTH])], { done: (x) => x.endsWith('}') });
    expect(one.statuses).toEqual([200]);
  });
});

describe('request line (the pinned uWS build)', () => {
  const request = get('/health');

  it('answers 505 in HTML to a request line split across two segments; a split after the CRLF is fine', async () => {
    const port = await start(testRegistry().registry);
    const split = await raw(port, [request.slice(0, 12), request.slice(12)], { gapMs: 60 });
    expect(split.statuses).toEqual([505]);
    expect(split.text).toContain('<h1>HTTP Version Not Supported</h1>');
    expect(split.closed).toBe(true);
    const late = await raw(port, [request.slice(0, 22), request.slice(22)], { gapMs: 60, done: (x) => x.endsWith('}') });
    expect(late.statuses).toEqual([200]);
  });

  it('answers 505 to HTTP/1.0', async () => {
    const port = await start(testRegistry().registry);
    const res = await raw(port, ['GET /health HTTP/1.0\r\nHost: x\r\n\r\n']);
    expect(res.statuses).toEqual([505]);
    expect(res.closed).toBe(true);
  });
});

describe('message framing', () => {
  const post = (headers: string[], body: string) =>
    ['POST /v0/light/ HTTP/1.1', 'Host: x', AUTH, 'Content-Type: application/json', ...headers, '', body].join('\r\n');

  it.each([
    ['two different Content-Length headers', post(['Content-Length: 2', 'Content-Length: 13'], '{}'), 'Repeated Content-Length'],
    ['the same Content-Length twice', post(['Content-Length: 2', 'Content-Length: 2'], '{}'), 'Repeated Content-Length'],
    ['Transfer-Encoding: chunked, chunked', post(['Transfer-Encoding: chunked, chunked'], '2\r\n{}\r\n0\r\n\r\n'), 'exactly "chunked"'],
    ['Transfer-Encoding: gzip', post(['Transfer-Encoding: gzip'], '2\r\n{}\r\n0\r\n\r\n'), 'exactly "chunked"'],
    ['two Transfer-Encoding headers', post(['Transfer-Encoding: chunked', 'Transfer-Encoding: chunked'], '2\r\n{}\r\n0\r\n\r\n'), 'Repeated Transfer-Encoding'],
  ])('refuses %s with a JSON 400 and closes the connection', async (_name, request, reason) => {
    const t = testRegistry();
    const port = await start(t.registry);
    const res = await raw(port, [request]);
    expect(res.statuses).toEqual([400]);
    expect(headerOf(res.text, 'Content-Type')).toBe('application/json');
    expect(lastJson(res.text)).toMatchObject({ code: 400, error: 'MALFORMED_REQUEST' });
    expect(lastJson(res.text).reason).toContain(reason);
    expect(res.closed).toBe(true);
    expect(t.seen.metas).toEqual([]);
  });

  it('accepts one chunked body', async () => {
    const port = await start(testRegistry().registry);
    const res = await raw(port, [post(['Transfer-Encoding: chunked'], '0e\r\n{"meta":"ok"}\r\n0\r\n\r\n')], { done: (x) => x.endsWith('}') });
    expect(res.statuses).toEqual([200]);
    expect(lastJson(res.text)).toEqual({ meta: 'ok' });
  });

  it('leaves Content-Length with Transfer-Encoding to uWS, which answers 400 itself', async () => {
    const port = await start(testRegistry().registry);
    const res = await raw(port, [post(['Content-Length: 2', 'Transfer-Encoding: chunked'], '2\r\n{}\r\n0\r\n\r\n')]);
    expect(res.statuses).toEqual([400]);
    expect(res.closed).toBe(true);
  });

  it('gets no answer from uWS for a malformed header line until its idle timeout (no hook reaches it)', async () => {
    const port = await start(testRegistry().registry);
    for (const bad of ['X-No-Colon', 'X-Nul: a\0b']) {
      const res = await raw(port, [get('/health', [bad])], { waitMs: 300 });
      expect(res.statuses, bad).toEqual([]);
    }
  });
});

describe('error bodies', () => {
  it('answers every error of ours with JSON and a Content-Type', async () => {
    const port = await start(testRegistry().registry, { maxBodyBytes: 100 });
    const cases: Array<[string, number]> = [
      [get('/v0/io/1/'), 401],
      [get('/v0/nothing/', [AUTH]), 404],
      [['DELETE /v0/io/1/ HTTP/1.1', 'Host: x', AUTH, '', ''].join('\r\n'), 405],
      [['POST /v0/light/ HTTP/1.1', 'Host: x', AUTH, 'Content-Type: application/json', 'Content-Length: 500', '', ''].join('\r\n'), 413],
      [['POST /v0/light/ HTTP/1.1', 'Host: x', AUTH, 'Content-Type: text/plain', 'Content-Length: 2', '', 'hi'].join('\r\n'), 415],
    ];
    for (const [request, status] of cases) {
      const res = await raw(port, [request], { done: (x) => x.endsWith('}') });
      expect(res.statuses, request).toEqual([status]);
      expect(headerOf(res.text, 'Content-Type')).toBe('application/json');
      expect(lastJson(res.text)).toMatchObject({ code: status });
    }
  });
});

describe('streamed answers that fail', () => {
  function capturingLogger() {
    const lines: any[] = [];
    const sink = new Writable({
      write(chunk, _enc, cb) {
        for (const line of chunk.toString().split('\n')) if (line) lines.push(JSON.parse(line));
        cb();
      },
    });
    return { log: pino({ level: 'info' }, sink), lines };
  }

  it('logs the cause and cuts the connection so the body lacks its terminating chunk', async () => {
    const { log, lines } = capturingLogger();
    const port = await start(testRegistry().registry, {}, log);
    const res = await raw(port, [get('/v0/stream/after/', [AUTH])]);
    expect(res.statuses).toEqual([200]);
    expect(res.closed).toBe(true);
    expect(headerOf(res.text, 'Transfer-Encoding')).toBe('chunked');
    expect(res.text).toContain('{"results":[');
    // A complete chunked body ends with the zero-length chunk; this one must not.
    expect(res.text.endsWith('0\r\n\r\n')).toBe(false);
    await until(() => lines.some((l) => l.msg?.includes('streamed response failed')));
    const failure = lines.find((l) => l.msg?.includes('streamed response failed'));
    expect(failure.err.message).toBe('cursor failed after the first row');
    expect(failure.level).toBeGreaterThanOrEqual(50);
  });

  it('answers a JSON 500 when the producer fails before its first chunk', async () => {
    const { log, lines } = capturingLogger();
    const port = await start(testRegistry().registry, {}, log);
    const res = await raw(port, [get('/v0/stream/before/', [AUTH])], { done: (x) => x.endsWith('}') });
    expect(res.statuses).toEqual([500]);
    expect(lastJson(res.text)).toMatchObject({ code: 500, error: 'INTERNAL' });
    await until(() => lines.some((l) => l.err?.message === 'cursor failed before the first row'));
    expect(lines.some((l) => l.err?.message === 'cursor failed before the first row')).toBe(true);
  });
});

describe('strict input', () => {
  it.each(['+1', '01', '1.0', '%201', '9.99999e5', '1e3', '-1', '0', '0x1', '1%20', '99999999999999999999'])('refuses the id %s', async (id) => {
    const t = testRegistry();
    const port = await start(t.registry);
    const res = await raw(port, [get(`/v0/io/${id}/`, [AUTH])], { done: (x) => x.endsWith('}') });
    expect(res.statuses).toEqual([400]);
    expect(lastJson(res.text)).toMatchObject({ error: 'BAD_PARAM', param: 'id' });
    expect(t.seen.ids).toEqual([]);
  });

  it('takes a canonical id', async () => {
    const t = testRegistry();
    const port = await start(t.registry);
    const res = await raw(port, [get('/v0/io/12/', [AUTH])], { done: (x) => x.endsWith('}') });
    expect(lastJson(res.text)).toEqual({ id: 12 });
  });

  const put = (body: Buffer | string, type = 'application/json') => {
    const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body);
    return Buffer.concat([Buffer.from(['PUT /v0/io/1/ HTTP/1.1', 'Host: x', AUTH, `Content-Type: ${type}`, `Content-Length: ${bytes.length}`, '', ''].join('\r\n')), bytes]);
  };

  it.each([
    ['a lone surrogate escape', '{"meta":"a\\ud800b"}', 'BAD_PARAM', 'meta'],
    ['a lone surrogate in an array', '{"tags":["ok","\\udfff"]}', 'BAD_PARAM', 'tags'],
    ['a NUL escape', '{"meta":"a\\u0000b"}', 'BAD_PARAM', 'meta'],
    ['invalid UTF-8', Buffer.from([0x7b, 0x22, 0x6d, 0x65, 0x74, 0x61, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]), 'MALFORMED_JSON', undefined],
    ['an empty body', '', 'BAD_PARAM', undefined],
    ['an unknown field', '{"colour":"red"}', 'BAD_PARAM', 'colour'],
  ])('refuses a JSON body with %s', async (_name, body, error, param) => {
    const t = testRegistry();
    const port = await start(t.registry);
    const res = await raw(port, [put(body)], { done: (x) => x.endsWith('}') });
    expect(res.statuses).toEqual([400]);
    const answer = lastJson(res.text);
    expect(answer.error).toBe(error);
    expect(answer.param).toBe(param);
    expect(t.seen.metas).toEqual([]);
  });

  it('stores valid UTF-8 as sent, from JSON and from multipart', async () => {
    const t = testRegistry();
    const port = await start(t.registry);
    const json = await raw(port, [put('{"meta":"café 😀"}')], { done: (x) => x.endsWith('}') });
    expect(lastJson(json.text)).toEqual({ meta: 'café 😀' });
    const form = new FormData();
    form.set('meta', 'naïve 😀');
    const res = await fetch(`http://127.0.0.1:${port}/v0/io/1/`, { method: 'PUT', headers: { authorization: `Token ${TOKEN}` }, body: form });
    expect(await res.json()).toEqual({ meta: 'naïve 😀' });
    expect(t.seen.metas).toEqual(['café 😀', 'naïve 😀']);
  });

  it('refuses invalid UTF-8 in a multipart field, naming it', async () => {
    const t = testRegistry();
    const port = await start(t.registry);
    const body = Buffer.concat([
      Buffer.from('--b\r\nContent-Disposition: form-data; name="meta"\r\n\r\nab'),
      Buffer.from([0xc3, 0x28]),
      Buffer.from('\r\n--b--\r\n'),
    ]);
    const res = await raw(port, [put(body, 'multipart/form-data; boundary=b')], { done: (x) => x.endsWith('}') });
    expect(res.statuses).toEqual([400]);
    expect(lastJson(res.text)).toMatchObject({ error: 'BAD_PARAM', param: 'meta' });
    expect(t.seen.metas).toEqual([]);
  });

  it('refuses NUL in a path parameter and invalid escapes in the query string', async () => {
    const t = testRegistry();
    const port = await start(t.registry);
    const nul = await raw(port, [get('/v0/stream/%00/', [AUTH])], { done: (x) => x.endsWith('}') });
    expect(nul.statuses).toEqual([400]);
    expect(lastJson(nul.text)).toMatchObject({ error: 'BAD_PARAM', param: 'when' });
    // Escapes that do not decode to UTF-8 name the parameter rather than hiding the route.
    for (const bad of ['%ff', '%ed%a0%80', '%c0%af', '%', '%zz']) {
      const escape = await raw(port, [get(`/v0/stream/${bad}/`, [AUTH])], { done: (x) => x.endsWith('}') });
      expect(escape.statuses, bad).toEqual([400]);
      expect(lastJson(escape.text), bad).toMatchObject({ error: 'BAD_PARAM', param: 'when' });
    }
    const query = await raw(port, [['PUT /v0/io/1/?meta=%ff HTTP/1.1', 'Host: x', AUTH, 'Content-Length: 0', '', ''].join('\r\n')], { done: (x) => x.endsWith('}') });
    expect(query.statuses).toEqual([400]);
    expect(lastJson(query.text)).toMatchObject({ error: 'BAD_PARAM' });
  });
});

describe('authentication comes first', () => {
  it('answers 401, not 404 or 405, to a client without a valid token', async () => {
    const port = await start(testRegistry().registry);
    for (const request of [
      get('/v0/nothing/'),
      get('/v0/nothing/', ['Authorization: Token wrong']),
      ['DELETE /v0/io/1/ HTTP/1.1', 'Host: x', '', ''].join('\r\n'),
    ]) {
      const res = await raw(port, [request], { done: (x) => x.endsWith('}') });
      expect(res.statuses, request).toEqual([401]);
      expect(headerOf(res.text, 'Allow')).toBeUndefined();
    }
    const known = await raw(port, [['DELETE /v0/io/1/ HTTP/1.1', 'Host: x', AUTH, '', ''].join('\r\n')], { done: (x) => x.endsWith('}') });
    expect(known.statuses).toEqual([405]);
    expect(headerOf(known.text, 'Allow')).toBe('GET, PUT');
  });

  it('still answers 405 on a public path without a token', async () => {
    const port = await start(testRegistry().registry);
    const res = await raw(port, [['DELETE /health HTTP/1.1', 'Host: x', '', ''].join('\r\n')], { done: (x) => x.endsWith('}') });
    expect(res.statuses).toEqual([405]);
  });
});

describe('admission', () => {
  const postJson = (port: number, path: string, body: string) =>
    fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers: { authorization: `Token ${TOKEN}`, 'content-type': 'application/json' }, body });
  const upload = (port: number, bytes = 1000) => {
    const form = new FormData();
    form.set('photo', new Blob([Buffer.alloc(bytes, 1)]), 'p.jpg');
    return fetch(`http://127.0.0.1:${port}/v0/engine/`, { method: 'POST', headers: { authorization: `Token ${TOKEN}` }, body: form });
  };

  it('sheds photo routes at their own limit while light routes keep their slots', async () => {
    const t = testRegistry();
    const port = await start(t.registry, { maxInflight: 2, maxEngineInflight: 1 });
    const first = upload(port);
    await until(() => t.held() === 1);
    const shed = await upload(port);
    expect(shed.status).toBe(503);
    expect(shed.headers.get('retry-after')).toBe('1');
    // Both light slots are still free while the photo route is saturated.
    const light = await Promise.all([postJson(port, '/v0/light/', '{"meta":"a"}'), postJson(port, '/v0/light/', '{"meta":"b"}')]);
    expect(light.map((r) => r.status)).toEqual([200, 200]);
    t.release();
    expect((await first).status).toBe(200);
  });

  it('reads and drops the body of a shed upload, so the client gets the 503 and the connection stays usable', async () => {
    const t = testRegistry();
    // A body limit the shed body fits within twice over, so it is drained (Exchange.linger) rather than cut.
    const port = await start(t.registry, { maxEngineInflight: 1, maxBodyBytes: 16 << 20 });
    const first = upload(port);
    await until(() => t.held() === 1);
    // Far bigger than the socket buffers: had the server closed without reading, the client would see a reset.
    const body = Buffer.alloc(8 << 20, 7);
    const head = ['POST /v0/engine/ HTTP/1.1', 'Host: x', AUTH, 'Content-Type: application/octet-stream', `Content-Length: ${body.length}`, '', ''].join('\r\n');
    const shed = await raw(port, [head, body, get('/health')], { done: (x) => (x.match(/HTTP\/1\.1 /g) ?? []).length === 2 && x.endsWith('}') });
    expect(shed.statuses).toEqual([503, 200]);
    expect(headerOf(shed.text, 'retry-after')).toBe('1');
    t.release();
    expect((await first).status).toBe(200);
  });

  it('refuses a body that would overrun the body memory budget with 503 and Retry-After', async () => {
    const t = testRegistry();
    const port = await start(t.registry, { maxBodyMemory: 3000 });
    const held = postJson(port, '/v0/light/', JSON.stringify({ meta: 'wait', pad: 'x'.repeat(2000) }));
    await until(() => t.held() === 1);
    const refused = await postJson(port, '/v0/light/', JSON.stringify({ meta: 'second', pad: 'x'.repeat(2000) }));
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(await refused.json()).toMatchObject({ code: 503, error: 'SERVICE_UNAVAILABLE' });
    // A chunked body is counted as it arrives; the refusal goes out once the client has finished sending.
    const chunked = await raw(port, [
      ['POST /v0/light/ HTTP/1.1', 'Host: x', AUTH, 'Content-Type: application/json', 'Transfer-Encoding: chunked', '', ''].join('\r\n'),
      `7d0\r\n${'x'.repeat(2000)}\r\n`,
      '0\r\n\r\n',
    ], { done: (x) => x.endsWith('}') });
    expect(chunked.statuses).toEqual([503]);
    // Small requests still fit, and the budget is whole again once the held one is done.
    expect((await postJson(port, '/v0/light/', '{"meta":"small"}')).status).toBe(200);
    t.release();
    expect((await held).status).toBe(200);
    expect(server!.state.bodyBytes).toBe(0);
    expect((await postJson(port, '/v0/light/', JSON.stringify({ meta: 'again', pad: 'x'.repeat(2000) }))).status).toBe(200);
  });

  it('answers 503 DEADLINE_EXCEEDED when a request outlives its deadline, and aborts its work', async () => {
    const t = testRegistry();
    const port = await start(t.registry, { requestTimeoutMs: 150 });
    const started = Date.now();
    const res = await postJson(port, '/v0/light/', '{"meta":"wait"}');
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(await res.json()).toMatchObject({ code: 503, error: 'DEADLINE_EXCEEDED' });
    expect(Date.now() - started).toBeLessThan(2000);
    await until(() => t.seen.aborted === 1);
    expect(t.seen.aborted).toBe(1);
    expect(server!.state.inflight).toBe(0);
  });
});
