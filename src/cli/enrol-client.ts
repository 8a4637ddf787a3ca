/**
 * The HTTP side of bulk enrolment: one client of a running service, through
 * fetch (undici: keep-alive connections, reused across requests).
 *
 * Transient failures are retried with exponential backoff (0.5 s doubling to
 * 15 s, never sooner than the service's Retry-After) for up to `retryForMs`
 * per request: 503 and 429 answers, and connections refused, reset or timed
 * out. Any other answer is final. Each add carries an `Idempotency-Key`
 * made from the photo's meta, hash and fields, so when a failed add may
 * still have been stored (the connection broke after the photo went out, the
 * service's deadline passed while it was storing, a database failover), the
 * retry is answered with the stored faces instead of storing them twice.
 */
import { createHash } from 'node:crypto';
import { contentTypeOf } from './enrol-sources.js';

export interface ClientOptions {
  url: string;
  token: string;
  /** How long one request may keep being retried. */
  retryForMs: number;
  /** One attempt's limit (the service answers within its own deadline, 30 s by default). */
  attemptTimeoutMs: number;
}

export interface StoredFaceRef {
  meta: string;
  photo_hash: string;
}

export type AddOutcome =
  | { kind: 'added'; faces: number; indexLag: boolean }
  | { kind: 'no-face' }
  | { kind: 'error'; code: string; status?: number; reason: string };

/** The service cannot be used at all (unreachable, token refused): the run stops. */
export class FatalError extends Error {}


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The error code of a failed fetch: the cause's code (ECONNRESET, UND_ERR_SOCKET, ...), or TIMEOUT. */
export function networkCode(err: unknown): string {
  const e = err as { name?: string; code?: string; cause?: { code?: string; name?: string; cause?: { code?: string } } };
  if (e?.name === 'TimeoutError' || e?.cause?.name === 'TimeoutError') return 'TIMEOUT';
  return e?.cause?.code ?? e?.cause?.cause?.code ?? e?.code ?? 'NETWORK_ERROR';
}

/** Retry-After in ms (delta-seconds or an HTTP date), at most a minute. */
function retryAfterMs(value: string | null): number {
  if (!value) return 0;
  const s = Number(value);
  const ms = Number.isFinite(s) ? s * 1000 : Date.parse(value) - Date.now();
  return Number.isFinite(ms) ? Math.min(60_000, Math.max(0, ms)) : 0;
}

interface ErrorBody {
  error?: string;
  reason?: string;
}

async function errorBody(res: Response): Promise<ErrorBody> {
  const text = await res.text().catch(() => '');
  try {
    const j = JSON.parse(text) as ErrorBody;
    return typeof j === 'object' && j !== null ? j : {};
  } catch {
    return { reason: text.slice(0, 200) };
  }
}

export class EnrolClient {
  /** Retries made, by cause (error code or network code). */
  readonly retries = new Map<string, number>();

  constructor(private readonly o: ClientOptions) {}

  private headers(): Record<string, string> {
    return { Authorization: `Token ${this.o.token}` };
  }

  private countRetry(cause: string): void {
    this.retries.set(cause, (this.retries.get(cause) ?? 0) + 1);
  }

  /**
   * One request, retried while transient; `send` makes a fresh attempt. A
   * network failure left after the retries throws FatalError.
   */
  private async withRetries<T>(send: (signal: AbortSignal) => Promise<Response>, onAnswer: (res: Response) => Promise<T | undefined>): Promise<T> {
    const start = Date.now();
    for (let attempt = 0; ; attempt++) {
      let wait: number;
      let cause: string;
      try {
        const res = await send(AbortSignal.timeout(this.o.attemptTimeoutMs));
        if (res.status !== 503 && res.status !== 429) {
          const out = await onAnswer(res);
          if (out !== undefined) return out;
          throw new Error(`unexpected answer ${res.status}`);
        }
        const body = await errorBody(res);
        cause = body.error ?? `HTTP_${res.status}`;
        wait = retryAfterMs(res.headers.get('retry-after'));
        if (Date.now() - start + wait > this.o.retryForMs) {
          const out = await onAnswer(new Response(JSON.stringify(body), { status: res.status }));
          if (out !== undefined) return out;
          throw new FatalError(`the service kept answering ${res.status} ${cause}: ${body.reason ?? ''}`);
        }
      } catch (err) {
        if (err instanceof FatalError) throw err;
        if (!(err instanceof TypeError) && (err as Error).name !== 'TimeoutError') throw err;
        cause = networkCode(err);
        wait = 0;
        if (Date.now() - start > this.o.retryForMs) throw new FatalError(`cannot reach the service at ${this.o.url}: ${cause}`);
      }
      this.countRetry(cause);
      const backoff = Math.min(15_000, 500 * 2 ** Math.min(attempt, 5)) * (0.5 + Math.random() / 2);
      await sleep(Math.max(wait, backoff));
    }
  }

