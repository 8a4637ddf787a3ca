/**
 * The uWebSockets.js adapter: the only module that touches the socket library.
 *
 * uWS hands a request object that dies when the handler returns and body
 * chunks whose memory it reuses, and it crashes the process on a write to an
 * aborted response. So, per request and before anything awaits: headers, URL
 * and query are copied, `onAborted` is registered, and body streaming starts
 * (chunks are copied as they arrive, with limits checked on the way). Writes
 * made after an await are corked and skipped once the client has gone.
 *
 * What the pinned uWS build does by itself, before any handler runs, and we
 * cannot change (no hook reaches it): it answers 505 with an HTML body to
 * HTTP/1.0 and to a request line that arrives split over two TCP reads; 400
 * (HTML) to a bad Content-Length, or Content-Length together with
 * Transfer-Encoding; it holds a request with a malformed header line (no
 * colon, NUL, obs-fold, more than 98 header fields) unanswered until its idle
 * timeout closes the connection (8-12 s); and it closes the connection when a
 * pipelined request arrives before the previous answer was sent, which is
 * what happens to any route that awaits I/O: uWS does not support async
 * pipelining, so such pipelined requests get no answer. Everything that does
 * reach the handler is checked here, and every error this module sends is
 * JSON.
 */
import { STATUS_CODES } from 'node:http';
import { randomUUID } from 'node:crypto';
import uWS from 'uWebSockets.js';
import type { Logger } from '../log.js';
import { allows, authenticate, callerOf, forbidden, type Principal, type TokenVerifier } from '../auth.js';
import { DomainError, unavailable } from '../errors.js';
import { createBodyParser, type BodyLimits, type BodyParser } from './body.js';
import { HttpError, INTERNAL_REASON, toHttpError } from './errors.js';
import type { FairShare } from './fair-share.js';
import { ActivityTracker, ConcurrencyLimiter, MemoryBudget } from './limiter.js';
import { assertText, declaredHeaders, foldBrackets, parseParams, queryToParams, rejectUnknownFields, type RawParams } from './params.js';
import { neededAccess, Reply, StreamReply, type AnyRoute, type RouteRegistry, type ServerState } from './registry.js';
import { Router } from './router.js';

/** How long a streamed response may wait for a client that has stopped reading. */
const STALLED_STREAM_MS = 30_000;

export interface HttpServerOptions {
  host: string;
  /** 0 picks a free port, reported back in `HttpServer.port`. */
  port: number;
  registry: RouteRegistry;
  /** Who a token stands for; operator routes need a principal that is an operator. */
  verifier: TokenVerifier;
  /** Each token's requests per second and photos in flight; none when absent. */
  fairShare?: FairShare;
  limits: BodyLimits & {
    /** Requests in progress on limited light routes. */
    maxInflight: number;
    /** Requests in progress on engine routes (photo in, models run); default: maxInflight. */
    maxEngineInflight?: number;
    /** Request body bytes held at once, all requests together; default 512 MiB. */
    maxBodyMemory?: number;
    /** A request not answered within this many ms gets 503 and its signal aborts; default 30 s. */
    requestTimeoutMs?: number;
  };
  shutdownTimeoutMs: number;
  log: Logger;
  /** Hears every finished request (metrics); must not throw. */
  observer?: (sample: FinishedRequest) => void;
  /**
   * Turns a failure of a layer below into its domain error (a lost database into a retryable
   * 503), or returns undefined for anything else; such a failure is logged as a warning.
   */
  translateError?: (err: unknown) => Error | undefined;
}

/** A request as it ended, for metrics. */
export interface FinishedRequest {
  method: string;
  /** The matched route's pattern, or `-`: never the raw URL, so label values stay few. */
  route: string;
  /** 499 when the client went away before the answer. */
  status: number;
  seconds: number;
  /** The error id sent with an error answer. */
  code?: string;
}

export interface HttpServer {
  readonly port: number;
  readonly state: ServerState;
  /** Stops accepting, lets requests in progress finish (up to the shutdown timeout), then drops the connections. */
  close(): Promise<void>;
}

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

const DEFAULT_BODY_MEMORY = 512 * 1024 * 1024;
const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

