import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { StaticTokenVerifier } from '../auth.js';
import { loadConfig } from '../config/index.js';
import { createLogger } from '../log.js';
import { boolParam } from './params.js';
import { Reply, RouteRegistry } from './registry.js';
import { listen, type HttpServer } from './server.js';

let server: HttpServer | undefined;

afterEach(async () => {
  await server?.close();
  server = undefined;
});

/** A registry with a route that waits until released, to hold requests in flight. */
function slowRegistry() {
  const registry = new RouteRegistry();
  const waiting: Array<() => void> = [];
  let finished = 0;
  registry.define({
    method: 'POST',
    path: '/v0/slow/',
    summary: 'Waits until released',
    auth: false,
    request: z.object({ flag: boolParam().optional(), name: z.string().optional() }),
    response: { status: 200, description: 'done', schema: z.object({ flag: z.boolean().optional(), name: z.string().optional() }) },
    errors: [],
    async handler({ input, signal }) {
      await new Promise<void>((resolve) => {
        waiting.push(resolve);
        signal.addEventListener('abort', () => {
          waiting.splice(waiting.indexOf(resolve), 1);
          resolve();
        });
      });
      finished++;
      return input;
    },
  });
  return { registry, release: () => waiting.splice(0).forEach((r) => r()), waiting: () => waiting.length, finished: () => finished };
}

/** The settings' defaults, for the limits these tests leave alone. */
const { maxEngineInflight, maxBodyMemory, requestTimeoutMs } = loadConfig({});

async function start(registry: RouteRegistry, maxInflight = 2, shutdownTimeoutMs = 5000) {
  server = await listen({
    host: '127.0.0.1',
    port: 0,
    registry,
    verifier: new StaticTokenVerifier('t'),
    limits: { maxBodyBytes: 4096, maxUploadBytes: 1024, maxInflight, maxEngineInflight, maxBodyMemory, requestTimeoutMs },
    shutdownTimeoutMs,
    log: createLogger('silent'),
  });
  return `http://127.0.0.1:${server.port}`;
}

const until = async (cond: () => boolean) => {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
};

