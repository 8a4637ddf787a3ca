/**
 * The uWebSockets.js adapter: the only module that touches the socket library.
 *
 * uWS hands a request object that dies when the handler returns and body
 * chunks whose memory it reuses, and it crashes the process on a write to an
 * aborted response. So, per request and before anything awaits: headers, URL
 * and query are copied, `onAborted` is registered, and body streaming starts
 * (chunks are copied as they arrive, with limits checked on the way). Writes
 * made after an await are corked and skipped once the client has gone.
 */
import { STATUS_CODES } from 'node:http';
import { randomUUID } from 'node:crypto';
import uWS from 'uWebSockets.js';
import type { Logger } from '../log.js';
import { authenticate, type TokenVerifier } from '../auth.js';
import { createBodyParser, type BodyLimits, type BodyParser } from './body.js';
import { HttpError, INTERNAL_REASON, toHttpError, unavailable } from './errors.js';
import { ActivityTracker, ConcurrencyLimiter } from './limiter.js';
import { parseParams, queryToParams, type RawParams } from './params.js';
import { Reply, StreamReply, type AnyRoute, type RouteRegistry, type ServerState } from './registry.js';

/** How long a streamed response may wait for a client that has stopped reading. */
const STALLED_STREAM_MS = 30_000;

export interface HttpServerOptions {
  host: string;
  /** 0 picks a free port, reported back in `HttpServer.port`. */
  port: number;
  registry: RouteRegistry;
  verifier: TokenVerifier;
  /** Accepts the operator's token only, for `auth: 'operator'` routes. */
  operatorVerifier: TokenVerifier;
  limits: BodyLimits & { maxInflight: number };
  shutdownTimeoutMs: number;
  log: Logger;
}

export interface HttpServer {
  readonly port: number;
  readonly state: ServerState;
  /** Stops accepting, lets requests in progress finish (up to the shutdown timeout), then drops the connections. */
  close(): Promise<void>;
}

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

function statusLine(status: number): string {
  return `${status} ${STATUS_CODES[status] ?? 'Unknown'}`;
}

/** One request/response pair and the guards that keep writes to it safe. */
class Exchange {
  aborted = false;
  responded = false;
  /** True while body bytes may still arrive: an answer sent then closes the connection, as its framing is lost. */
  bodyPending = false;
  status = 0;
  readonly controller = new AbortController();
  /** The matched route's own headers, sent with every answer; the answer's headers win. */
  routeHeaders?: () => Record<string, string>;

  constructor(
    private readonly res: uWS.HttpResponse,
    readonly requestId: string,
  ) {
    res.onAborted(() => {
      this.aborted = true;
      this.controller.abort(new HttpError(499, 'CLIENT_CLOSED', 'Client closed the request'));
    });
  }

  get open(): boolean {
    return !this.aborted && !this.responded;
  }

