import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DomainError } from '../errors.js';
import { isPublicAddress } from './address-guard.js';
import { fetchPhoto, PhotoSource, type PhotoFetchOptions } from './photo-source.js';

let server: http.Server;
let base: string;
const sockets = new Set<import('node:net').Socket>();

beforeAll(async () => {
  server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    switch (url.pathname) {
      case '/ok':
        res.writeHead(200, { 'content-type': 'image/jpeg' });
        res.end('JPEGDATA');
        return;
      case '/redirect': {
        const left = Number(url.searchParams.get('n') ?? '0');
        res.writeHead(302, { location: left > 0 ? `/redirect?n=${left - 1}` : '/ok' });
        res.end();
        return;
      }
      case '/to-private':
        res.writeHead(302, { location: 'http://10.1.2.3/x' });
        res.end();
        return;
      case '/to-ftp':
        res.writeHead(301, { location: 'ftp://example.com/x.jpg' });
        res.end();
        return;
      case '/big-declared':
        res.writeHead(200, { 'content-length': '100000' });
        res.end(Buffer.alloc(100000));
        return;
      case '/big-chunked':
        res.writeHead(200);
        for (let i = 0; i < 20; i++) res.write(Buffer.alloc(5000));
        res.end();
        return;
      case '/slow':
        res.writeHead(200);
        res.write('partial');
        return; // never ends
      case '/hang':
        return; // never answers
      default:
        res.writeHead(404);
        res.end();
    }
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((r) => server.close(r));
});

const opts: PhotoFetchOptions = { timeoutMs: 2000, maxRedirects: 3, maxBytes: 50_000, allowPrivate: true };

async function failure(p: Promise<unknown>): Promise<DomainError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof DomainError) return e;
    throw e;
  }
  throw new Error('expected a failure');
}

