/**
 * HTTP/1.1 over a raw TCP socket, for requests that fetch() would refuse or
 * normalise: bytes in the path, duplicate or folded headers, a request split
 * across writes, several requests in one write. The answer side parses every
 * response the server writes on the connection, so a tool can tell "no
 * answer", "one answer" and "two answers to what should have been one".
 */
import net from 'node:net';

export interface RawResponse {
  status: number;
  /** Lower-cased names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  body: Buffer;
}

export interface RawResult {
  responses: RawResponse[];
  /** ms from the first write to the end of the first complete response (or to the end of the exchange). */
  ms: number;
  /** Whether the server closed the connection (as opposed to our timeout ending it). */
  closedByServer: boolean;
  /** A socket error (ECONNREFUSED, ECONNRESET, ...), if one happened. */
  error?: string;
  timedOut: boolean;
}

export interface RawOptions {
  /** Writes in order; a number is a pause in ms between writes. */
  parts: (Buffer | number)[];
  /** Complete responses after which the exchange ends (after `graceMs` more for stray extra answers). */
  expectResponses?: number;
  /** Methods of the requests sent, in order: a HEAD answer carries no body. */
  methods?: string[];
  /** Extra wait after the expected responses, to catch answers nobody asked for. */
  graceMs?: number;
  timeoutMs?: number;
}

/** Builds one request with Content-Length (unless the headers already frame the body). */
export function buildRequest(method: string, target: string | Buffer, headers: [string, string | Buffer][], body?: Buffer, version = 'HTTP/1.1'): Buffer {
  const framed = headers.some(([k]) => /^(content-length|transfer-encoding)$/i.test(k));
  const lines: Buffer[] = [Buffer.concat([Buffer.from(`${method} `), Buffer.isBuffer(target) ? target : Buffer.from(target, 'latin1'), Buffer.from(` ${version}\r\n`)])];
  for (const [k, v] of headers) lines.push(Buffer.concat([Buffer.from(`${k}: `), Buffer.isBuffer(v) ? v : Buffer.from(v, 'latin1'), Buffer.from('\r\n')]));
  if (body !== undefined && !framed) lines.push(Buffer.from(`Content-Length: ${body.length}\r\n`));
  lines.push(Buffer.from('\r\n'));
  if (body !== undefined) lines.push(body);
  return Buffer.concat(lines);
}

