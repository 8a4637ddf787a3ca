/**
 * A request's photo: uploaded bytes, or an http(s) URL fetched here.
 *
 * URL fetching is hardened against being turned on the service's own network:
 * the host is resolved once, every resolved address must be public (unless
 * FACE_FETCH_ALLOW_PRIVATE), and the connection goes to exactly the checked
 * address, so a DNS answer that changes between check and connect cannot
 * redirect it. Each redirect hop is checked the same way. One deadline covers
 * the whole fetch including redirects; the size cap is applied while the body
 * streams.
 *
 * Failures: a malformed URL, a host that is not written out as a valid host
 * name or IP literal (checked before any name lookup), or a non-http(s)
 * scheme is 400 BAD_PARAM; a host
 * that does not resolve, resolves to a refused address, refuses the
 * connection, times out, answers non-2xx or redirects too often is 400
 * PHOTO_FETCH_FAILED (the client's URL is at fault, not this service); a body
 * over the upload limit is 413 PAYLOAD_TOO_LARGE.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import { DomainError } from '../errors.js';
import { isPublicAddress } from './address-guard.js';

export interface PhotoFetchOptions {
  timeoutMs: number;
  maxRedirects: number;
  maxBytes: number;
  allowPrivate: boolean;
  /** Which resolved addresses may be connected to when private ones are refused; replaceable in tests. */
  isAllowedAddress?: (address: string) => boolean;
  /** Name resolution; replaceable in tests. Returns every address of the host. */
  resolve?: (host: string) => Promise<Array<{ address: string; family: number }>>;
}

export type PhotoInput = Buffer | string;

