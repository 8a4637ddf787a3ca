/**
 * What the request's headers say about its body, checked before anything reads it: framing
 * that two parsers could read differently is refused, and whether a body is coming at all.
 */
import { HttpError } from './errors.js';

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

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

/** Whether a request of `method` with these headers sends a body to read. */
export function carriesBody(method: string, headers: Record<string, string>): boolean {
  if (!BODY_METHODS.has(method)) return false;
  const len = headers['content-length'];
  if (len !== undefined) return Number(len) > 0;
  return headers['transfer-encoding'] !== undefined;
}

/** The Content-Length, when there is one (checkFraming has made sure it is digits). */
export function declaredLength(headers: Record<string, string>): number | undefined {
  return headers['content-length'] !== undefined ? Number(headers['content-length']) : undefined;
}