/** Seconds a client shed for load should wait before retrying. */
const RETRY_AFTER_S = 1;
/**
 * Bounds on the rest of a refused request's body that is read and dropped so the client can
 * read the answer (Exchange.send, Exchange.linger): up to twice the body limit (a client
 * sending just over it still reads its 413), and for chunked bodies within this time;
 * otherwise the connection is cut.
 */
const LINGER_BYTES_PER_BODY_LIMIT = 2;
const LINGER_MS = 10_000;

const malformed = (reason: string) => new HttpError(400, 'MALFORMED_REQUEST', reason);

/**
 * Refuses message framing that two parsers could read differently (request
 * smuggling behind a proxy): uWS frames the body by the first Content-Length
 * it sees and treats any Transfer-Encoding as chunked, while a proxy in front
 * may pick the last value or honour a coding we ignore. So: at most one
 * Content-Length, at most one Transfer-Encoding whose value is exactly
 * `chunked`, never both.
 */
export function checkFraming(all: Array<[string, string]>): HttpError | undefined {
  const lengths = all.filter(([k]) => k === 'content-length').map(([, v]) => v);
  const codings = all.filter(([k]) => k === 'transfer-encoding').map(([, v]) => v);
  if (lengths.length > 1) return malformed('Repeated Content-Length header');
  if (codings.length > 1) return malformed('Repeated Transfer-Encoding header');
  if (lengths.length === 1 && codings.length === 1) return malformed('Both Content-Length and Transfer-Encoding');
  if (lengths.length === 1 && !/^[0-9]{1,15}$/.test(lengths[0].trim())) return malformed('Content-Length must be decimal digits');
  if (codings.length === 1 && codings[0].trim().toLowerCase() !== 'chunked') {
    return malformed('Transfer-Encoding must be exactly "chunked"');
  }
  return undefined;
}

function statusLine(status: number): string {
  return `${status} ${STATUS_CODES[status] ?? 'Unknown'}`;
}

/** One request/response pair and the guards that keep writes to it safe. */
class Exchange {
  aborted = false;
  responded = false;
  /** True while body bytes may still arrive: an answer sent then waits for them (see `linger`). */
  bodyPending = false;
  /** Where body chunks go: the parser, or nowhere once the request has been refused. */
  private sink?: (chunk: ArrayBuffer, isLast: boolean) => void;
  private watchingBody = false;
  private declaredBytes?: number;
  status = 0;
  /** The error id of the error answer sent, if one was. */
  errorId?: string;
  /** Made on first use: most requests finish without anyone asking for their signal. */
  private abortController?: AbortController;
  private abortReason?: unknown;
  /** True when a streamed body failed after its status was sent and the connection was cut. */
  truncated = false;
  /** The matched route's own headers, sent with every answer; the answer's headers win. */
  routeHeaders?: () => Record<string, string>;
  private deadline?: NodeJS.Timeout;

  constructor(
    private readonly res: uWS.HttpResponse,
    readonly requestId: string,
    /** Most body bytes read and dropped after an early answer before the connection is cut instead. */
    private readonly lingerBytes: number,
  ) {
    res.onAborted(() => {
      this.aborted = true;
      this.clearDeadline();
      this.abort(new HttpError(499, 'CLIENT_CLOSED', 'Client closed the request'));
    });
  }

  /**
   * Answers 503 DEADLINE_EXCEEDED if nothing was sent within `ms`, and aborts
   * the request's signal so work queued for it (engine, database) is dropped.
   * 503 rather than 504: there is no upstream, the service is behind, and
   * Retry-After tells the client when to come back.
   */
  startDeadline(ms: number): void {
    this.deadline = setTimeout(() => {
      if (!this.open) return;
      const err = new HttpError(503, 'DEADLINE_EXCEEDED', `No answer within ${ms} ms`, {
        headers: { 'Retry-After': String(RETRY_AFTER_S) },
      });
      this.sendError(err);
      this.abort(err);
    }, ms);
    this.deadline.unref();
  }

  clearDeadline(): void {
    clearTimeout(this.deadline);
  }

