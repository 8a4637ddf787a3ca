/**
 * The load tool (test/harness/http/http-load.ts, autocannon underneath) against a small
 * node:http server in this process that answers by path, so every count the
 * tool reports can be checked against what the server saw: answers, status
 * breakdown, kinds, `check` overrides, the open loop's rate, connection
 * errors, and the generator's CPU. Also wrk's output parser.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { byKind, runLoad } from '../harness/http/http-load.js';
import { freePort } from '../harness/load-service.js';
import { parseWrk } from '../harness/http/wrk.js';

let server: http.Server;
let base: string;
/** Requests the server saw, by path, and each one's arrival (ms, performance.now()). */
const seen = new Map<string, number>();
const arrivals: number[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    arrivals.push(performance.now());
    const url = req.url ?? '';
    seen.set(url, (seen.get(url) ?? 0) + 1);
    if (req.headers.authorization !== 'Token t') {
      res.writeHead(401).end();
      return;
    }
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      if (url.startsWith('/fail')) res.writeHead(500, { 'Content-Type': 'application/json' }).end('{"error":"x"}');
      else res.writeHead(200, { 'Content-Type': 'application/json', 'X-Echo-Length': String(body.length) }).end(JSON.stringify({ url, body }));
    });
  });
  server.keepAliveTimeout = 10_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const reset = () => {
  seen.clear();
  arrivals.length = 0;
};

