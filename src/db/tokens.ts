/**
 * API tokens kept in Postgres, hashed: the token is shown once at creation
 * and only its SHA-256 is stored, so a database dump grants nothing.
 *
 * The verifier caches answers briefly because every authenticated request
 * asks. Revocation must still bite at once, so `revoke` notifies on a
 * channel the verifier listens to and clears its cache; the short TTL covers
 * the moments the listening connection is down.
 *
 * Accepted and refused tokens live in two separate LRU caches: anyone can
 * send endless random tokens, and in one shared cache those refusals would
 * evict the few valid tokens, sending every real request to the database.
 */
import { createHash, randomBytes } from 'node:crypto';
import { tenantOf, type Access, type Principal, type TokenVerifier } from '../auth.js';
import { DomainError, unavailable } from '../errors.js';
import type { Logger } from '../log.js';
import { audit, bindingOf, type Actor, type AdminReach } from './audit.js';
import { onPrimary, transaction, type FreshRead, type Sql } from './client.js';
import { GALLERY_NAME } from './galleries.js';

/** Notified on commit of anything that changes what a token stands for: a revocation, a tenant disabled or deleted. */
export const TOKENS_CHANGED = 'face_tokens_changed';
const UNIQUE_VIOLATION = '23505';
const FOREIGN_KEY_VIOLATION = '23503';

/** What a token may do, besides its tenant (013-tenants.sql). */
export interface TokenGrant {
  /** Also reaches its tenant's administration (/v0/admin/tenants, tokens, audit: its own part). */
  operator?: boolean;
  /** An operator of the deployment: every tenant, and the routes that run the service. Implies `operator`. */
  deployment?: boolean;
  /** Default `write`. */
  access?: Access;
  /** Only these galleries of its tenant; all when absent. */
  galleries?: string[];
  ratePerS?: number;
  photosInFlight?: number;
}

export interface TokenRecord {
  id: number;
  name: string;
  tenant: string;
  operator: boolean;
  deployment: boolean;
  access: Access;
  galleries: string[] | null;
  rate_per_s: number | null;
  photos_in_flight: number | null;
  created: string;
  revoked_at: string | null;
}