describe('fetchPhoto', () => {
  it('fetches a 2xx body', async () => {
    expect((await fetchPhoto(`${base}/ok`, opts)).toString()).toBe('JPEGDATA');
  });

  it('refuses loopback and private addresses unless allowed', async () => {
    const err = await failure(fetchPhoto(`${base}/ok`, { ...opts, allowPrivate: false }));
    expect(err).toMatchObject({ code: 'PHOTO_FETCH_FAILED' });
    expect(err.message).toMatch(/not public/);
  });

  it('refuses a host name whose resolution includes a private address', async () => {
    const resolve = async () => [
      { address: '93.184.216.34', family: 4 },
      { address: '192.168.1.10', family: 4 },
    ];
    const err = await failure(fetchPhoto('http://photos.example/a.jpg', { ...opts, allowPrivate: false, resolve }));
    expect(err.code).toBe('PHOTO_FETCH_FAILED');
  });

  it('connects to the address it checked, not to a second resolution', async () => {
    let calls = 0;
    const resolve = async () => {
      calls++;
      return [{ address: '127.0.0.1', family: 4 }];
    };
    const port = new URL(base).port;
    const body = await fetchPhoto(`http://photos.invalid:${port}/ok`, { ...opts, resolve });
    expect(body.toString()).toBe('JPEGDATA');
    expect(calls).toBe(1);
  });

  it('gives up on a DNS answer that never comes, at the fetch deadline', async () => {
    const resolve = () => new Promise<Array<{ address: string; family: number }>>(() => {});
    const started = Date.now();
    const err = await failure(fetchPhoto('http://slow-dns.example/a.jpg', { ...opts, timeoutMs: 200, resolve }));
    expect(err.code).toBe('PHOTO_FETCH_FAILED');
    expect(err.message).toMatch(/timed out/);
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('refuses schemes other than http and https with BAD_PARAM', async () => {
    for (const url of ['ftp://example.com/a.jpg', 'file:///etc/passwd', 'data:image/png;base64,AAAA']) {
      expect((await failure(fetchPhoto(url, opts)))).toMatchObject({ code: 'BAD_PARAM' });
    }
    expect((await failure(fetchPhoto('not a url', opts))).code).toBe('BAD_PARAM');
  });

  it('refuses a URL whose host is not spelled out as one, before any name lookup', async () => {
    const looked: string[] = [];
    const resolve = async (host: string) => {
      looked.push(host);
      return [];
    };
    for (const url of ['http:///a.jpg', 'http:a.jpg', 'http:\\\\a.jpg', 'https:////a.jpg', 'http://exa mple.com/a.jpg', 'http://-bad-.example/a.jpg']) {
      const err = await failure(fetchPhoto(url, { ...opts, resolve }));
      expect(err.code, url).toBe('BAD_PARAM');
    }
    expect(looked).toEqual([]);
    // A host that is spelled out is looked up as usual.
    expect((await failure(fetchPhoto('http://a.example/a.jpg', { ...opts, resolve }))).code).toBe('PHOTO_FETCH_FAILED');
    expect(looked).toEqual(['a.example']);
  });

  it('follows redirects up to the limit', async () => {
    expect((await fetchPhoto(`${base}/redirect?n=2`, opts)).toString()).toBe('JPEGDATA');
    const err = await failure(fetchPhoto(`${base}/redirect?n=3`, opts));
    expect(err.code).toBe('PHOTO_FETCH_FAILED');
    expect(err.message).toMatch(/redirects/);
  });

  it('checks every redirect hop', async () => {
    // Loopback stands in for "public" here, so the first hop reaches the test server.
    const guarded = { ...opts, allowPrivate: false, isAllowedAddress: (a: string) => a === '127.0.0.1' };
    expect((await fetchPhoto(`${base}/redirect?n=1`, guarded)).toString()).toBe('JPEGDATA');
    const toPrivate = await failure(fetchPhoto(`${base}/to-private`, guarded));
    expect(toPrivate.code).toBe('PHOTO_FETCH_FAILED');
    expect(toPrivate.message).toMatch(/10\.1\.2\.3 is not public/);
    const toFtp = await failure(fetchPhoto(`${base}/to-ftp`, guarded));
    expect(toFtp.code).toBe('BAD_PARAM');
  });

  it('enforces the size limit from Content-Length and while streaming', async () => {
    expect((await failure(fetchPhoto(`${base}/big-declared`, opts)))).toMatchObject({ code: 'PAYLOAD_TOO_LARGE' });
    expect((await failure(fetchPhoto(`${base}/big-chunked`, opts))).code).toBe('PAYLOAD_TOO_LARGE');
  });

  it('answers non-2xx with PHOTO_FETCH_FAILED naming the status', async () => {
    const err = await failure(fetchPhoto(`${base}/missing`, opts));
    expect(err.code).toBe('PHOTO_FETCH_FAILED');
    expect(err.message).toMatch(/404/);
  });

  it('times out a server that never answers or never finishes', async () => {
    const t0 = Date.now();
    const err = await failure(fetchPhoto(`${base}/hang`, { ...opts, timeoutMs: 200 }));
    expect(err.code).toBe('PHOTO_FETCH_FAILED');
    expect(err.message).toMatch(/timed out/);
    expect(Date.now() - t0).toBeLessThan(1500);
    expect((await failure(fetchPhoto(`${base}/slow`, { ...opts, timeoutMs: 200 }))).message).toMatch(/timed out/);
  });

  it('reports a closed port as PHOTO_FETCH_FAILED', async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    const err = await failure(fetchPhoto(`http://127.0.0.1:${port}/x.jpg`, opts));
    expect(err.code).toBe('PHOTO_FETCH_FAILED');
    expect(err.message).toMatch(/ECONNREFUSED/);
  });

  it('stops when the caller aborts', async () => {
    const ac = new AbortController();
    const p = fetchPhoto(`${base}/hang`, opts, ac.signal);
    ac.abort(new Error('client went away'));
    await expect(p).rejects.toThrow('client went away');
  });
});

describe('PhotoSource', () => {
  it('passes uploads through and names the parameter on failure', async () => {
    const src = new PhotoSource(opts);
    expect((await src.load(Buffer.from('abc'), 'photo')).toString()).toBe('abc');
    const err = await failure(src.load(`${base}/missing`, 'photo2'));
    expect(err.param).toBe('photo2');
    expect((await failure(src.load(Buffer.alloc(60_000), 'photo1')))).toMatchObject({ code: 'PAYLOAD_TOO_LARGE', param: 'photo1' });
  });
});

describe('isPublicAddress', () => {
  it('refuses loopback, private, link-local, CGNAT, multicast and reserved ranges', () => {
    for (const a of ['127.0.0.1', '10.0.0.1', '172.16.5.4', '192.168.0.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '224.0.0.1', '255.255.255.255', '::1', '::', 'fe80::1', 'fd00::1', 'ff02::1', '::ffff:127.0.0.1', '::ffff:10.0.0.1', '::127.0.0.1', '::7f00:1', '::a00:1', '::8.8.8.8', '64:ff9b::a00:1', 'not-an-ip']) {
      expect(isPublicAddress(a), a).toBe(false);
    }
  });

  it('accepts public addresses', () => {
    for (const a of ['8.8.8.8', '93.184.216.34', '172.32.0.1', '2606:4700:4700::1111', '::ffff:8.8.8.8']) {
      expect(isPublicAddress(a), a).toBe(true);
    }
  });
});