  /** GET /health: reachable at all (no token needed). */
  async health(): Promise<void> {
    try {
      const res = await fetch(`${this.o.url}/health`, { signal: AbortSignal.timeout(10_000) });
      await res.arrayBuffer();
      if (res.status !== 200) throw new FatalError(`${this.o.url}/health answered ${res.status}: is this the face service?`);
    } catch (err) {
      if (err instanceof FatalError) throw err;
      throw new FatalError(`cannot reach the service at ${this.o.url}: ${networkCode(err)}`);
    }
  }

  /** A GET with the token, its JSON answer; anything but 200 is fatal (401 names the token). */
  private async getJson<T>(pathAndQuery: string): Promise<T> {
    return this.withRetries(
      (signal) => fetch(`${this.o.url}${pathAndQuery}`, { headers: this.headers(), signal }),
      async (res) => {
        if (res.status === 200) return (await res.json()) as T;
        const body = await errorBody(res);
        if (res.status === 401) throw new FatalError(`the service refused the token (401 ${body.error ?? ''}): give a valid one with --token or FACE_TOKEN`);
        throw new FatalError(`GET ${pathAndQuery} answered ${res.status} ${body.error ?? ''}: ${body.reason ?? ''}`);
      },
    );
  }

  async galleries(): Promise<string[]> {
    return (await this.getJson<{ results: string[] }>('/v0/galleries/')).results;
  }

  /**
   * Every stored face, page by page (`pageSize` faces a request, by id
   * descending, following next_page): only one page is in memory at a time.
   * With a gallery, that gallery's faces.
   */
  async *storedFaces(gallery: string | undefined, pageSize: number): AsyncGenerator<StoredFaceRef[]> {
    let next: string | undefined = `${gallery ? `/v0/faces/gallery/${gallery}/` : '/v0/faces/'}?limit=${pageSize}`;
    while (next) {
      const page: { results: StoredFaceRef[]; next_page?: string } = await this.getJson(next);
      yield page.results.map((f) => ({ meta: f.meta, photo_hash: f.photo_hash }));
      next = page.next_page;
    }
  }

  /** POST /v0/face/ with one photo. */
  async add(photo: { bytes: Buffer; name: string; meta: string; hash: string }, fields: { mfSelector: string; galleries: string[] }): Promise<AddOutcome> {
    // The same photo, meta and fields make the same key, in this run and in a rerun.
    const key = `enrol-${createHash('sha256').update(JSON.stringify([photo.meta, photo.hash, fields.mfSelector, fields.galleries])).digest('hex').slice(0, 32)}`;
    const send = (signal: AbortSignal) => {
      const fd = new FormData();
      fd.append('photo', new Blob([new Uint8Array(photo.bytes.buffer as ArrayBuffer, photo.bytes.byteOffset, photo.bytes.byteLength)], { type: contentTypeOf(photo.name) }), photo.name);
      fd.append('meta', photo.meta);
      fd.append('mf_selector', fields.mfSelector);
      if (fields.galleries.length > 0) fd.append('galleries', JSON.stringify(fields.galleries));
      return fetch(`${this.o.url}/v0/face/`, { method: 'POST', headers: { ...this.headers(), 'Idempotency-Key': key }, body: fd, signal });
    };
    const onAnswer = async (res: Response): Promise<AddOutcome> => {
      if (res.status === 200) {
        const body = (await res.json()) as { results?: unknown[] };
        return { kind: 'added', faces: body.results?.length ?? 0, indexLag: res.headers.has('x-index-lag') };
      }
      const body = await errorBody(res);
      if (res.status === 401) throw new FatalError(`the service refused the token (401 ${body.error ?? ''}): give a valid one with --token or FACE_TOKEN`);
      if (res.status === 422 && body.error === 'NO_FACE') return { kind: 'no-face' };
      return { kind: 'error', code: body.error ?? `HTTP_${res.status}`, status: res.status, reason: body.reason ?? res.statusText };
    };
    return this.withRetries(send, onAnswer);
  }
}
