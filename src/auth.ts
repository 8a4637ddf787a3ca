/**
 * API token checks: `Authorization: Token <token>`.
 *
 * Verification sits behind `TokenVerifier` so that the database-backed token
 * store plugs in beside the bootstrap FACE_TOKEN without touching the HTTP
 * layer. With no verifier able to accept anything, every authenticated route
 * answers 401: the service fails closed rather than open.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { DomainError } from './errors.js';

export interface TokenVerifier {
  /** True when the token grants access. Must not throw for unknown tokens. */
  verify(token: string): Promise<boolean>;
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

/** Accepts one configured token; compares digests in constant time so timing reveals nothing about it. */
export class StaticTokenVerifier implements TokenVerifier {
  private readonly expected: Buffer | undefined;

  constructor(token: string | undefined) {
    this.expected = token ? digest(token) : undefined;
  }

  async verify(token: string): Promise<boolean> {
    if (!this.expected) return false;
    return timingSafeEqual(digest(token), this.expected);
  }
}

/** Accepts a token any of its verifiers accepts, asked in order. */
export class AnyTokenVerifier implements TokenVerifier {
  constructor(private readonly verifiers: TokenVerifier[]) {}

  async verify(token: string): Promise<boolean> {
    for (const v of this.verifiers) if (await v.verify(token)) return true;
    return false;
  }
}

const AUTH_SCHEME = /^Token\s+(\S+)\s*$/i;

/** Extracts the token from an Authorization header value, or undefined when the header is absent or malformed. */
export function tokenFromHeader(header: string | undefined): string | undefined {
  if (!header) return undefined;
  return AUTH_SCHEME.exec(header)?.[1];
}

/**
 * Who is calling, as a stable key: the SHA-256 of the token the request carries. What a caller
 * leaves for itself (idempotency keys) is filed under it, so one client's never answers another's.
 */
export function callerOf(header: string | undefined): Buffer | undefined {
  const token = tokenFromHeader(header);
  return token === undefined ? undefined : createHash('sha256').update(token).digest();
}

export async function authenticate(header: string | undefined, verifier: TokenVerifier): Promise<void> {
  const token = tokenFromHeader(header);
  if (token === undefined) {
    throw new DomainError('AUTH_FAILED', 'Missing or malformed Authorization header; expected "Token <token>"', {
      headers: { 'WWW-Authenticate': 'Token' },
    });
  }
  if (!(await verifier.verify(token))) {
    throw new DomainError('AUTH_FAILED', 'Invalid token', { headers: { 'WWW-Authenticate': 'Token' } });
  }
}
