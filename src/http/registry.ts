/**
 * The route registry: the one way to add an endpoint.
 *
 * A route is declared together with its documentation (summary, request and
 * response schemas, error codes, auth), and the server serves only what is
 * registered here while the OpenAPI builder reads the very same list, so an
 * undocumented endpoint cannot exist. `define` checks at start-up what the
 * types cannot: a non-empty summary, path parameters matching the params
 * schema, error codes that exist.
 */
import { toJSONSchema, type z } from 'zod';
import type { Access, Principal } from '../auth.js';
import { DomainError, type ErrorCode } from '../errors.js';
import type { Logger } from '../log.js';
import { ERROR_STATUS, HttpError } from './errors.js';
import { shapeOf } from './params.js';
import { patternParams, Router, type Method } from './router.js';

/** A non-JSON or non-200 answer; handlers return a plain value for the declared JSON response. */
export class Reply {
  constructor(
    readonly status: number,
    readonly body?: string | Buffer,
    readonly contentType?: string,
    readonly headers: Record<string, string> = {},
  ) {}

  static json(value: unknown, status = 200, headers: Record<string, string> = {}): Reply {
    return new Reply(status, JSON.stringify(value), 'application/json', headers);
  }

  static html(text: string, status = 200): Reply {
    return new Reply(status, text, 'text/html; charset=utf-8');
  }

  static empty(status = 204): Reply {
    return new Reply(status);
  }

  /** A body produced piece by piece (large listings); see StreamReply. */
  static stream(chunks: AsyncIterable<string | Buffer>, contentType = 'application/json', status = 200): StreamReply {
    return new StreamReply(status, chunks, contentType);
  }
}

/**
 * A body written as its chunks are produced, with back-pressure: the next
 * chunk is only pulled once the socket has taken the previous one, so memory
 * stays bounded however long the body. The status is sent before the first
 * chunk; an error thrown while iterating cannot become an error response, so
 * the connection is closed instead and the client sees a truncated body.
 * When the client goes away, iteration stops and the iterator is closed
 * (which releases a database cursor behind it).
 */
export class StreamReply extends Reply {
  constructor(
    status: number,
    readonly chunks: AsyncIterable<string | Buffer>,
    contentType: string,
    headers: Record<string, string> = {},
  ) {
    super(status, undefined, contentType, headers);
  }
}

/** What the server tells a handler about itself. */
export interface ServerState {
  /** Requests in progress on limited light routes, and their limit. */
  inflight: number;
  maxInflight: number;
  /** Requests in progress on engine routes, and their own limit. */
  engineInflight: number;
  maxEngineInflight: number;
  /** Request body bytes held now, and the budget they are admitted against. */
  bodyBytes: number;
  maxBodyBytes: number;
  draining: boolean;
}

/**
 * How a route is admitted. `engine` routes take a photo and run the models:
 * they have a concurrency limit of their own, so a flood of uploads is shed
 * with 503 while light routes (lookups, listings) still get their slots.
 */
export type RouteCost = 'engine' | 'light';

export interface RouteContext<I, P> {
  /** Body and query-string parameters, validated by the route's `request` schema. */
  input: I;
  /** Path parameters, validated by the route's `params` schema. */
  params: P;
  /** Request headers, lower-cased names, copied before the first await. */
  headers: Readonly<Record<string, string>>;
  /** The headers the route's `requestHeaders` schema declares, validated by it. */
  headerInput: Readonly<Record<string, unknown>>;
  /** On routes that need a token: who is calling (auth.ts `callerOf`). */
  caller?: Buffer;
  /** On routes that need a token: what the token stands for (its tenant, access and galleries). */
  principal?: Principal;
  /** Aborts when the client goes away; pass it to anything slow. */
  signal: AbortSignal;
  log: Logger;
  server: ServerState;
}

type AnyObject = z.ZodType<Record<string, unknown>, Record<string, unknown>>;

export interface RouteDef<
  Req extends AnyObject | undefined = AnyObject | undefined,
  Par extends AnyObject | undefined = AnyObject | undefined,
  Res extends z.ZodType | undefined = z.ZodType | undefined,
