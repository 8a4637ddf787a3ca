import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { EnrolClient, FatalError } from './enrol-client.js';

let server: http.Server | undefined;

afterEach(async () => {
  await new Promise((r) => (server ? server.close(r) : r(undefined)));
  server = undefined;
});

/** A stand-in service: `handle` answers each request, numbered from 0. */
async function fake(handle: (req: http.IncomingMessage, res: http.ServerResponse, n: number) => void): Promise<EnrolClient> {
  let n = 0;
  server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => handle(req, res, n++));
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return new EnrolClient({ url, token: 't', retryForMs: 5000, attemptTimeoutMs: 5000 });
}

const photo = { bytes: Buffer.from('jpeg'), name: 'a.jpg', meta: 'Ann', hash: 'ab'.repeat(32) };
const fields = { mfSelector: 'biggest', galleries: [] };
const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
  res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));

describe('EnrolClient.add', () => {
  it('retries 429 and 503 after Retry-After, and counts the retries by code', async () => {
    const client = await fake((_req, res, n) => {
      if (n === 0) json(res, 429, { code: 429, error: 'TOO_MANY_REQUESTS', reason: 'slow down' }, { 'retry-after': '0' });
      else if (n === 1) json(res, 503, { code: 503, error: 'SERVICE_UNAVAILABLE', reason: 'busy' }, { 'retry-after': '0' });
      else json(res, 200, { results: [{ id: 1 }] });
    });
    expect(await client.add(photo, fields)).toEqual({ kind: 'added', faces: 1, indexLag: false });
    expect(Object.fromEntries(client.retries)).toEqual({ TOO_MANY_REQUESTS: 1, SERVICE_UNAVAILABLE: 1 });
  });

  it('after a connection reset, sends the photo again with the same Idempotency-Key, which the service answers from', async () => {
    const sent: string[] = [];
    const client = await fake((req, res, n) => {
      sent.push(`${req.method} ${req.url} ${String(req.headers['idempotency-key'])}`);
      if (n === 0) req.socket.destroy();
      else json(res, 200, { results: [{ id: 1 }] }, { 'idempotency-replayed': 'true' });
    });
    expect(await client.add(photo, fields)).toEqual({ kind: 'added', faces: 1, indexLag: false });
    expect(sent).toHaveLength(2);
    expect(sent[0]).toMatch(/^POST \/v0\/face\/ enrol-[0-9a-f]{32}$/);
    expect(sent[1]).toBe(sent[0]);
    // Another meta is another key.
    await client.add({ ...photo, meta: 'Bob' }, fields);
    expect(sent[2]).not.toBe(sent[0]);
  });

  it('4xx answers are final: NO_FACE is its own outcome, others carry their code and reason', async () => {
    const client = await fake((_req, res, n) => {
      if (n === 0) json(res, 422, { code: 422, error: 'NO_FACE', reason: 'No face found' });
      else json(res, 415, { code: 415, error: 'IMAGE_UNSUPPORTED', reason: 'not an image' });
    });
    expect(await client.add(photo, fields)).toEqual({ kind: 'no-face' });
    expect(await client.add(photo, fields)).toEqual({ kind: 'error', code: 'IMAGE_UNSUPPORTED', status: 415, reason: 'not an image' });
    expect(client.retries.size).toBe(0);
  });

  it('a refused token stops the run', async () => {
    const client = await fake((_req, res) => json(res, 401, { code: 401, error: 'AUTH_FAILED', reason: 'no' }));
    await expect(client.add(photo, fields)).rejects.toThrow(FatalError);
  });
});