export function tokenHash(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/** 256 random bits, URL-safe, with a prefix that makes a leaked token easy to recognise. */
export function newToken(): string {
  return `fs_${randomBytes(32).toString('base64url')}`;
}

export class TokenStore {
  constructor(private readonly sql: Sql) {}

  /**
   * A new token of tenant `tenant` (its name); CONFLICT when an active token already has this
   * name, NOT_FOUND when the tenant does not exist, BAD_PARAM for a gallery name no gallery can have.
   */
  async create(actor: Actor, reach: AdminReach, name: string, grant: TokenGrant = {}, tenant = 'default'): Promise<{ id: number; token: string }> {
    const bad = grant.galleries?.find((g) => !GALLERY_NAME.test(g));
    if (bad !== undefined) throw new DomainError('BAD_PARAM', `Invalid gallery name: ${bad}`, { param: 'galleries' });
    if (grant.galleries?.length === 0) throw new DomainError('BAD_PARAM', 'A token limited to galleries needs at least one', { param: 'galleries' });
    const token = newToken();
    try {
      return await transaction(this.sql, bindingOf(reach), async (tx) => {
        const [row] = await tx`
        INSERT INTO tokens (name, hash, operator, deployment, tenant_id, access, galleries, rate_per_s, photos_in_flight)
        SELECT ${name}, ${tokenHash(token)}, ${(grant.operator ?? false) || (grant.deployment ?? false)}, ${grant.deployment ?? false}, t.id, ${grant.access ?? 'write'},
          ${grant.galleries ? [...new Set(grant.galleries)].sort() : null}, ${grant.ratePerS ?? null}, ${grant.photosInFlight ?? null}
        FROM tenants t WHERE t.name = ${tenant}
        RETURNING id, tenant_id`;
        if (!row) throw new DomainError('NOT_FOUND', `Unknown tenant: ${tenant}`, { param: 'tenant' });
        const id = Number(row.id);
        await audit(tx, actor, tenantOf(row.tenant_id), 'token.create', `${id}`, { name, tenant, ...grant });
        return { id, token };
      });
    } catch (err) {
      if ((err as { code?: string }).code === UNIQUE_VIOLATION) {
        throw new DomainError('CONFLICT', `an active token of tenant ${tenant} is already named ${JSON.stringify(name)}; pick another name or revoke that one`, {
          param: 'name',
        });
      }
      if ((err as { code?: string }).code === FOREIGN_KEY_VIOLATION) throw new DomainError('NOT_FOUND', `Unknown tenant: ${tenant}`, { param: 'tenant' });
      throw err;
    }
  }

  /** The tokens `reach` administers: every one, or a tenant's. */
  async list(reach: AdminReach): Promise<TokenRecord[]> {
    const rows = await transaction(
      this.sql,
      bindingOf(reach),
      (sql) => sql`
        SELECT k.id, k.name, t.name AS tenant, k.operator, k.deployment, k.access, k.galleries, k.rate_per_s, k.photos_in_flight,
          to_char(k.created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created,
          to_char(k.revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS revoked_at
        FROM tokens k JOIN tenants t ON t.id = k.tenant_id
        WHERE ${reach === 'deployment' ? sql`true` : sql`k.tenant_id = ${reach.tenant}`}
        ORDER BY k.id`,
    );
    return rows.map((r) => ({
      id: Number(r.id),
      name: r.name,
      tenant: r.tenant,
      operator: r.operator,
      deployment: r.deployment,
      access: r.access,
      galleries: r.galleries,
      rate_per_s: r.rate_per_s,
      photos_in_flight: r.photos_in_flight,
      created: r.created,
      revoked_at: r.revoked_at,
    }));
  }

  /** False when no active token that `reach` administers has this id. */
  async revoke(actor: Actor, reach: AdminReach, id: number): Promise<boolean> {
    return transaction(this.sql, bindingOf(reach), async (tx) => {
      const rows = await tx`
        UPDATE tokens SET revoked_at = now()
        WHERE id = ${id} AND revoked_at IS NULL AND ${reach === 'deployment' ? tx`true` : tx`tenant_id = ${reach.tenant}`}
        RETURNING name, tenant_id`;
      if (!rows.length) return false;
      // Delivered on commit, so no verifier re-reads the token before the revocation is visible.
      await tx`SELECT pg_notify(${TOKENS_CHANGED}, ${String(id)})`;
      await audit(tx, actor, tenantOf(rows[0].tenant_id), 'token.revoke', `${id}`, { name: rows[0].name });
      return true;
    });
  }

  /** Number of tokens ever created, revoked ones included. */
  async count(): Promise<number> {
    const [row] = await transaction(this.sql, 'administration', (tx) => tx`SELECT count(*) AS n FROM tokens`);
    return Number(row.n);
  }

  /** What an active token of an enabled tenant stands for; undefined for any other token. Read on `sql` when given. */
  async principalOf(token: string, sql: Sql = this.sql): Promise<Principal | undefined> {
    // A token names its tenant, so it is looked up before there is one to be bound to.
    const [row] = await transaction(
      sql,
      'authentication',
      (tx) => tx`
        SELECT k.id, k.name, k.tenant_id, k.operator, k.deployment, k.access, k.galleries,
          coalesce(k.rate_per_s, t.rate_per_s) AS rate_per_s, coalesce(k.photos_in_flight, t.photos_in_flight) AS photos_in_flight
        FROM tokens k JOIN tenants t ON t.id = k.tenant_id
        WHERE k.hash = ${tokenHash(token)} AND k.revoked_at IS NULL AND t.disabled_at IS NULL`,
    );
    if (!row) return undefined;
    return {
      tokenId: Number(row.id),
      name: row.name,
      tenant: tenantOf(row.tenant_id),
      operator: row.operator,
      deployment: row.deployment,
      access: row.access,
      ...(row.galleries ? { galleries: row.galleries as string[] } : {}),
      limits: {
        ...(row.rate_per_s !== null ? { ratePerS: Number(row.rate_per_s) } : {}),
        ...(row.photos_in_flight !== null ? { photosInFlight: Number(row.photos_in_flight) } : {}),
      },
    };
  }
}

export interface DbTokenVerifierOptions {
  /** How long an answer is reused when no revocation notice arrives. */
  ttlMs?: number;
  /** Accepted tokens kept (least recently used dropped first). */
  maxEntries?: number;
  /** Refused tokens kept, in a cache of their own. */
  maxNegativeEntries?: number;
  log?: Logger;
  /** Where a token is read when no answer is cached: the primary, or the replica while it is lost (a failover). */
  fresh?: FreshRead;
}

/** A size-bounded map that drops the least recently used entry; a Map iterates in insertion order. */
export class LruCache<V> {
  private readonly map = new Map<string, V>();

  constructor(readonly max: number) {}

  get size(): number {
    return this.map.size;
  }

  get(key: string): V | undefined {
    const v = this.map.get(key);
    if (v !== undefined) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  set(key: string, value: V): void {
    this.map.delete(key);
    if (this.map.size >= this.max) this.map.delete(this.map.keys().next().value as string);
    this.map.set(key, value);
  }

  delete(key: string): void {
    this.map.delete(key);
  }

  clear(): void {
    this.map.clear();
  }
}

export class DbTokenVerifier implements TokenVerifier {
  /** Digest → principal and expiry of tokens the database accepted. */
  private readonly accepted: LruCache<{ principal: Principal; until: number }>;
  /** Digest → expiry of tokens it refused; floods of random tokens churn only this one. */
  private readonly refused: LruCache<number>;
  private readonly ttlMs: number;
  private readonly fresh: FreshRead;
  private unlisten?: () => Promise<void>;

  constructor(
    private readonly sql: Sql,
    private readonly store: TokenStore = new TokenStore(sql),
    opts: DbTokenVerifierOptions = {},
  ) {
    this.ttlMs = opts.ttlMs ?? 5000;
    this.fresh = opts.fresh ?? onPrimary(sql);
    this.accepted = new LruCache(opts.maxEntries ?? 1000);
    this.refused = new LruCache(opts.maxNegativeEntries ?? 1000);
    const listening = sql.listen(TOKENS_CHANGED, () => this.clear(), () => this.clear());
    listening.then(
      (l) => {
        this.unlisten = l.unlisten;
      },
      (err) => opts.log?.warn({ err }, 'token revocation notices unavailable; relying on the cache TTL'),
    );
  }

  async verify(token: string): Promise<Principal | undefined> {
    // Keyed by the digest so the cache never holds a token in the clear.
    const key = tokenHash(token);
    const now = Date.now();
    const good = this.accepted.get(key);
    if (good !== undefined) {
      if (good.until > now) return good.principal;
      this.accepted.delete(key);
    }
    const bad = this.refused.get(key);
    if (bad !== undefined) {
      if (bad > now) return undefined;
      this.refused.delete(key);
    }
    let principal: Principal | undefined;
    try {
      principal = await this.fresh((sql) => this.store.principalOf(token, sql), (p) => p !== undefined);
    } catch (err) {
      // Fail closed, but say why: a 401 would tell the client its token is bad.
      throw unavailable('Token store unavailable', 1, err);
    }
    if (principal) this.accepted.set(key, { principal, until: now + this.ttlMs });
    else this.refused.set(key, now + this.ttlMs);
    return principal;
  }

  /** Cached answers: accepted and refused tokens. */
  cached(): { accepted: number; refused: number } {
    return { accepted: this.accepted.size, refused: this.refused.size };
  }

  /** Drops cached answers: after a change this process made (services/tenants.ts), and in tests. */
  clear(): void {
    this.accepted.clear();
    this.refused.clear();
  }

  async close(): Promise<void> {
    await this.unlisten?.().catch(() => {});
  }
}