/** The URL a photo parameter named, as stored and shown; undefined for uploads. */
export function photoUrlOf(photo: PhotoInput): string | undefined {
  return typeof photo === 'string' ? photo.trim() : undefined;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** How a photo URL fetch ended, as counted in the service's metrics. */
export type FetchOutcome = 'ok' | 'bad_url' | 'dns' | 'refused_address' | 'http_status' | 'redirects' | 'too_large' | 'timeout' | 'network' | 'cancelled';

/** A failed fetch, carrying how it failed (the client sees only the code and reason). */
class FetchFailure extends DomainError {
  constructor(
    readonly outcome: FetchOutcome,
    code: 'PHOTO_FETCH_FAILED' | 'PAYLOAD_TOO_LARGE' | 'BAD_PARAM',
    reason: string,
    cause?: unknown,
  ) {
    super(code, reason, { cause });
  }
}

const fetchFailed = (outcome: FetchOutcome, reason: string, cause?: unknown) => new FetchFailure(outcome, 'PHOTO_FETCH_FAILED', reason, cause);

const tooLarge = (reason: string) => new FetchFailure('too_large', 'PAYLOAD_TOO_LARGE', reason);

/** A URL problem; the caller attributes it to the photo parameter. */
const badUrl = (reason: string) => new FetchFailure('bad_url', 'BAD_PARAM', reason);

async function systemResolve(host: string): Promise<Array<{ address: string; family: number }>> {
  return dnsLookup(host, { all: true, verbatim: true });
}

/** A lookup that answers with the already checked address whatever it is asked. */
function pinnedLookup(address: string, family: number): LookupFunction {
  return ((_host: string, options: { all?: boolean }, cb: (...args: unknown[]) => void) => {
    if (options?.all) cb(null, [{ address, family }]);
    else cb(null, address, family);
  }) as unknown as LookupFunction;
}

/** A DNS name as resolvers accept it: dot-separated labels of letters, digits, - and _, at most 253 characters. */
const HOST_NAME = /^(?=.{1,253}\.?$)([a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.?$/i;

/**
 * The text must spell out its authority (`scheme://host...`): WHATWG parsing
 * forgives `http:///a.jpg`, `http:a.jpg` and `http:\\a.jpg` by reading `a.jpg`
 * as the host, and a request for one host must not make us look up another.
 * Text without a scheme is a reference resolved against `base` (a redirect).
 */
const HAS_SCHEME = /^[a-z][a-z0-9+.-]*:/i;
const SPELLED_AUTHORITY = /^[a-z][a-z0-9+.-]*:\/\/[^/?#\\\s]/i;

function parsePhotoUrl(text: string, base?: URL): URL {
  const trimmed = text.trim();
  let url: URL;
  try {
    url = new URL(trimmed, base);
  } catch {
    throw badUrl('Not a valid URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw badUrl(`URL scheme ${url.protocol.replace(/:$/, '')} is not allowed; use http or https`);
  }
  if (HAS_SCHEME.test(trimmed) && !SPELLED_AUTHORITY.test(trimmed)) throw badUrl('URL has no host');
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  if (!isIP(host) && !HOST_NAME.test(host)) throw badUrl('URL host is not a valid host name');
  return url;
}

/** Safe to show a client: the URL without credentials or query string. */
function describe(url: URL): string {
  return `${url.protocol}//${url.host}${url.pathname}`;
}

/** Settles with `work`, or rejects as soon as `signal` aborts (the lookup itself cannot be cancelled). */
function abortable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

async function resolveChecked(url: URL, opts: PhotoFetchOptions, signal: AbortSignal): Promise<{ address: string; family: number }> {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  let addresses: Array<{ address: string; family: number }>;
  const literal = isIP(host);
  if (literal) addresses = [{ address: host, family: literal }];
  else {
    try {
      // A slow DNS answer must not outlive the fetch deadline.
      addresses = await abortable((opts.resolve ?? systemResolve)(host), signal);
    } catch (err) {
      if (signal.aborted) throw err;
      throw fetchFailed('dns', `Cannot resolve host ${host}`, err);
    }
  }
  if (addresses.length === 0) throw fetchFailed('dns', `Cannot resolve host ${host}`);
  // All must pass: a host with one public and one private address is refused,
  // as the choice between them is not ours to trust.
  const allowed = opts.isAllowedAddress ?? isPublicAddress;
  if (!opts.allowPrivate && addresses.some((a) => !allowed(a.address))) {
    throw fetchFailed('refused_address', literal ? `Address ${host} is not public; refused` : `Host ${host} resolves to a non-public address; refused`);
  }
  return addresses[0];
}

interface Hop {
  status: number;
  location?: string;
  body?: Buffer;
}

function requestOnce(url: URL, target: { address: string; family: number }, opts: PhotoFetchOptions, signal: AbortSignal): Promise<Hop> {
  return new Promise<Hop>((resolve, reject) => {
    const client = url.protocol === 'https:' ? https : http;
    const req = client.request(url, {
      method: 'GET',
      agent: false,
      lookup: pinnedLookup(target.address, target.family),
      signal,
      headers: { accept: 'image/*', 'user-agent': 'face-service' },
    });
    req.on('error', (err) => reject(signal.aborted ? signal.reason : err));
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      if (REDIRECTS.has(status) && res.headers.location) {
        res.resume();
        resolve({ status, location: res.headers.location });
        req.destroy();
        return;
      }
      if (status < 200 || status > 299) {
        res.resume();
        req.destroy();
        resolve({ status });
        return;
      }
      const declared = Number(res.headers['content-length']);
      const overLimit = tooLarge(`Photo at ${describe(url)} exceeds ${opts.maxBytes} bytes`);
      if (declared > opts.maxBytes) {
        req.destroy();
        reject(overLimit);
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > opts.maxBytes) {
          req.destroy();
          reject(overLimit);
          return;
        }
        chunks.push(chunk);
      });
      res.on('end', () => resolve({ status, body: Buffer.concat(chunks, size) }));
      res.on('error', (err) => reject(signal.aborted ? signal.reason : err));
      res.on('aborted', () => reject(fetchFailed('network', `Connection to ${describe(url)} closed early`)));
    });
    req.end();
  });
}

/** Fetches a photo URL under the guard described above. `signal` cancels it (client went away). */
export async function fetchPhoto(text: string, opts: PhotoFetchOptions, signal?: AbortSignal): Promise<Buffer> {
  let url = parsePhotoUrl(text);
  const deadline = AbortSignal.timeout(opts.timeoutMs);
  const combined = signal ? AbortSignal.any([signal, deadline]) : deadline;
  try {
    for (let hop = 0; ; hop++) {
      combined.throwIfAborted();
      const target = await resolveChecked(url, opts, combined);
      const res = await requestOnce(url, target, opts, combined);
      if (res.location !== undefined) {
        if (hop >= opts.maxRedirects) throw fetchFailed('redirects', `Too many redirects (limit ${opts.maxRedirects})`);
        url = parsePhotoUrl(res.location, url);
        continue;
      }
      if (!res.body) throw fetchFailed('http_status', `Photo URL ${describe(url)} answered HTTP ${res.status}`);
      return res.body;
    }
  } catch (err) {
    if (err instanceof DomainError) throw err;
    if (signal?.aborted) throw signal.reason;
    if (deadline.aborted) throw fetchFailed('timeout', `Fetching the photo timed out after ${opts.timeoutMs} ms`, err);
    const code = (err as { code?: string }).code;
    throw fetchFailed('network', `Fetching ${describe(url)} failed${code ? ` (${code})` : ''}`, err);
  }
}

/** Turns a request's photo parameter into bytes. */
export class PhotoSource {
  /** `onFetch` hears how each URL fetch ended (uploads are not fetches). */
  constructor(
    private readonly opts: PhotoFetchOptions,
    private readonly onFetch: (outcome: FetchOutcome) => void = () => {},
  ) {}

  async load(photo: PhotoInput, param: string, signal?: AbortSignal): Promise<Buffer> {
    if (Buffer.isBuffer(photo)) {
      if (photo.length > this.opts.maxBytes) throw new DomainError('PAYLOAD_TOO_LARGE', `Photo exceeds ${this.opts.maxBytes} bytes`, { param });
      return photo;
    }
    try {
      const bytes = await fetchPhoto(photo, this.opts, signal);
      this.onFetch('ok');
      return bytes;
    } catch (err) {
      this.onFetch(err instanceof FetchFailure ? err.outcome : signal?.aborted ? 'cancelled' : 'network');
      throw err instanceof DomainError ? err.withParam(param) : err;
    }
  }
}