  /** The request's signal: aborted when the client goes away or the deadline passes. */
  get signal(): AbortSignal {
    if (!this.abortController) {
      this.abortController = new AbortController();
      if (this.abortReason !== undefined) this.abortController.abort(this.abortReason);
    }
    return this.abortController.signal;
  }

  private abort(reason: unknown): void {
    if (this.abortReason !== undefined) return;
    this.abortReason = reason;
    this.abortController?.abort(reason);
  }

  get open(): boolean {
    return !this.aborted && !this.responded;
  }

  /**
   * Writes a full response; `closeConnection` for answers after which nothing on the
   * connection can be trusted. An answer given while the body is still arriving leaves the
   * rest of the body to be read and dropped, so the client reads the answer rather than a
   * reset: by uWS after the answer for a declared length, by `linger` before it for a
   * chunked body.
   */
  send(status: number, body: string | Buffer | undefined, contentType: string | undefined, headers: Record<string, string>, closeConnection = false): void {
    if (!this.open) return;
    this.responded = true;
    this.clearDeadline();
    this.status = status;
    if (this.bodyPending && !closeConnection) {
      if (this.declaredBytes === undefined) {
        this.linger((complete) => this.write(status, body, contentType, headers, !complete));
        return;
      }
      // uWS reads and drops the rest of a body of declared length itself once the answer is
      // out, and keeps the connection: the client reads the answer at once, and a sender that
      // stalls is closed by the idle timeout. Only a declared length past the bound is cut.
      closeConnection = this.declaredBytes > this.lingerBytes;
    }
    this.write(status, body, contentType, headers, closeConnection);
  }

