/**
 * Answers given before a request body has been read (no token, a body over
 * the limit, an unsupported type) reach the client: the server drains the
 * rest of the body before answering, within bounds, instead of closing on a
 * client that is still writing. Node's fetch is the client that shows it: on
 * a close mid-body it reports EPIPE and never the answer.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AUTH, startTestService, type TestService } from '../harness/service.js';

let svc: TestService;

beforeAll(async () => {
  svc = await startTestService();
});

afterAll(async () => {
  await svc?.close();
});

const MB = 1 << 20;

/** What fetch reports for each of `times` tries: the status, or the failure's code. */
async function outcomes(times: number, send: () => Promise<Response>): Promise<Record<string, number>> {
  const seen: Record<string, number> = {};
  for (let i = 0; i < times; i++) {
    let key: string;
    try {
      const res = await send();
      key = `${res.status} ${(await res.json()).error}`;
    } catch (err) {
      key = (err as { cause?: { code?: string } }).cause?.code ?? String(err);
    }
    seen[key] = (seen[key] ?? 0) + 1;
  }
  return seen;
}

describe('early answers reach Node fetch', () => {
  it('401 for an upload without a token', async () => {
    const send = () => {
      const body = new FormData();
      body.append('photo', new Blob([Buffer.alloc(20 * MB)]), 'big.jpg');
      return fetch(`${svc.base}/v1/detect/`, { method: 'POST', body });
    };
    expect(await outcomes(5, send)).toEqual({ '401 AUTH_FAILED': 5 });
  });

  it('413 for a body over the limit', async () => {
    const body = Buffer.alloc(svc.config.maxBodyBytes + MB);
    const send = () =>
      fetch(`${svc.base}/v1/detect/`, { method: 'POST', headers: { ...AUTH, 'content-type': 'application/octet-stream' }, body });
    expect(await outcomes(3, send)).toEqual({ '413 PAYLOAD_TOO_LARGE': 3 });
  });

  it('415 for an unsupported content type', async () => {
    const body = Buffer.alloc(20 * MB);
    const send = () => fetch(`${svc.base}/v1/detect/`, { method: 'POST', headers: { ...AUTH, 'content-type': 'text/plain' }, body });
    expect(await outcomes(5, send)).toEqual({ '415 UNSUPPORTED_MEDIA_TYPE': 5 });
  });
});

describe('the drain is bounded', () => {
  /** Sends `head` and returns everything read until the server closes, and how long that took. */
  function exchange(head: string, bodyBytes = 0): Promise<{ text: string; ms: number }> {
    return new Promise((resolve, reject) => {
      const started = performance.now();
      const socket = net.connect(new URL(svc.base).port as unknown as number, '127.0.0.1', () => {
        socket.write(head);
        if (bodyBytes) socket.write(Buffer.alloc(bodyBytes));
      });
      let text = '';
      socket.on('data', (d) => (text += d.toString('latin1')));
      socket.on('error', () => {});
      socket.on('close', () => resolve({ text, ms: performance.now() - started }));
      setTimeout(() => reject(new Error(`no close; read so far: ${text.slice(0, 200)}`)), 20_000).unref();
    });
  }

  it('answers and closes at once when the declared body is beyond what would be drained', async () => {
    const declared = 3 * svc.config.maxBodyBytes;
    const { text, ms } = await exchange(`POST /v1/detect/ HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nContent-Length: ${declared}\r\n\r\n`, MB);
    expect(text).toMatch(/^HTTP\/1\.1 413 /);
    expect(ms).toBeLessThan(5_000);
  });

  it('keeps the connection after draining a refused body, so the next request on it is served', async () => {
    const refused = `POST /v1/detect/ HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello`;
    const next = `GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`;
    const { text } = await exchange(refused + next);
    expect(text).toMatch(/^HTTP\/1\.1 401 /);
    expect(text).toMatch(/HTTP\/1\.1 200 OK[\s\S]*"status"/);
  });
});
