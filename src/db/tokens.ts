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
import type { TokenVerifier } from '../auth.js';
import { DomainError, unavailable } from '../errors.js';
import type { Logger } from '../log.js';
import type { Sql } from './client.js';

const CHANNEL = 'face_tokens_changed';
const UNIQUE_VIOLATION = '23505';

export interface TokenRecord {
  id: number;
  name: string;
  /** Also allowed the operator routes (/metrics, /v0/admin/*). */
  operator: boolean;
  created: string;
  revoked_at: string | null;
}

/** Which tokens a verifier accepts: any active one, or only operator tokens. */
export type TokenScope = 'any' | 'operator';

export function tokenHash(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/** 256 random bits, URL-safe, with a prefix that makes a leaked token easy to recognise. */
export function newToken(): string {
  return `fs_${randomBytes(32).toString('base64url')}`;
}

export class TokenStore {
  constructor(private readonly sql: Sql) {}

  /** A new token; CONFLICT when an active token already has this name. */
  async create(name: string, opts: { operator?: boolean } = {}): Promise<{ id: number; token: string }> {
    const token = newToken();
    try {
      const [row] = await this.sql`
        INSERT INTO tokens (name, hash, operator) VALUES (${name}, ${tokenHash(token)}, ${opts.operator ?? false}) RETURNING id`;
      return { id: Number(row.id), token };
    } catch (err) {
      if ((err as { code?: string }).code === UNIQUE_VIOLATION) {
        throw new DomainError('CONFLICT', `an active token is already named ${JSON.stringify(name)}; pick another name or revoke that one`, {
          param: 'name',
        });
      }
      throw err;
    }
  }

  async list(): Promise<TokenRecord[]> {
    const rows = await this.sql`
      SELECT id, name, operator,
        to_char(created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created,
        to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS revoked_at
      FROM tokens ORDER BY id`;
    return rows.map((r) => ({ id: Number(r.id), name: r.name, operator: r.operator, created: r.created, revoked_at: r.revoked_at }));
  }

  /** False when no active token has this id. */
  async revoke(id: number): Promise<boolean> {
    return (await this.sql.begin(async (tx) => {
      const rows = await tx`UPDATE tokens SET revoked_at = now() WHERE id = ${id} AND revoked_at IS NULL RETURNING id`;
      // Delivered on commit, so no verifier re-reads the token before the revocation is visible.
      if (rows.length) await tx`SELECT pg_notify(${CHANNEL}, ${String(id)})`;
      return rows.length > 0;
    })) as boolean;
  }

  /** Number of tokens ever created, revoked ones included. */
  async count(): Promise<number> {
    const [row] = await this.sql`SELECT count(*) AS n FROM tokens`;
    return Number(row.n);
  }

  /** True when the token is active and, for the operator scope, an operator token. */
  async isActive(token: string, scope: TokenScope = 'any'): Promise<boolean> {
    const [row] = await this.sql`SELECT operator FROM tokens WHERE hash = ${tokenHash(token)} AND revoked_at IS NULL`;
    return !!row && (scope === 'any' || row.operator === true);
  }
}

export interface DbTokenVerifierOptions {
  /** How long an answer is reused when no revocation notice arrives. */
  ttlMs?: number;
  /** Which tokens are accepted; default any active token. */
  scope?: TokenScope;
  /** Accepted tokens kept (least recently used dropped first). */
  maxEntries?: number;
  /** Refused tokens kept, in a cache of their own. */
  maxNegativeEntries?: number;
  log?: Logger;
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
  /** Digest → expiry of tokens the database accepted. */
  private readonly accepted: LruCache<number>;
  /** Digest → expiry of tokens it refused; floods of random tokens churn only this one. */
  private readonly refused: LruCache<number>;
  private readonly ttlMs: number;
  private readonly scope: TokenScope;
  private unlisten?: () => Promise<void>;

  constructor(
    private readonly sql: Sql,
    private readonly store: TokenStore = new TokenStore(sql),
    opts: DbTokenVerifierOptions = {},
  ) {
    this.ttlMs = opts.ttlMs ?? 5000;
    this.scope = opts.scope ?? 'any';
    this.accepted = new LruCache(opts.maxEntries ?? 1000);
    this.refused = new LruCache(opts.maxNegativeEntries ?? 1000);
    const listening = sql.listen(CHANNEL, () => this.clear(), () => this.clear());
    listening.then(
      (l) => {
        this.unlisten = l.unlisten;
      },
      (err) => opts.log?.warn({ err }, 'token revocation notices unavailable; relying on the cache TTL'),
    );
  }

  async verify(token: string): Promise<boolean> {
    // Keyed by the digest so the cache never holds a token in the clear.
    const key = tokenHash(token);
    const now = Date.now();
    const good = this.accepted.get(key);
    if (good !== undefined) {
      if (good > now) return true;
      this.accepted.delete(key);
    }
    const bad = this.refused.get(key);
    if (bad !== undefined) {
      if (bad > now) return false;
      this.refused.delete(key);
    }
    let ok: boolean;
    try {
      ok = await this.store.isActive(token, this.scope);
    } catch (err) {
      // Fail closed, but say why: a 401 would tell the client its token is bad.
      throw unavailable('Token store unavailable', 1, err);
    }
    (ok ? this.accepted : this.refused).set(key, now + this.ttlMs);
    return ok;
  }

  /** Cached answers: accepted and refused tokens. */
  cached(): { accepted: number; refused: number } {
    return { accepted: this.accepted.size, refused: this.refused.size };
  }

  /** Drops cached answers (tests; revocations in this process). */
  clear(): void {
    this.accepted.clear();
    this.refused.clear();
  }

  async close(): Promise<void> {
    await this.unlisten?.().catch(() => {});
  }
}