  private write(status: number, body: string | Buffer | undefined, contentType: string | undefined, headers: Record<string, string>, closeConnection: boolean): void {
    if (this.aborted) return;
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status));
      this.res.writeHeader('X-Request-Id', this.requestId);
      if (contentType) this.res.writeHeader('Content-Type', contentType);
      for (const [k, v] of Object.entries({ ...this.routeHeaders?.(), ...headers })) this.res.writeHeader(k, v);
      if (body === undefined) this.res.endWithoutBody(0, closeConnection);
      else this.res.end(body, closeConnection);
    });
  }

  /**
   * Writes a chunked response from `chunks`, waiting for the socket to drain
   * between them. The status goes out with the first chunk, so a producer
   * that fails before yielding anything still gets a proper error answer
   * (the error is thrown to the caller). One that fails later cannot: the
   * failure is logged with its cause and the connection is cut, so the body
   * ends without chunked encoding's terminating chunk and no client can take
   * the partial answer for a complete one.
   */
  async sendStream(
    status: number,
    contentType: string | undefined,
    headers: Record<string, string>,
    chunks: AsyncIterable<string | Buffer>,
    log: Logger,
  ): Promise<void> {
    const it = chunks[Symbol.asyncIterator]();
    if (!this.open) {
      // Gone before the answer began: the producer is started and closed all the same, so that
      // what it already holds (a listing's cursor, opened with its first batch) is released.
      await it.next().then(
        () => it.return?.(),
        () => {},
      );
      return;
    }
    const res = this.res;
    let finished = false;
    let first: IteratorResult<string | Buffer>;
    try {
      first = await it.next();
    } catch (err) {
      finished = true; // the iterator threw, so it is already closed
      throw err;
    }
    if (!this.open) {
      if (!first.done) await it.return?.();
      return;
    }
    this.responded = true;
    this.clearDeadline();
    this.status = status;
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
    this.signal.addEventListener('abort', woken, { once: true });
    res.cork(() => {
      res.writeStatus(statusLine(status));
      res.writeHeader('X-Request-Id', this.requestId);
      if (contentType) res.writeHeader('Content-Type', contentType);
      for (const [k, v] of Object.entries({ ...this.routeHeaders?.(), ...headers })) res.writeHeader(k, v);
    });
    try {
      for (let next = first; ; next = await it.next()) {
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
      this.truncated = true;
      log.error({ err, status }, 'streamed response failed after its status was sent; connection cut to mark the body incomplete');
      if (!this.aborted) {
        this.aborted = true;
        res.close();
      }
    } finally {
      if (!finished) await it.return?.();
    }
  }

  sendError(err: HttpError, closeConnection = false): void {
    if (this.open) this.errorId = err.error;
    this.send(err.status, JSON.stringify(err.body()), 'application/json', err.headers ?? {}, closeConnection);
  }

  /**
   * Reads the rest of a chunked body and drops it, then calls `answer` with whether the body
   * ended. An answer written while the client is still sending, followed by a close, makes
   * the client's next write fail (EPIPE, a reset), and many clients (Node's fetch among them)
   * report that instead of the answer. A chunked body has no length for uWS to skip, so it is
   * drained here first, within LINGER_MS and `lingerBytes`; past either bound the answer goes
   * out at once and the connection closes. When the body ended, the connection stays usable.
   */
  private linger(answer: (complete: boolean) => void): void {
    let dropped = 0;
    let done = false;
    const finish = (complete: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      answer(complete);
    };
    const timer = setTimeout(() => finish(false), LINGER_MS);
    // Called inside uWS's data callback at the body's end, so the answer is written before
    // uWS parses a request pipelined behind it.
    this.sink = (chunk, isLast) => {
      dropped += chunk.byteLength;
      if (isLast) finish(true);
      else if (dropped > this.lingerBytes) finish(false);
    };
    this.watchBody();
    if (!this.bodyPending) finish(true);
  }

  /**
   * Starts taking body chunks (uWS requires onData before the handler returns); they go to
   * `sink`. `declared` is the Content-Length, when there is one.
   */
  watchBody(declared?: number): void {
    if (this.watchingBody) return;
    this.watchingBody = true;
    this.declaredBytes = declared;
    this.bodyPending = true;
    this.res.onData((chunk, isLast) => {
      if (isLast) this.bodyPending = false;
      this.sink?.(chunk, isLast);
    });
  }

  /**
   * Starts streaming the body into `parser` now. A limit breach is answered as soon as the
   * rest of the body has been drained (`linger`).
   */
  readBody(parser: BodyParser, admit: (bytes: number) => void): Promise<RawParams> {
    return new Promise<RawParams>((resolve, reject) => {
      const signal = this.signal;
      signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      this.sink = (chunk, isLast) => {
        if (!this.open) return;
        try {
          admit(chunk.byteLength);
          // uWS reuses the chunk's memory after this callback returns.
          if (chunk.byteLength > 0) parser.write(Buffer.from(chunk.slice(0)));
        } catch (err) {
          const { error } = toHttpError(err);
          this.sendError(error);
          reject(error);
          return;
        }
        if (isLast) parser.end().then(resolve, reject);
      };
      this.watchBody();
    });
  }
}

/** What every request's handling shares: the options, the admission limits and the server's state. */
interface Gates {
  opts: HttpServerOptions;
  limiter: ConcurrencyLimiter;
  engineLimiter: ConcurrencyLimiter;
  budget: MemoryBudget;
  requestTimeoutMs: number;
  activity: ActivityTracker;
  state: ServerState;
  /** Paths some route serves without a token: only there may a 404 or 405 be told to anyone. */
  publicPaths: Router<true>;
}

/** What one request holds while it runs, released when it finishes. */
interface Held {
  /** Gives back the lane's slot. */
  slot?: () => void;
  reservedBytes: number;
  /** Gives back the token's fair share of photos in flight. */
  share?: () => void;
}

export function listen(opts: HttpServerOptions): Promise<HttpServer> {
  const gates = openGates(opts);
  const app = uWS.App();
  app.any('/*', (res, req) => handle(gates, res, req));
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
        state: gates.state,
        close() {
          closing ??= (async () => {
            gates.state.draining = true;
            uWS.us_listen_socket_close(socket);
            const drained = await gates.activity.idle(opts.shutdownTimeoutMs);
            if (!drained) opts.log.warn({ inflight: gates.activity.count }, 'shutdown timeout: dropping requests in progress');
            app.close();
          })();
          return closing;
        },
      });
    });
  });
}