describe('HTTP server', () => {
  it('refuses requests beyond the concurrency limit with 503 and Retry-After', async () => {
    const s = slowRegistry();
    const base = await start(s.registry, 2);
    const held = [1, 2].map(() => fetch(`${base}/v0/slow/`, { method: 'POST' }));
    await until(() => s.waiting() === 2);
    const refused = await fetch(`${base}/v0/slow/`, { method: 'POST' });
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(await refused.json()).toMatchObject({ code: 503, error: 'SERVICE_UNAVAILABLE' });
    s.release();
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([200, 200]);
  });

  it('takes parameters from the query string, the body winning over it', async () => {
    const s = slowRegistry();
    const base = await start(s.registry);
    const p = fetch(`${base}/v0/slow/?flag=true&name=query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'body' }),
    });
    await until(() => s.waiting() === 1);
    s.release();
    expect(await (await p).json()).toEqual({ flag: true, name: 'body' });
  });

  it('reads a chunked body', async () => {
    const s = slowRegistry();
    const base = new URL(await start(s.registry));
    const body = await new Promise<string>((resolve, reject) => {
      const req = http.request({ host: base.hostname, port: base.port, path: '/v0/slow/', method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve(text));
      });
      req.on('error', reject);
      req.write('{"name":');
      setTimeout(() => {
        req.end('"chunked"}');
        until(() => s.waiting() === 1).then(s.release);
      }, 20);
    });
    expect(JSON.parse(body)).toEqual({ name: 'chunked' });
  });

  it('survives a client that disconnects while its request is in progress', async () => {
    const s = slowRegistry();
    const base = await start(s.registry);
    const ac = new AbortController();
    const p = fetch(`${base}/v0/slow/`, { method: 'POST', signal: ac.signal }).catch((e) => e);
    await until(() => s.waiting() === 1);
    ac.abort();
    await p;
    await until(() => s.finished() === 1);
    expect(server?.state.inflight).toBe(0);
    const again = fetch(`${base}/v0/slow/`, { method: 'POST' });
    await until(() => s.waiting() === 1);
    s.release();
    expect((await again).status).toBe(200);
  });

  it('lets requests in progress finish on close, then stops accepting', async () => {
    const s = slowRegistry();
    const base = await start(s.registry);
    const inFlight = fetch(`${base}/v0/slow/`, { method: 'POST', headers: { connection: 'close' } });
    await until(() => s.waiting() === 1);
    const closed = server!.close();
    setTimeout(s.release, 50);
    const res = await inFlight;
    expect(res.status).toBe(200);
    await closed;
    await expect(fetch(`${base}/v0/slow/`, { method: 'POST' })).rejects.toThrow();
    server = undefined;
  });
});

describe('streamed replies', () => {
  /** A route streaming `count` chunks of `size` bytes, recording how far the producer got and whether it was closed. */
  function streamRegistry(count: number, size: number, failAt?: number, handlerMs = 0) {
    const registry = new RouteRegistry();
    const state = { produced: 0, closed: false, answered: false };
    registry.define({
      method: 'GET',
      path: '/stream',
      summary: 'Streams chunks',
      auth: false,
      response: { status: 200, description: 'chunks', alternatives: ['text/plain'] },
      errors: [],
      async handler() {
        // What a listing does before it answers (opening its cursor), taking a while.
        await new Promise((r) => setTimeout(r, handlerMs));
        state.answered = true;
        async function* chunks() {
          try {
            for (let i = 0; i < count; i++) {
              if (i === failAt) throw new Error('producer failed');
              state.produced++;
              yield Buffer.alloc(size, 97 + (i % 26));
            }
          } finally {
            state.closed = true;
          }
        }
        return Reply.stream(chunks(), 'text/plain');
      },
    });
    return { registry, state };
  }

  it('sends every chunk in order', async () => {
    const { registry, state } = streamRegistry(50, 1000);
    const base = await start(registry);
    const res = await fetch(`${base}/stream`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain');
    const body = Buffer.from(await res.arrayBuffer());
    expect(body.length).toBe(50_000);
    expect(body[0]).toBe(97);
    expect(body[49_999]).toBe(97 + (49 % 26));
    expect(state.closed).toBe(true);
  });

  it('does not run ahead of a slow reader, and closes the producer when the client leaves', async () => {
    const { registry, state } = streamRegistry(2000, 64 * 1024);
    const base = await start(registry);
    await new Promise<void>((resolve) => {
      const req = http.get(`${base}/stream`, (res) => {
        res.pause();
        // Nothing is read for a while: the producer must stall long before the 128 MiB are produced.
        setTimeout(() => {
          expect(state.produced).toBeLessThan(400);
          req.destroy();
          resolve();
        }, 500);
      });
      req.on('error', () => {});
    });
    await until(() => state.closed);
    expect(state.closed).toBe(true);
    expect(state.produced).toBeLessThan(2000);
  });

  it('closes the producer of a client that left before the answer began', async () => {
    const { registry, state } = streamRegistry(10, 1000, undefined, 300);
    const base = await start(registry);
    await new Promise<void>((resolve) => {
      const req = http.get(`${base}/stream`);
      req.on('error', () => resolve());
      setTimeout(() => req.destroy(), 50);
    });
    await until(() => state.closed);
    expect(state).toMatchObject({ answered: true, closed: true });
  });

  it('cuts the connection when the producer fails after the status was sent, so no client takes a partial body as whole', async () => {
    const { registry, state } = streamRegistry(100, 1000, 10);
    const base = await start(registry);
    // Whether the cut comes before or after the headers reached the client depends on buffering; either way it fails.
    await expect(fetch(`${base}/stream`).then((res) => res.arrayBuffer())).rejects.toThrow();
    expect(state.closed).toBe(true);
  });
});