describe('load tool', () => {
  it('closed loop over fixed requests: every answer counted once, failures by status, kinds apart', async () => {
    reset();
    const r = await runLoad({
      name: 'fixed',
      base,
      headers: { Authorization: 'Token t' },
      fixed: [
        { path: '/a', kind: 'a' },
        { path: '/a', kind: 'a' },
        { path: '/fail', kind: 'fail' },
      ],
      connections: 3,
      requests: 300,
      seconds: 30,
    });
    const served = [...seen.values()].reduce((a, b) => a + b, 0);
    expect(r.requests).toBe(300);
    expect(served).toBe(300);
    expect(r.statuses).toEqual({ 200: seen.get('/a'), 500: seen.get('/fail') });
    expect(r.errors).toBe(seen.get('/fail'));
    // 100 per connection, each cycling a, a, fail from the start: 33 failures each.
    expect(seen.get('/fail')).toBe(99);
    const kinds = Object.fromEntries(byKind(r).map((k) => [k.name, k.requests]));
    expect(kinds).toEqual({ 'fixed: a': 201, 'fixed: fail': 99 });
    expect(r.p50).toBeGreaterThan(0);
    expect(r.p99).toBeGreaterThanOrEqual(r.p50);
    expect(r.perSecond).toBeGreaterThan(0);
    expect(r.generator?.cores).toBeGreaterThan(0);
    expect(Number.isFinite(r.generator?.coresPer10k)).toBe(true);
  });

  it('built requests: numbered once each across connections, bodies and headers sent, check can fail an answer', async () => {
    reset();
    const numbers: number[] = [];
    // Collected, not asserted in the callback: an exception there would land inside autocannon.
    const wrong: string[] = [];
    const r = await runLoad({
      name: 'built',
      base,
      headers: { Authorization: 'Token t' },
      request: (i) => ({ method: 'POST', path: `/n/${i}`, headers: { 'Content-Type': 'text/plain' }, body: 'x'.repeat(i % 7), kind: i % 2 ? 'odd' : 'even' }),
      check: (a) => {
        numbers.push(a.i!);
        const echoed = JSON.parse(a.body) as { url: string; body: string };
        if (echoed.url !== `/n/${a.i}`) wrong.push(`${a.i}: url ${echoed.url}`);
        if (a.headers['x-echo-length'] !== String(a.i! % 7)) wrong.push(`${a.i}: body length ${a.headers['x-echo-length']}`);
        if (!(a.ms >= 0)) wrong.push(`${a.i}: ms ${a.ms}`);
        return a.i! % 10 === 0 ? 599 : undefined;
      },
      connections: 4,
      requests: 200,
      seconds: 30,
    });
    expect(wrong).toEqual([]);
    expect(r.requests).toBe(200);
    // A connection builds its next request as it sends it: numbers are unique, in order per connection.
    expect(new Set(numbers).size).toBe(200);
    expect(r.statuses?.['599']).toBe(numbers.filter((i) => i % 10 === 0).length);
    expect(r.errors).toBe(r.statuses?.['599']);
    expect(byKind(r).map((k) => k.name).sort()).toEqual(['built: even', 'built: odd']);
  });

  it('a wrong token is a failure, not a success', async () => {
    reset();
    const r = await runLoad({ name: 'no token', base, fixed: [{ path: '/a' }], connections: 2, requests: 20, seconds: 30 });
    expect(r.statuses).toEqual({ 401: 20 });
    expect(r.errors).toBe(20);
  });

  it('open loop: holds the asked rate, not more', async () => {
    reset();
    const r = await runLoad({ name: 'open', base, headers: { Authorization: 'Token t' }, fixed: [{ path: '/a' }], rate: 50, connections: 16, seconds: 3 });
    expect(r.targetRate).toBe(50);
    // Each second's share goes out at the start of the second; the run ends on a whole second.
    expect(r.requests).toBeGreaterThanOrEqual(140);
    expect(r.requests).toBeLessThanOrEqual(210);
    const first = arrivals[0];
    const inFirstSecond = arrivals.filter((t) => t - first < 900).length;
    expect(inFirstSecond).toBeLessThanOrEqual(50);
    expect(r.errors).toBe(0);
  });

  it('worker threads: fixed requests reach the server, answers counted in the workers', async () => {
    reset();
    const r = await runLoad({ name: 'workers', base, headers: { Authorization: 'Token t' }, fixed: [{ path: '/a' }, { path: '/fail' }], connections: 4, seconds: 2, workers: 2 });
    const served = [...seen.values()].reduce((a, b) => a + b, 0);
    expect(r.requests).toBeGreaterThan(0);
    // Workers stop on their own clock: the server may have answered a few more than were counted.
    expect(r.requests).toBeLessThanOrEqual(served);
    expect(r.requests).toBeGreaterThan(served * 0.9);
    expect(r.statuses?.['500']).toBe(r.errors);
    expect(r.samples).toBeUndefined();
    expect(r.generator?.cores).toBeGreaterThan(0);
  });

  it('a server that is not there: errors, and the run still ends', async () => {
    const port = await freePort();
    const r = await runLoad({ name: 'refused', base: `http://127.0.0.1:${port}`, fixed: [{ path: '/' }], connections: 2, seconds: 1 });
    expect(r.requests).toBe(0);
    expect(r.errors).toBeGreaterThan(0);
    expect(r.statuses?.['0']).toBe(r.errors);
  });

  it('refuses a run without a bound or without requests', async () => {
    await expect(runLoad({ name: 'x', base, fixed: [{ path: '/' }] })).rejects.toThrow(/count or a duration/);
    await expect(runLoad({ name: 'x', base, seconds: 1 })).rejects.toThrow(/one of them/);
  });

  it("reads wrk's report", () => {
    const out = [
      'Running 10s test @ http://127.0.0.1:8080',
      '  1 threads and 32 connections',
      '  Thread Stats   Avg      Stdev     Max   +/- Stdev',
      '    Latency     3.10ms  612.00us  20.01ms   90.00%',
      '    Req/Sec    10.40k   300.00    11.00k    70.00%',
      '  Latency Distribution',
      '     50%    2.95ms',
      '     75%    3.20ms',
      '     90%  850.00us',
      '     99%    1.20s',
      '  104000 requests in 10.00s, 50.00MB read',
      '  Socket errors: connect 0, read 1, write 0, timeout 2',
      '  Non-2xx or 3xx responses: 4',
      'Requests/sec:  10400.50',
      'Transfer/sec:      5.00MB',
    ].join('\n');
    expect(parseWrk(out)).toEqual({ requests: 104000, perSecond: 10400.5, p50: 2.95, p90: 0.85, p99: 1200, errors: 7 });
  });
});