function openGates(opts: HttpServerOptions): Gates {
  const limiter = new ConcurrencyLimiter(opts.limits.maxInflight);
  const engineLimiter = new ConcurrencyLimiter(opts.limits.maxEngineInflight ?? opts.limits.maxInflight);
  const budget = new MemoryBudget(opts.limits.maxBodyMemory ?? DEFAULT_BODY_MEMORY);
  const state: ServerState = {
    get inflight() {
      return limiter.inflight;
    },
    maxInflight: limiter.max,
    get engineInflight() {
      return engineLimiter.inflight;
    },
    maxEngineInflight: engineLimiter.max,
    get bodyBytes() {
      return budget.reserved;
    },
    maxBodyBytes: budget.max,
    draining: false,
  };
  const publicPaths = new Router<true>();
  for (const r of opts.registry.routes()) if (!r.auth || r.auth === 'optional') publicPaths.add(r.method, r.path, true);
  const requestTimeoutMs = opts.limits.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  return { opts, limiter, engineLimiter, budget, requestTimeoutMs, activity: new ActivityTracker(), state, publicPaths };
}

/** One request, from uWS's handler: copied, its route found and its body's reading begun before anything awaits, then run (authorized, then given a slot of its lane). */
function handle(g: Gates, res: uWS.HttpResponse, req: uWS.HttpRequest): void {
  const { opts } = g;
  const started = performance.now();
  const method = req.getMethod().toUpperCase();
  const url = req.getUrl();
  const query = req.getQuery() ?? '';
  // The first of a repeated header wins, as in uWS's own getHeader (which frames the body).
  const headers: Record<string, string> = {};
  const all: Array<[string, string]> = [];
  req.forEach((k, v) => {
    all.push([k, v]);
    if (!Object.hasOwn(headers, k)) headers[k] = v;
  });
  const requestId = /^[\w.:-]{1,64}$/.test(headers['x-request-id'] ?? '') ? headers['x-request-id'] : randomUUID();
  const ex = new Exchange(res, requestId, LINGER_BYTES_PER_BODY_LIMIT * opts.limits.maxBodyBytes);
  ex.startDeadline(g.requestTimeoutMs);
  g.activity.enter();

  const match = opts.registry.router.match(method, url);
  const held: Held = { reservedBytes: 0 };
  const withBody = BODY_METHODS.has(method) && hasBody(headers);
  if (withBody) ex.watchBody(headers['content-length'] !== undefined ? Number(headers['content-length']) : undefined);
  const finish = (pattern: string) => {
    ex.clearDeadline();
    held.slot?.();
    held.share?.();
    g.budget.release(held.reservedBytes);
    held.reservedBytes = 0;
    g.activity.leave();
    logFinished(opts, ex, { requestId, method, pattern, ms: performance.now() - started });
  };
  // A child logger costs a few microseconds; most requests never log, so it is made on first use.
  let child: Logger | undefined;
  const ctxLog = () => (child ??= opts.log.child({ reqId: requestId }));
  const fail = (failure: unknown, pattern: string) => {
    const translated = opts.translateError?.(failure);
    if (translated) ctxLog().warn({ err: failure, route: pattern }, translated.message);
    const err = translated ?? failure;
    const { error, internal } = toHttpError(err);
    if (internal && !ex.aborted) ctxLog().error({ err: error.cause ?? err, route: pattern }, INTERNAL_REASON);
    ex.sendError(error);
  };

  let route: AnyRoute | undefined;
  let bodyPromise: Promise<RawParams> = Promise.resolve({});
  try {
    const framing = checkFraming(all);
    // The body's extent is in doubt, so nothing after it on this connection can be trusted.
    if (framing) {
      ex.sendError(framing, true);
      finish('-');
      return;
    }
    if (match.kind !== 'found') {
      const refusal =
        match.kind === 'not-found'
          ? new HttpError(404, 'NOT_FOUND', `No route for ${method} ${url}`)
          : new HttpError(405, 'METHOD_NOT_ALLOWED', `${method} is not allowed on ${url}`, { headers: { Allow: match.allow.join(', ') } });
      if (g.publicPaths.match(method, url).kind !== 'not-found') throw refusal;
      // Elsewhere a client without a valid token learns nothing about which routes exist.
      authenticate(headers.authorization, opts.verifier)
        .then(() => {
          throw refusal;
        })
        .catch((err) => fail(err, '-'))
        .finally(() => finish('-'));
      return;
    }
    route = match.value;
    ex.routeHeaders = route.headers;
    // After the route is known, so a route's own headers (X-Live-Servers) ride on this 503 too.
    if (g.state.draining) throw unavailable('Server is shutting down');
    if (withBody) bodyPromise = readAdmittedBody(g, ex, route, headers, held);
  } catch (err) {
    // A body still arriving is drained before the answer goes out (Exchange.linger), so the
    // client reads the refusal instead of a reset, and a client shed for load can honour
    // Retry-After on the same connection.
    ex.sendError(toHttpError(err).error);
    finish(route?.path ?? '-');
    return;
  }

  const chosen = route;
  run(g, { route: chosen, method, rawParams: match.params, malformed: match.malformed, headers, query, bodyPromise, ex, ctxLog, held })
    .catch((err) => fail(err, chosen.path))
    .finally(() => finish(chosen.path));
}

