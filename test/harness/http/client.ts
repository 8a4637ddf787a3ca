/**
 * The service as the load tools see it outside the timed load: the six demo photos, a client
 * that seeds and probes with `fetch` and builds the load's multipart requests, and the cheap
 * read's paths. Used by the load tool (bench/http/load.ts), the peers, the cluster bench and
 * the soak.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot } from '../../../src/config/index.js';
import type { HttpRequest } from './http-load.js';
import { multipart } from './raw-http.js';

/** The six demo group photos of @vladmandic/face-api (22 faces). */
export function demoPhotos(): Buffer[] {
  const dir = path.join(findProjectRoot(), 'node_modules/@vladmandic/face-api/demo');
  return [1, 2, 3, 4, 5, 6].map((i) => readFileSync(path.join(dir, `sample${i}.jpg`)));
}

const REQUEST_TIMEOUT_MS = 60_000;

/** Talks to the service outside the timed load: seeding and probing with `fetch`; the load's requests as `HttpRequest`s. */
export class Client {
  private readonly blobs: Blob[];
  constructor(
    readonly base: string,
    private readonly token: string,
    private readonly photos: Buffer[],
  ) {
    this.blobs = photos.map((p) => new Blob([new Uint8Array(p)], { type: 'image/jpeg' }));
  }

  get auth() {
    return { Authorization: `Token ${this.token}` };
  }

  /** For `fetch`: a number is photo number n (modulo the photos), a string a plain field. */
  form(fields: Record<string, string | number>): FormData {
    const fd = new FormData();
    for (const [k, v] of Object.entries(fields)) {
      if (typeof v === 'number') fd.append(k, this.blobs[v % this.blobs.length], `${k}.jpg`);
      else fd.append(k, v);
    }
    return fd;
  }

  /** The same fields as a multipart request for the load generator. */
  upload(method: string, p: string, fields: Record<string, string | number>, kind?: string): HttpRequest {
    const { body, contentType } = multipart(
      Object.entries(fields).map(([name, v]) =>
        typeof v === 'number' ? { name, value: this.photos[v % this.photos.length], filename: `${name}.jpg`, type: 'image/jpeg' } : { name, value: v },
      ),
    );
    return { method, path: p, headers: { 'Content-Type': contentType }, body, kind };
  }

  async json<T>(method: string, p: string, body?: FormData): Promise<{ status: number; body: T }> {
    const res = await fetch(`${this.base}${p}`, { method, headers: this.auth, body, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
    return { status: res.status, body: parsed as T };
  }

  /** Adds every face of every demo photo; the new face ids. */
  async seed(tag: string): Promise<number[]> {
    const ids: number[] = [];
    for (let i = 0; i < this.blobs.length; i++) {
      const r = await this.json<{ results?: { id: number }[] }>('POST', '/v0/face/', this.form({ photo: i, meta: `${tag}-${i + 1}`, mf_selector: 'all' }));
      if (r.status !== 200) throw new Error(`seeding: POST /v0/face/ answered ${r.status}: ${JSON.stringify(r.body).slice(0, 300)}`);
      ids.push(...(r.body.results ?? []).map((f) => f.id));
    }
    return ids;
  }

  async hasIdentify(): Promise<boolean> {
    const r = await this.json<{ error?: { code?: string } }>('POST', '/v0/identify/', this.form({ photo: 0 }));
    return r.status !== 404;
  }
}

/** GET /v0/face/id/<id>/ of each id: the cheap read, the same for the service and the HTTP peers. */
export const readPaths = (ids: number[]): string[] => ids.map((id) => `/v0/face/id/${id}/`);
