/**
 * The one error type the HTTP layer answers with, and the one body shape.
 *
 * Every non-2xx body is `{code, reason, error, param?, ...extra}` where `code`
 * is the HTTP status as an integer (the spec's shown `mf_selector=reject` case
 * fixes that), `error` a stable UPPER_SNAKE id for programs, and `reason` a
 * sentence for people. Anything that is not an HttpError becomes a generic
 * 500 so internal messages never leak; the cause is logged instead.
 */

import { DomainError, type ErrorCode } from '../errors.js';

/** The status each domain error code is sent with: the one place codes meet HTTP. */
export const ERROR_STATUS: Record<ErrorCode, number> = {
  AUTH_FAILED: 401,
  FORBIDDEN: 403,
  RATE_LIMITED: 429,
  BAD_PARAM: 400,
  MALFORMED_JSON: 400,
  MALFORMED_BODY: 400,
  MALFORMED_REQUEST: 400,
  PHOTO_FETCH_FAILED: 400,
  IMAGE_CORRUPT: 400,
  TOO_MANY_FACES: 400,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  CONFLICT: 409,
  PAYLOAD_TOO_LARGE: 413,
  IMAGE_TOO_LARGE: 413,
  IMAGE_ASPECT_RATIO: 400,
  UNSUPPORTED_MEDIA_TYPE: 415,
  IMAGE_UNSUPPORTED: 415,
  NO_FACE: 422,
  LOW_QUALITY: 422,
  CLIENT_CLOSED: 499,
  SERVICE_UNAVAILABLE: 503,
  SHARDS_UNAVAILABLE: 503,
  OVERLOADED: 503,
  DEADLINE_EXCEEDED: 503,
  INTERNAL: 500,
};

export type ErrorId = ErrorCode;

export interface ErrorBody {
  code: number;
  reason: string;
  error: string;
  param?: string;
  [extra: string]: unknown;
}

export class HttpError extends Error {
  readonly status: number;
  readonly error: ErrorId;
  readonly reason: string;
  readonly param?: string;
  /** Extra top-level body fields (e.g. `faces` for TOO_MANY_FACES). */
  readonly extra?: Record<string, unknown>;
  /** Response headers that go with this error (e.g. Retry-After). */
  readonly headers?: Record<string, string>;

  constructor(
    status: number,
    error: ErrorId,
    reason: string,
    extra?: { param?: string; headers?: Record<string, string>; cause?: unknown; [k: string]: unknown },
  ) {
    super(reason, extra?.cause !== undefined ? { cause: extra.cause } : undefined);
    this.name = 'HttpError';
    this.status = status;
    this.error = error;
    this.reason = reason;
    if (extra) {
      const { param, headers, cause: _cause, ...rest } = extra;
      this.param = param;
      this.headers = headers;
      if (Object.keys(rest).length > 0) this.extra = rest;
    }
  }

  /** The same error attributed to a request parameter, unless it already names one. */
  withParam(param: string): HttpError {
    if (this.param !== undefined) return this;
    return new HttpError(this.status, this.error, `${param}: ${this.reason}`, {
      ...this.extra,
      param,
      headers: this.headers,
      cause: this.cause,
    });
  }

  body(): ErrorBody {
    const body: ErrorBody = { code: this.status, reason: this.reason, error: this.error };
    if (this.param !== undefined) body.param = this.param;
    if (this.extra) {
      // Extras may add fields but never overwrite the contract's own keys.
      for (const [k, v] of Object.entries(this.extra)) if (!(k in body)) body[k] = v;
    }
    return body;
  }
}

export const INTERNAL_REASON = 'Internal server error';

/**
 * Normalises anything thrown during a request. `internal` is true when the
 * cause must be logged because the client only sees the generic reason.
 */
export function toHttpError(err: unknown): { error: HttpError; internal: boolean } {
  if (err instanceof HttpError) return { error: err, internal: err.status >= 500 && err.error === 'INTERNAL' };
  if (err instanceof DomainError) {
    const headers = err.retryAfterS !== undefined ? { ...err.headers, 'Retry-After': String(err.retryAfterS) } : err.headers;
    // An internal failure's message is for the log, never for the client.
    const reason = err.code === 'INTERNAL' ? INTERNAL_REASON : err.message;
    const error = new HttpError(ERROR_STATUS[err.code], err.code, reason, { ...err.details, param: err.param, headers, cause: err });
    return { error, internal: err.code === 'INTERNAL' };
  }
  return { error: new HttpError(500, 'INTERNAL', INTERNAL_REASON, { cause: err }), internal: true };
}