/**
 * Takes a slot of the route's lane for the caller's tenant, or throws what sheds the request:
 * 503 for a full lane, 429 for a tenant holding its share of a lane others use too
 * (limiter.ts). Only after the token is authorized and within its fair share: a request
 * refused for its token never holds a slot another client's request could have had.
 */
function takeSlot(g: Gates, route: AnyRoute, held: Held, principal: Principal | undefined): void {
  if (route.limited === false) return;
  const pool = route.cost === 'engine' ? g.engineLimiter : g.limiter;
  const what = `${route.cost === 'engine' ? 'photo ' : ''}requests`;
  const slot = pool.tryAcquire(principal?.tenant);
  if (slot === 'full') throw unavailable(`Too many ${what} in progress (limit ${pool.max})`, RETRY_AFTER_S);
  if (slot === 'over-share') {
    throw new DomainError('RATE_LIMITED', `This tenant holds its share of the ${what} in progress while other tenants wait (limit ${pool.max})`, { retryAfterS: RETRY_AFTER_S });
  }
  held.slot = slot;
}

/**
 * Starts reading the body within the limits: a declared length over the cap is refused, and
 * the bytes are reserved from the memory budget, a declared length whole at admission, a
 * chunked body as it arrives (what was reserved goes to `held`).
 */
function readAdmittedBody(g: Gates, ex: Exchange, route: AnyRoute, headers: Record<string, string>, held: Held): Promise<RawParams> {
  const { limits } = g.opts;
  const declared = headers['content-length'] !== undefined ? Number(headers['content-length']) : undefined;
  if (declared !== undefined && declared > limits.maxBodyBytes) {
    throw new HttpError(413, 'PAYLOAD_TOO_LARGE', `Request body exceeds ${limits.maxBodyBytes} bytes`);
  }
  const overBudget = () => unavailable('Too much request data in progress; retry shortly', RETRY_AFTER_S);
  if (declared !== undefined) {
    if (!g.budget.tryReserve(declared)) throw overBudget();
    held.reservedBytes = declared;
  }
  const admitBytes = (bytes: number) => {
    if (declared !== undefined) return;
    if (!g.budget.tryReserve(bytes)) throw overBudget();
    held.reservedBytes += bytes;
  };
  const body = ex.readBody(createBodyParser(headers['content-type'], limits, route.binaryBody), admitBytes);
  // Failures are answered where they happen; this keeps an early one from being "unhandled".
  body.catch(() => {});
  return body;
}

/** The request's log line and the observer's record. */
function logFinished(opts: HttpServerOptions, ex: Exchange, r: { requestId: string; method: string; pattern: string; ms: number }): void {
  const status = ex.aborted && !ex.truncated ? 499 : ex.status;
  const line = {
    reqId: r.requestId,
    method: r.method,
    route: r.pattern,
    status,
    ...(ex.errorId ? { error: ex.errorId } : {}),
    ms: Math.round(r.ms * 10) / 10,
    ...(ex.truncated ? { truncated: true } : {}),
  };
  // Refusals at info, so an operator sees why clients fail without turning on debug; the
  // line holds the route pattern and error code only, never a body, a query or a header.
  if (ex.status >= 500 || ex.truncated) opts.log.warn(line, 'request failed');
  else if (ex.status >= 400) opts.log.info(line, 'request refused');
  else opts.log.debug(line, 'request');
  opts.observer?.({ method: r.method, route: r.pattern, status, seconds: r.ms / 1000, code: ex.errorId });
}