  /** Writes a full response; `closeConnection` for answers sent before the body was read. */
  send(status: number, body: string | Buffer | undefined, contentType: string | undefined, headers: Record<string, string>, closeConnection = false): void {
    if (!this.open) return;
    this.responded = true;
    closeConnection ||= this.bodyPending;
    this.status = status;
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status));
      this.res.writeHeader('X-Request-Id', this.requestId);
      if (contentType) this.res.writeHeader('Content-Type', contentType);
      for (const [k, v] of Object.entries({ ...this.routeHeaders?.(), ...headers })) this.res.writeHeader(k, v);
      if (body === undefined) this.res.endWithoutBody(0, closeConnection);
      else this.res.end(body, closeConnection);
    });
  }

  /** Writes a chunked response from `chunks`, waiting for the socket to drain between them. */
  async sendStream(status: number, contentType: string | undefined, headers: Record<string, string>, chunks: AsyncIterable<string | Buffer>): Promise<void> {
    if (!this.open) return;
    this.responded = true;
    this.status = status;
    const res = this.res;
    let wake: (() => void) | undefined;
    const woken = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    res.onWritable(() => {
      woken();
      return true;
    });
    this.controller.signal.addEventListener('abort', woken, { once: true });
    res.cork(() => {
      res.writeStatus(statusLine(status));
      res.writeHeader('X-Request-Id', this.requestId);
      if (contentType) res.writeHeader('Content-Type', contentType);
      for (const [k, v] of Object.entries({ ...this.routeHeaders?.(), ...headers })) res.writeHeader(k, v);
    });
    const it = chunks[Symbol.asyncIterator]();
    let finished = false;
    try {
      for (;;) {
        const next = await it.next();
        if (next.done) {
          finished = true;
          break;
        }
        if (this.aborted) break;
        let drained = true;
        res.cork(() => {
          drained = res.write(next.value);
        });
        // uWS keeps what it could not send yet; wait until it has gone before producing more.
        // A client that stops reading would otherwise hold the producer (a database cursor) for
        // ever, so past STALLED_STREAM_MS without progress the connection is closed.
        if (!drained && !this.aborted) {
          let timer: NodeJS.Timeout | undefined;
          const stalled = await new Promise<boolean>((resolve) => {
            wake = () => resolve(false);
            timer = setTimeout(() => resolve(true), STALLED_STREAM_MS);
          });
          clearTimeout(timer);
          if (stalled && !this.aborted) {
            this.aborted = true;
            res.close();
          }
        }
        if (this.aborted) break;
      }
      if (!this.aborted) res.cork(() => res.end());
    } catch (err) {
      finished = true; // the iterator threw, so it is already closed
      if (!this.aborted) res.close();
      throw err;
    } finally {
      if (!finished) await it.return?.();
    }
  }

  sendError(err: HttpError, closeConnection = false): void {
    this.send(err.status, JSON.stringify(err.body()), 'application/json', err.headers ?? {}, closeConnection);
  }

  /**
   * Starts streaming the body into `parser` now (uWS requires onData before
   * the handler returns). A limit breach answers at once and closes the
   * connection, as the rest of the body would only be thrown away.
   */
  readBody(res: uWS.HttpResponse, parser: BodyParser): Promise<RawParams> {
    this.bodyPending = true;
    return new Promise<RawParams>((resolve, reject) => {
      let failed = false;
      this.controller.signal.addEventListener('abort', () => reject(this.controller.signal.reason), { once: true });
      res.onData((chunk, isLast) => {
        if (isLast) this.bodyPending = false;
        if (failed || this.aborted) return;
        try {
          // uWS reuses the chunk's memory after this callback returns.
          if (chunk.byteLength > 0) parser.write(Buffer.from(chunk.slice(0)));
        } catch (err) {
          failed = true;
          const { error } = toHttpError(err);
          this.sendError(error, true);
          reject(error);
          return;
        }
        if (isLast) parser.end().then(resolve, reject);
      });
    });
  }
}