> {
  method: Method;
  /** `/v0/face/id/:id/`; the leading `/vN/` segment names the API version it belongs to. */
  path: string;
  summary: string;
  description?: string;
  /** Set by `defineAlias`: the route this path stands for (`POST /v1/detect/`), documented as deprecated. */
  aliasOf?: string;
  /**
   * Requires `Authorization: Token <token>`: any valid API token (true), an
   * operator's ('operator': a tenant's administration), or a deployment
   * operator's ('deployment': every tenant, and routes that change how the
   * service runs rather than the data). 'optional': a token is read when one
   * is sent (and refused when invalid), and the route answers without one.
   */
  auth: boolean | 'optional' | 'operator' | 'deployment';
  /**
   * What a token needs to reach this route (auth.ts `Access`); default `read` for GET, `write`
   * for the others. A token with less is refused with 403 FORBIDDEN naming the scope.
   */
  access?: Access;
  /**
   * Parameters from the body (JSON, multipart, urlencoded) and the query
   * string; on GET and DELETE only the query string.
   */
  request?: Req;
  /**
   * The body is raw bytes of `mediaType` instead of JSON or a form: they reach
   * the request schema as the Buffer parameter `param`, and the schema's other
   * parameters come from the query string.
   */
  binaryBody?: { mediaType: string; param: string; description: string };
  params?: Par;
  /**
   * Request headers the route reads, keyed by lower-case name: validated like the other
   * parameters (400 naming the header) and documented as header parameters.
   */
  requestHeaders?: AnyObject;
  response: {
    status: number;
    description: string;
    /** Omitted for bodiless answers such as 204. */
    schema?: Res;
    /** Other media types this route can answer with, e.g. text/html for docs. */
    alternatives?: string[];
  };
  /**
   * Error codes the handler and the services it calls can answer with (each
   * code's status is ERROR_STATUS's). Codes the HTTP layer raises before the
   * handler runs are added by `errorCodes` from the route's shape, and those
   * every route can give (COMMON_ERRORS) are added too: list neither here.
   */
  errors: readonly ErrorCode[];
  /**
   * Headers sent with every answer of this route, errors included (also those
   * raised before the handler runs, such as a rejected parameter); headers the
   * answer itself carries take precedence.
   */
  headers?: () => Record<string, string>;
  /** False for cheap routes (health, docs) that must answer even when the service is saturated. */
  limited?: boolean;
  /**
   * Admission class; when left out, a route whose request documents an
   * uploaded file (`format: binary`, as photoParam does) is `engine`, any
   * other `light`.
   */
  cost?: RouteCost;
  handler: (
    ctx: RouteContext<
      Req extends z.ZodType ? z.output<Req> : Record<string, never>,
      Par extends z.ZodType ? z.output<Par> : Record<string, string>
    >,
  ) => Promise<(Res extends z.ZodType ? z.input<Res> : never) | Reply>;
}

/** Routes as stored: the generic parameters erased once `define` has checked them. */
export type AnyRoute = RouteDef<AnyObject | undefined, AnyObject | undefined, z.ZodType | undefined> & {
  handler: (ctx: RouteContext<any, any>) => Promise<unknown>;
};

/** Success statuses that may be answered without a body (201: the created resource is named by the request path). */
const BODILESS = new Set([201, 204]);

/**
 * Codes any route may answer with: a failure of ours, a service shutting
 * down or shedding load (or a store it needs unreachable), a request that
 * ran past its deadline.
 */
export const COMMON_ERRORS: readonly ErrorCode[] = ['INTERNAL', 'SERVICE_UNAVAILABLE', 'DEADLINE_EXCEEDED'];

/** What the body parsers refuse (http/body.ts): a body over its limit, of a media type not taken, or unreadable. */
const BODY_ERRORS: readonly ErrorCode[] = ['PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE', 'MALFORMED_JSON', 'MALFORMED_BODY'];

/**
 * Codes that never reach a client as a route's answer, so no route lists
 * them: CLIENT_CLOSED is logged for a request whose client went away.
 */
const UNSEEN_ERRORS: ReadonlySet<ErrorCode> = new Set(['CLIENT_CLOSED']);

/** Methods whose `request` comes in a body (on GET and DELETE it is the query string, as openapi.ts documents it). */
const BODY_METHODS = new Set<Method>(['POST', 'PUT', 'PATCH']);

/**
 * Every error code a route can answer with, in ERROR_STATUS's order: its own
 * (`errors`), those the HTTP layer raises by the route's shape, and the
 * common ones.
 * - AUTH_FAILED, FORBIDDEN, RATE_LIMITED: a route that needs a token (refused,
 *   lacking a scope, over its fair share or its tenant's share of a full lane).
 * - BAD_PARAM: any route, as a parameter the route does not take is refused
 *   (http/params.ts), besides invalid path, query and body parameters.
 * - The body parsers' codes: a route that reads a body (a JSON or form body
 *   of a POST or PUT, or a raw `binaryBody`; a raw body is never parsed, so
 *   only its size and media type are checked).
 */