/** An admitted request as `run` takes it. */
interface Admitted {
  route: AnyRoute;
  method: string;
  rawParams: Record<string, string>;
  malformed: string[];
  headers: Record<string, string>;
  query: string;
  bodyPromise: Promise<RawParams>;
  ex: Exchange;
  ctxLog: () => Logger;
  held: Held;
}

/**
 * The token's principal, checked against what `route` needs (403 naming the missing scope) and
 * admitted within its fair share (429); the share it takes goes to `held`.
 */
async function authorize(g: Gates, route: AnyRoute, header: string | undefined, held: Held): Promise<Principal> {
  const principal = await authenticate(header, g.opts.verifier);
  if (route.auth === 'operator' && !principal.operator) throw forbidden('operator', 'this route is for operator tokens');
  if (route.auth === 'deployment' && !principal.deployment) throw forbidden('deployment', "this route is for the deployment's operator tokens");
  const needed = neededAccess(route);
  if (!allows(principal.access, needed)) throw forbidden(needed, `it is limited to ${principal.access}`);
  if (g.opts.fairShare) held.share = g.opts.fairShare.admit(principal, route.cost === 'engine');
  return principal;
}

/** Authenticates, parses every input against the route's schemas, calls the handler and sends what it returns. */
async function run(g: Gates, a: Admitted): Promise<void> {
  const { route, headers, ex } = a;
  // A route that takes a token optionally reads one only when it is sent.
  const authorized = route.auth === 'optional' ? headers.authorization !== undefined : Boolean(route.auth);
  const principal = authorized ? await authorize(g, route, headers.authorization, a.held) : undefined;
  takeSlot(g, route, a.held, principal);
  if (a.malformed.length) throw new HttpError(400, 'BAD_PARAM', `${a.malformed[0]}: malformed percent-encoding`, { param: a.malformed[0] });
  assertText(a.rawParams);
  const params = route.params ? parseParams(route.params, a.rawParams) : a.rawParams;
  const headerInput = route.requestHeaders ? parseParams(route.requestHeaders, declaredHeaders(route.requestHeaders, headers)) : {};
  let input: unknown = {};
  if (route.request) {
    // Body parameters win over query parameters of the same name.
    const raw = { ...queryToParams(a.query), ...(await a.bodyPromise) };
    assertText(raw);
    rejectUnknownFields(route.request, raw);
    input = parseParams(route.request, foldBrackets(raw));
    // Strict input (docs/api.md): a PUT that carries no parameter at all is refused on every route. What an
    // update must change is the service's to say (services/face-changes.ts).
    if (a.method === 'PUT' && Object.keys(raw).length === 0) {
      throw new HttpError(400, 'BAD_PARAM', 'An update needs at least one field to change');
    }
  } else {
    rejectUnknownFields(undefined, { ...queryToParams(a.query), ...(await a.bodyPromise) });
  }
  if (!ex.open) return;
  const result = await route.handler({
    input,
    params,
    headers,
    headerInput,
    caller: authorized ? callerOf(headers.authorization) : undefined,
    principal,
    get signal() {
      return ex.signal;
    },
    get log() {
      return a.ctxLog();
    },
    server: g.state,
  });
  if (result instanceof StreamReply) {
    await ex.sendStream(result.status, result.contentType, result.headers, result.chunks, a.ctxLog());
  } else if (result instanceof Reply) {
    ex.send(result.status, result.body, result.contentType, result.headers);
  } else if (route.response.status === 204 || result === undefined) {
    ex.send(route.response.status, undefined, undefined, {});
  } else {
    ex.send(route.response.status, JSON.stringify(result), 'application/json', {});
  }
}

function hasBody(headers: Record<string, string>): boolean {
  const len = headers['content-length'];
  if (len !== undefined) return Number(len) > 0;
  return headers['transfer-encoding'] !== undefined;
}
