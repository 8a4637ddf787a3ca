/**
 * Domain errors: what db/, native/, search/ and services/ raise when a
 * request cannot be served as asked. Each carries a stable code; the HTTP
 * layer alone knows which status a code is sent with (src/http/errors.ts), so
 * the mapping is written once. The helpers below (`invalid`, `notFound`,
 * `unavailable`) are the only ones: the HTTP layer raises these too. This
 * module imports nothing, so every layer may use it.
 */

/** Stable error codes, shown to clients as the body's `error`. */
export type ErrorCode =
  | 'AUTH_FAILED'
  | 'FORBIDDEN'
  | 'RATE_LIMITED'
  | 'BAD_PARAM'
  | 'MALFORMED_JSON'
  | 'MALFORMED_BODY'
  | 'MALFORMED_REQUEST'
  | 'PHOTO_FETCH_FAILED'
  | 'IMAGE_CORRUPT'
  | 'TOO_MANY_FACES'
  | 'NOT_FOUND'
  | 'METHOD_NOT_ALLOWED'
  | 'CONFLICT'
  | 'PAYLOAD_TOO_LARGE'
  | 'IMAGE_TOO_LARGE'
  | 'IMAGE_ASPECT_RATIO'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'IMAGE_UNSUPPORTED'
  | 'NO_FACE'
  | 'LOW_QUALITY'
  | 'CLIENT_CLOSED'
  | 'SERVICE_UNAVAILABLE'
  | 'SHARDS_UNAVAILABLE'
  | 'OVERLOADED'
  | 'DEADLINE_EXCEEDED'
  | 'INTERNAL';

export interface DomainErrorOptions {
  /** The request parameter the error is about. */
  param?: string;
  /** Extra top-level body fields (e.g. `faces` for TOO_MANY_FACES). */
  details?: Record<string, unknown>;
  /** For errors that pass: when a retry may succeed (becomes Retry-After). */
  retryAfterS?: number;
  /** Headers that belong with the answer whatever the code (e.g. X-Live-Servers). */
  headers?: Record<string, string>;
  cause?: unknown;
}

export class DomainError extends Error {
  readonly code: ErrorCode;
  readonly param?: string;
  readonly details?: Record<string, unknown>;
  readonly retryAfterS?: number;
  readonly headers?: Record<string, string>;

  constructor(code: ErrorCode, message: string, opts: DomainErrorOptions = {}) {
    super(message, opts.cause !== undefined ? { cause: opts.cause } : undefined);
    this.name = 'DomainError';
    this.code = code;
    this.param = opts.param;
    this.details = opts.details;
    this.retryAfterS = opts.retryAfterS;
    this.headers = opts.headers;
  }

  /** The same error attributed to a request parameter, unless it already names one. */
  withParam(param: string): DomainError {
    if (this.param !== undefined) return this;
    return new DomainError(this.code, `${param}: ${this.message}`, {
      param,
      details: this.details,
      retryAfterS: this.retryAfterS,
      headers: this.headers,
      cause: this.cause,
    });
  }
}

export const invalid = (param: string, message: string) => new DomainError('BAD_PARAM', message, { param });

export const notFound = (message: string, param?: string) => new DomainError('NOT_FOUND', message, param ? { param } : {});

export const unavailable = (message: string, retryAfterS = 1, cause?: unknown) =>
  new DomainError('SERVICE_UNAVAILABLE', message, { retryAfterS, cause });