export function errorCodes(route: Pick<RouteDef, 'method' | 'auth' | 'request' | 'binaryBody' | 'errors'>): ErrorCode[] {
  const codes = new Set<ErrorCode>(route.errors);
  if (route.auth) for (const c of ['AUTH_FAILED', 'FORBIDDEN', 'RATE_LIMITED'] as const) codes.add(c);
  codes.add('BAD_PARAM');
  if (route.binaryBody) {
    codes.add('PAYLOAD_TOO_LARGE');
    codes.add('UNSUPPORTED_MEDIA_TYPE');
  } else if (route.request && BODY_METHODS.has(route.method)) {
    for (const c of BODY_ERRORS) codes.add(c);
  }
  for (const c of COMMON_ERRORS) codes.add(c);
  return (Object.keys(ERROR_STATUS) as ErrorCode[]).filter((c) => codes.has(c));
}

/** The principal of a request to a route that needs a token. */
export function principalOf(ctx: { principal?: Principal }): Principal {
  if (!ctx.principal) throw new Error('principalOf: the route takes no token');
  return ctx.principal;
}

/** What a token needs to reach `route`: its declared access, else `read` for GET and `write` for the others. */
export function neededAccess(route: Pick<RouteDef, 'method' | 'access'>): Access {
  return route.access ?? (route.method === 'GET' ? 'read' : 'write');
}

/** The stable code of an error a handler threw, when it carries one. */
function codeOf(err: unknown): ErrorCode | undefined {
  if (err instanceof DomainError) return err.code;
  if (err instanceof HttpError) return err.error;
  return undefined;
}

export class RouteRegistry {
  private readonly list: AnyRoute[] = [];
  readonly router = new Router<AnyRoute>();

  define<Req extends AnyObject | undefined, Par extends AnyObject | undefined, Res extends z.ZodType | undefined>(
    def: RouteDef<Req, Par, Res>,
  ): void {
    const where = `${def.method} ${def.path}`;
    if (!def.summary?.trim()) throw new Error(`${where}: a route needs a summary`);
    if (!def.response?.description?.trim()) throw new Error(`${where}: a route needs a response description`);
    if (!Array.isArray(def.errors)) throw new Error(`${where}: a route lists its error codes`);
    for (const code of def.errors) {
      if (!Object.hasOwn(ERROR_STATUS, code)) throw new Error(`${where}: unknown error code ${String(code)}`);
      if (UNSEEN_ERRORS.has(code)) throw new Error(`${where}: ${code} never reaches a client; do not list it`);
    }
    if (!BODILESS.has(def.response.status) && !def.response.schema && !def.response.alternatives?.length) {
      throw new Error(`${where}: a response with a body needs a schema`);
    }
    const names = patternParams(def.path);
    const declared = def.params ? Object.keys(shapeOf(def.params)) : [];
    if (names.sort().join() !== declared.sort().join()) {
      throw new Error(`${where}: path parameters [${names}] do not match the params schema [${declared}]`);
    }
    const documented = new Set<ErrorCode>([...errorCodes(def), ...UNSEEN_ERRORS]);
    const handler = def.handler as AnyRoute['handler'];
    const route = {
      ...def,
      cost: def.cost ?? (def.request && takesUpload(def.request) ? 'engine' : 'light'),
      // The answer is sent all the same; the warning shows where the documentation fell behind the code.
      async handler(ctx: RouteContext<any, any>) {
        try {
          return await handler(ctx);
        } catch (err) {
          const code = codeOf(err);
          if (code !== undefined && !documented.has(code)) ctx.log.warn({ route: where, code }, 'error code not documented for this route');
          throw err;
        }
      },
    } as unknown as AnyRoute;
    this.router.add(def.method, def.path, route);
    this.list.push(route);
  }

  /**
   * Serves `def` at `path` too, for clients written against the older API: the same handler and
   * schemas, documented as a deprecated alias of `def`'s own path.
   */
  defineAlias<Req extends AnyObject | undefined, Par extends AnyObject | undefined, Res extends z.ZodType | undefined>(
    path: string,
    def: RouteDef<Req, Par, Res>,
  ): void {
    this.define({ ...def, path, aliasOf: `${def.method} ${def.path}` });
  }

  routes(): readonly AnyRoute[] {
    return this.list;
  }
}

/** True when the schema documents a file upload anywhere (photo parameters declare `format: binary`). */
export function takesUpload(schema: z.ZodType): boolean {
  try {
    return JSON.stringify(toJSONSchema(schema, { io: 'input', unrepresentable: 'any' })).includes('"format":"binary"');
  } catch {
    return false;
  }
}

/** The API version a path belongs to (`/v0/verify/` → `v0`), or undefined for unversioned paths. */
export function versionOf(path: string): string | undefined {
  return /^\/(v\d+)(\/|$)/.exec(path)?.[1];
}