/** Parses one response at the start of `buf`; undefined until it is complete. */
function parseOne(buf: Buffer, head: boolean, closed: boolean): { response: RawResponse; used: number } | undefined {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const m = /^HTTP\/\d\.\d (\d{3})/.exec(lines[0]);
  if (!m) throw new Error(`not an HTTP response: ${JSON.stringify(lines[0].slice(0, 80))}`);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const i = line.indexOf(':');
    if (i <= 0) continue;
    const k = line.slice(0, i).trim().toLowerCase();
    const v = line.slice(i + 1).trim();
    headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`;
  }
  const status = Number(m[1]);
  let at = end + 4;
  const bodiless = head || status === 204 || status === 304 || (status >= 100 && status < 200);
  if (bodiless) return { response: { status, headers, body: Buffer.alloc(0) }, used: at };
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
    const parts: Buffer[] = [];
    for (;;) {
      const lineEnd = buf.indexOf('\r\n', at);
      if (lineEnd < 0) return undefined;
      const size = parseInt(buf.subarray(at, lineEnd).toString('latin1'), 16);
      if (!Number.isFinite(size)) throw new Error('bad chunk size in response');
      if (size === 0) {
        const trailerEnd = buf.indexOf('\r\n\r\n', lineEnd);
        const plainEnd = buf.subarray(lineEnd, lineEnd + 4).toString('latin1') === '\r\n\r\n' ? lineEnd + 4 : -1;
        const used = plainEnd > 0 ? plainEnd : trailerEnd > 0 ? trailerEnd + 4 : -1;
        if (used < 0) return undefined;
        return { response: { status, headers, body: Buffer.concat(parts) }, used };
      }
      if (buf.length < lineEnd + 2 + size + 2) return undefined;
      parts.push(buf.subarray(lineEnd + 2, lineEnd + 2 + size));
      at = lineEnd + 2 + size + 2;
    }
  }
  if (headers['content-length'] !== undefined) {
    const len = Number(headers['content-length']);
    if (buf.length < at + len) return undefined;
    return { response: { status, headers, body: buf.subarray(at, at + len) }, used: at + len };
  }
  // Neither length nor chunks: the body runs to the close.
  if (!closed) return undefined;
  return { response: { status, headers, body: buf.subarray(at) }, used: buf.length };
}

export function rawExchange(host: string, port: number, opts: RawOptions): Promise<RawResult> {
  const expect = opts.expectResponses ?? 1;
  const graceMs = opts.graceMs ?? 0;
  const timeoutMs = opts.timeoutMs ?? 30_000;
  return new Promise((resolve) => {
    const started = performance.now();
    let firstDone: number | undefined;
    let buf = Buffer.alloc(0);
    const responses: RawResponse[] = [];
    let closedByServer = false;
    let error: string | undefined;
    let timedOut = false;
    let settled = false;
    let graceTimer: NodeJS.Timeout | undefined;
    const sock = net.connect({ host, port });
    sock.setNoDelay(true);
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(graceTimer);
      sock.destroy();
      resolve({ responses, ms: (firstDone ?? performance.now()) - started, closedByServer, error, timedOut });
    };
    const timer = setTimeout(() => {
      timedOut = true;
      finish();
    }, timeoutMs);
    const drain = (closed: boolean) => {
      try {
        for (;;) {
          const method = opts.methods?.[responses.length] ?? 'GET';
          const one = parseOne(buf, method === 'HEAD', closed);
          if (!one) break;
          responses.push(one.response);
          firstDone ??= performance.now();
          buf = buf.subarray(one.used);
          if (buf.length === 0 && closed) break;
        }
      } catch (err) {
        error = `unparseable answer: ${(err as Error).message}`;
        finish();
        return;
      }
      if (responses.length >= expect && !graceTimer) {
        if (graceMs === 0) finish();
        else graceTimer = setTimeout(finish, graceMs);
      }
    };
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      drain(false);
    });
    sock.on('end', () => {
      closedByServer = true;
      drain(true);
      finish();
    });
    sock.on('close', () => {
      closedByServer ||= !settled;
      finish();
    });
    sock.on('error', (err) => {
      error = (err as NodeJS.ErrnoException).code ?? err.message;
      finish();
    });
    sock.once('connect', async () => {
      for (const part of opts.parts) {
        if (settled) return;
        if (typeof part === 'number') await new Promise((r) => setTimeout(r, part));
        else if (!sock.destroyed) sock.write(part);
      }
    });
  });
}

/** multipart/form-data built byte by byte, so that fields can carry any bytes and parts can be malformed on purpose. */
export function multipart(parts: { name: string | Buffer; value: Buffer | string; filename?: string; type?: string }[], boundary = 'fuzzBoundary7MA4YWxkTrZu0gW'): { body: Buffer; contentType: string } {
  const out: Buffer[] = [];
  for (const p of parts) {
    out.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="`));
    out.push(Buffer.isBuffer(p.name) ? p.name : Buffer.from(p.name, 'utf8'));
    out.push(Buffer.from(`"${p.filename !== undefined ? `; filename="${p.filename}"` : ''}\r\n`));
    if (p.type) out.push(Buffer.from(`Content-Type: ${p.type}\r\n`));
    out.push(Buffer.from('\r\n'));
    out.push(Buffer.isBuffer(p.value) ? p.value : Buffer.from(p.value, 'utf8'));
    out.push(Buffer.from('\r\n'));
  }
  out.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(out), contentType: `multipart/form-data; boundary=${boundary}` };
}
