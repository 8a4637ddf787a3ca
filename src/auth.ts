/**
 * API token checks: `Authorization: Token <token>`, and what the token may do.
 *
 * A verifier turns a token into the `Principal` it stands for: its tenant,
 * whether it is an operator's, its access level and galleries, and its fair
 * share. Verification sits behind `TokenVerifier` so that the database-backed
 * token store plugs in beside the bootstrap FACE_TOKEN without touching the
 * HTTP layer. With no verifier able to accept anything, every authenticated
 * route answers 401: the service fails closed rather than open.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { DomainError } from './errors.js';

/**
 * A tenant's id. A bare number is not one: a tenant comes from an authenticated principal or
 * from a row of the database (`tenantOf`), so no store or index call can be handed a tenant
 * made up on the way, and every call that takes one says so in its type.
 */
export type TenantId = number & { readonly __tenant: unique symbol };

/** The tenant a database row (`tenant_id`) or a deployment operator's request names. */
export function tenantOf(id: number | string | bigint): TenantId {
  return Number(id) as TenantId;
}

/** The first tenant: what a single-tenant deployment and FACE_TOKEN use. */
export const FIRST_TENANT = tenantOf(1);

/**
 * What a token may do within its tenant, each level including the one before:
 * `analyze` detects and verifies photos (nothing stored is read or written),
 * `read` also reads what is stored, `write` also changes it.
 */
export const ACCESS_LEVELS = ['analyze', 'read', 'write'] as const;
export type Access = (typeof ACCESS_LEVELS)[number];

export function allows(granted: Access, needed: Access): boolean {
  return ACCESS_LEVELS.indexOf(granted) >= ACCESS_LEVELS.indexOf(needed);
}

/** Who a valid token stands for. */
export interface Principal {
  /** The token's id in the token store; undefined for FACE_TOKEN. */
  tokenId?: number;
  /** The token's name, as the audit log records it. */
  name: string;
  tenant: TenantId;
  /** Also reaches the administration of its tenant (/v0/admin/tenants, tokens and audit, its own part). */
  operator: boolean;
  /**
   * An operator of the deployment (always an operator too): every tenant's administration,
   * creating and deleting tenants, and running the service (/metrics, /v0/admin/shards,
   * /v0/shard/*).
   */
  deployment: boolean;
  access: Access;
  /** The galleries of its tenant it may name; undefined: all of them. */
  galleries?: readonly string[];
  /** Its own fair share; undefined fields fall back to the service's defaults. */
  limits: { ratePerS?: number; photosInFlight?: number };
}

export interface TokenVerifier {
  /** What the token stands for, or undefined when it grants nothing. Must not throw for unknown tokens. */
  verify(token: string): Promise<Principal | undefined>;
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

/** The bootstrap token: an operator of the deployment, in the first tenant, with every access and no limit of its own. */
export const BOOTSTRAP_PRINCIPAL: Principal = { name: 'FACE_TOKEN', tenant: FIRST_TENANT, operator: true, deployment: true, access: 'write', limits: {} };

/** Accepts one configured token; compares digests in constant time so timing reveals nothing about it. */
export class StaticTokenVerifier implements TokenVerifier {
  private readonly expected: Buffer | undefined;

  constructor(
    token: string | undefined,
    private readonly principal: Principal = BOOTSTRAP_PRINCIPAL,
  ) {
    this.expected = token ? digest(token) : undefined;
  }

  async verify(token: string): Promise<Principal | undefined> {
    if (!this.expected) return undefined;
    return timingSafeEqual(digest(token), this.expected) ? this.principal : undefined;
  }
}

/** Accepts a token any of its verifiers accepts, asked in order. */
export class AnyTokenVerifier implements TokenVerifier {
  constructor(private readonly verifiers: TokenVerifier[]) {}

  async verify(token: string): Promise<Principal | undefined> {
    for (const v of this.verifiers) {
      const p = await v.verify(token);
      if (p) return p;
    }
    return undefined;
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

/** The principal of a request's token; 401 AUTH_FAILED when there is none or it grants nothing. */
export async function authenticate(header: string | undefined, verifier: TokenVerifier): Promise<Principal> {
  const token = tokenFromHeader(header);
  if (token === undefined) {
    throw new DomainError('AUTH_FAILED', 'Missing or malformed Authorization header; expected "Token <token>"', {
      headers: { 'WWW-Authenticate': 'Token' },
    });
  }
  const principal = await verifier.verify(token);
  if (!principal) throw new DomainError('AUTH_FAILED', 'Invalid token', { headers: { 'WWW-Authenticate': 'Token' } });
  return principal;
}

/** 403 FORBIDDEN naming what the token lacks. */
export function forbidden(missing: string, detail: string): DomainError {
  return new DomainError('FORBIDDEN', `This token lacks the ${missing} scope: ${detail}`);
}

/**
 * The galleries a request names, checked against the token's: 403 when it names one the token
 * may not, or names none (the whole tenant) while the token is limited to some.
 */
export function checkGalleries(principal: Pick<Principal, 'galleries'>, named: readonly string[]): void {
  const allowed = principal.galleries;
  if (!allowed) return;
  if (named.length === 0) throw forbidden('gallery', `it reaches only the galleries ${allowed.join(', ')}; name one of them`);
  const outside = named.filter((g) => !allowed.includes(g));
  if (outside.length) throw forbidden('gallery', `it does not reach the gallery ${outside.join(', ')}`);
}
