/**
 * Admission: what a request must pass, and what it holds while it runs. A token's principal
 * checked against the route's scope and within its fair share; a slot of the route's lane
 * (light or engine); the body's bytes within the body limit and reserved from the memory
 * budget that all requests share. Whatever is refused is refused at once, never queued.
 */
import { allows, authenticate, forbidden, type Principal, type TokenVerifier } from '../auth.js';
import { DomainError, unavailable } from '../errors.js';
import { createBodyParser, type BodyLimits } from './body.js';
import { HttpError } from './errors.js';
import { RETRY_AFTER_S, type Exchange } from './exchange.js';
import type { FairShare } from './fair-share.js';
import { declaredLength } from './framing.js';
import { ActivityTracker, ConcurrencyLimiter, MemoryBudget } from './limiter.js';
import type { RawParams } from './params.js';
import { neededAccess, type AnyRoute, type RouteRegistry, type ServerState } from './registry.js';
import { Router } from './router.js';

/** The server's limits, as the settings give them (config/service-settings.ts). */
export interface ServerLimits extends BodyLimits {
  /** Requests in progress on limited light routes. */
  maxInflight: number;
  /** Requests in progress on engine routes (photo in, models run). */
  maxEngineInflight: number;
  /** Request body bytes held at once, all requests together. */
  maxBodyMemory: number;
  /** A request not answered within this many ms gets 503 and its signal aborts. */
  requestTimeoutMs: number;
}

/** What every request's handling shares: the admission limits and the server's state. */
export interface Gates {
  limits: ServerLimits;
  verifier: TokenVerifier;
  fairShare?: FairShare;
  limiter: ConcurrencyLimiter;
  engineLimiter: ConcurrencyLimiter;
  budget: MemoryBudget;
  activity: ActivityTracker;
  state: ServerState;
  /** Paths some route serves without a token: only there may a 404 or 405 be told to anyone. */
  publicPaths: Router<true>;
}

/** What one request holds while it runs, released when it finishes. */
export interface Held {
  /** Gives back the lane's slot. */
  slot?: () => void;
  reservedBytes: number;
  /** Gives back the token's fair share of photos in flight. */
  share?: () => void;
}

export function openGates({ limits, registry, verifier, fairShare }: { limits: ServerLimits; registry: RouteRegistry; verifier: TokenVerifier; fairShare?: FairShare }): Gates {
  const limiter = new ConcurrencyLimiter(limits.maxInflight);
  const engineLimiter = new ConcurrencyLimiter(limits.maxEngineInflight);
  const budget = new MemoryBudget(limits.maxBodyMemory);
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
  for (const r of registry.routes()) if (!r.auth || r.auth === 'optional') publicPaths.add(r.method, r.path, true);
  return { limits, verifier, fairShare, limiter, engineLimiter, budget, activity: new ActivityTracker(), state, publicPaths };
}

/**
 * Takes a slot of the route's lane for the caller's tenant, or throws what sheds the request:
 * 503 for a full lane, 429 for a tenant holding its share of a lane others use too
 * (limiter.ts). Only after the token is authorized and within its fair share: a request
 * refused for its token never holds a slot another client's request could have had.
 */
export function takeSlot(g: Gates, route: AnyRoute, held: Held, principal: Principal | undefined): void {
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
export function readAdmittedBody(g: Gates, ex: Exchange, route: AnyRoute, headers: Record<string, string>, held: Held): Promise<RawParams> {
  const { limits } = g;
  const declared = declaredLength(headers);
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

/**
 * The token's principal, checked against what `route` needs (403 naming the missing scope) and
 * admitted within its fair share (429); the share it takes goes to `held`.
 */
export async function authorize(g: Gates, route: AnyRoute, header: string | undefined, held: Held): Promise<Principal> {
  const principal = await authenticate(header, g.verifier);
  if (route.auth === 'operator' && !principal.operator) throw forbidden('operator', 'this route is for operator tokens');
  if (route.auth === 'deployment' && !principal.deployment) throw forbidden('deployment', "this route is for the deployment's operator tokens");
  const needed = neededAccess(route);
  if (!allows(principal.access, needed)) throw forbidden(needed, `it is limited to ${principal.access}`);
  if (g.fairShare) held.share = g.fairShare.admit(principal, route.cost === 'engine');
  return principal;
}
