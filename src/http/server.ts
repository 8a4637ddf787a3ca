/**
 * The uWebSockets.js adapter: with exchange.ts (one request's answer), the only module that
 * touches the socket library.
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
 * reach the handler is checked here (framing.ts, admission.ts), and every
 * error this module sends is JSON.
 */
import { randomUUID } from 'node:crypto';
import uWS from 'uWebSockets.js';
import type { Logger } from '../log.js';
import { authenticate, callerOf, type TokenVerifier } from '../auth.js';
import { unavailable } from '../errors.js';
import { authorize, openGates, readAdmittedBody, takeSlot, type Gates, type Held, type ServerLimits } from './admission.js';
import { HttpError, INTERNAL_REASON, toHttpError } from './errors.js';
import { Exchange } from './exchange.js';
import type { FairShare } from './fair-share.js';
import { carriesBody, checkFraming, declaredLength } from './framing.js';
import { assertText, declaredHeaders, foldBrackets, parseParams, queryToParams, rejectUnknownFields, type RawParams } from './params.js';
import { Reply, StreamReply, type AnyRoute, type RouteRegistry, type ServerState } from './registry.js';

export interface HttpServerOptions {
  host: string;
  /** 0 picks a free port, reported back in `HttpServer.port`. */
  port: number;
  registry: RouteRegistry;
  /** Who a token stands for; operator routes need a principal that is an operator. */
  verifier: TokenVerifier;
  /** Each token's requests per second and photos in flight; none when absent. */
  fairShare?: FairShare;
  /** The limits of requests, bodies and deadlines; the settings hold their defaults. */
  limits: ServerLimits;
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

export function listen(opts: HttpServerOptions): Promise<HttpServer> {
  const gates = openGates(opts);
  const app = uWS.App();
  app.any('/*', (res, req) => handle(opts, gates, res, req));
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

/** One request, from uWS's handler: copied, its route found and its body's reading begun before anything awaits, then run (authorized, then given a slot of its lane). */
function handle(opts: HttpServerOptions, g: Gates, res: uWS.HttpResponse, req: uWS.HttpRequest): void {
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
  const ex = new Exchange(res, requestId, opts.limits.maxBodyBytes);
  ex.startDeadline(opts.limits.requestTimeoutMs);
  g.activity.enter();

  const match = opts.registry.router.match(method, url);
  const held: Held = { reservedBytes: 0 };
  const withBody = carriesBody(method, headers);
  if (withBody) ex.watchBody(declaredLength(headers));
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