export function listen(opts: HttpServerOptions): Promise<HttpServer> {
  const { registry, verifier, operatorVerifier, log } = opts;
  const limiter = new ConcurrencyLimiter(opts.limits.maxInflight);
  const activity = new ActivityTracker();
  const state: ServerState = {
    get inflight() {
      return limiter.inflight;
    },
    maxInflight: limiter.max,
    draining: false,
  };
  const app = uWS.App();

  app.any('/*', (res, req) => {
    const started = performance.now();
    const method = req.getMethod().toUpperCase();
    const url = req.getUrl();
    const query = req.getQuery() ?? '';
    const headers: Record<string, string> = {};
    req.forEach((k, v) => {
      headers[k] = v;
    });
    const requestId = /^[\w.:-]{1,64}$/.test(headers['x-request-id'] ?? '') ? headers['x-request-id'] : randomUUID();
    const ex = new Exchange(res, requestId);
    activity.enter();

    const match = registry.router.match(method, url);
    let route: AnyRoute | undefined;
    let acquired = false;
    let bodyPromise: Promise<RawParams> = Promise.resolve({});
    const finish = (pattern: string) => {
      if (acquired) limiter.release();
      activity.leave();
      const ms = Math.round((performance.now() - started) * 10) / 10;
      const line = { reqId: requestId, method, route: pattern, status: ex.aborted ? 499 : ex.status, ms };
      if (ex.status >= 500) log.warn(line, 'request failed');
      else log.debug(line, 'request');
    };

    try {
      if (match.kind === 'not-found') throw new HttpError(404, 'NOT_FOUND', `No route for ${method} ${url}`);
      if (match.kind === 'method-not-allowed') {
        throw new HttpError(405, 'METHOD_NOT_ALLOWED', `${method} is not allowed on ${url}`, {
          headers: { Allow: match.allow.join(', ') },
        });
      }
      route = match.value;
      ex.routeHeaders = route.headers;
      // After the route is known, so a route's own headers (X-Live-Servers) ride on this 503 too.
      if (state.draining) throw unavailable('Server is shutting down');
      if (route.limited !== false) {
        if (!limiter.tryAcquire()) throw unavailable(`Too many requests in progress (limit ${limiter.max})`);
        acquired = true;
      }
      if (BODY_METHODS.has(method) && hasBody(headers)) {
        const declared = Number(headers['content-length']);
        if (declared > opts.limits.maxBodyBytes) {
          throw new HttpError(413, 'PAYLOAD_TOO_LARGE', `Request body exceeds ${opts.limits.maxBodyBytes} bytes`);
        }
        bodyPromise = ex.readBody(res, createBodyParser(headers['content-type'], opts.limits));
        // Failures are answered where they happen; this keeps an early one from being "unhandled".
        bodyPromise.catch(() => {});
      }
    } catch (err) {
      // Nothing of the body was read: closing tells the client not to send the rest.
      ex.sendError(toHttpError(err).error, BODY_METHODS.has(method) && hasBody(headers));
      finish(route?.path ?? '-');
      return;
    }

    const chosen = route;
    const ctxLog = log.child({ reqId: requestId });
    run(chosen, match.params, headers, query, bodyPromise, ex, ctxLog)
      .catch((err) => {
        const { error, internal } = toHttpError(err);
        if (internal && !ex.aborted) ctxLog.error({ err: err instanceof HttpError ? (err.cause ?? err) : err, route: chosen.path }, INTERNAL_REASON);
        ex.sendError(error);
      })
      .finally(() => finish(chosen.path));
  });

  async function run(
    route: AnyRoute,
    rawParams: Record<string, string>,
    headers: Record<string, string>,
    query: string,
    bodyPromise: Promise<RawParams>,
    ex: Exchange,
    ctxLog: Logger,
  ): Promise<void> {
    if (route.auth) await authenticate(headers.authorization, route.auth === 'operator' ? operatorVerifier : verifier);
    const params = route.params ? parseParams(route.params, rawParams) : rawParams;
    let input: unknown = {};
    if (route.request) {
      const fromBody = await bodyPromise;
      // Body parameters win over query parameters of the same name.
      input = parseParams(route.request, { ...queryToParams(query), ...fromBody });
    } else {
      await bodyPromise;
    }
    if (!ex.open) return;
    const result = await route.handler({
      input,
      params,
      headers,
      signal: ex.controller.signal,
      log: ctxLog,
      server: state,
    });
    if (result instanceof StreamReply) {
      await ex.sendStream(result.status, result.contentType, result.headers, result.chunks);
    } else if (result instanceof Reply) {
      ex.send(result.status, result.body, result.contentType, result.headers);
    } else if (route.response.status === 204 || result === undefined) {
      ex.send(route.response.status, undefined, undefined, {});
    } else {
      ex.send(route.response.status, JSON.stringify(result), 'application/json', {});
    }
  }

  return new Promise<HttpServer>((resolve, reject) => {
    app.listen(opts.host, opts.port, (socket) => {
      if (!socket) {
        reject(new Error(`cannot listen on ${opts.host}:${opts.port}`));
        return;
      }
      const port = uWS.us_socket_local_port(socket as unknown as uWS.us_socket);
      let closing: Promise<void> | undefined;
      resolve({
        port,
        state,
        close() {
          closing ??= (async () => {
            state.draining = true;
            uWS.us_listen_socket_close(socket);
            const drained = await activity.idle(opts.shutdownTimeoutMs);
            if (!drained) log.warn({ inflight: activity.count }, 'shutdown timeout: dropping requests in progress');
            app.close();
          })();
          return closing;
        },
      });
    });
  });
}

function hasBody(headers: Record<string, string>): boolean {
  const len = headers['content-length'];
  if (len !== undefined) return Number(len) > 0;
  return headers['transfer-encoding'] !== undefined;
}
