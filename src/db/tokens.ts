/**
 * API tokens kept in Postgres, hashed: the token is shown once at creation
 * and only its SHA-256 is stored, so a database dump grants nothing.
 *
 * The verifier caches answers briefly because every authenticated request
 * asks. Revocation must still bite at once, so `revoke` notifies on a
 * channel the verifier listens to and clears its cache; the short TTL covers
 * the moments the listening connection is down.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { TokenVerifier } from '../auth.js';
import { HttpError } from '../http/errors.js';
import type { Logger } from '../log.js';
import type { Sql } from './client.js';

const CHANNEL = 'face_tokens_changed';

export interface TokenRecord {
  id: number;
  name: string;
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

  async create(name: string): Promise<{ id: number; token: string }> {
    const token = newToken();
    const [row] = await this.sql`INSERT INTO tokens (name, hash) VALUES (${name}, ${tokenHash(token)}) RETURNING id`;
    return { id: Number(row.id), token };
  }

  async list(): Promise<TokenRecord[]> {
    const rows = await this.sql`
      SELECT id, name,
        to_char(created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created,
        to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS revoked_at
      FROM tokens ORDER BY id`;
    return rows.map((r) => ({ id: Number(r.id), name: r.name, created: r.created, revoked_at: r.revoked_at }));
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

  async isActive(token: string): Promise<boolean> {
    const [row] = await this.sql`SELECT 1 FROM tokens WHERE hash = ${tokenHash(token)} AND revoked_at IS NULL`;
    return !!row;
  }
}

export interface DbTokenVerifierOptions {
  /** How long an answer is reused when no revocation notice arrives. */
  ttlMs?: number;
  maxEntries?: number;
  log?: Logger;
}

export class DbTokenVerifier implements TokenVerifier {
  private readonly cache = new Map<string, { ok: boolean; until: number }>();
  private readonly ttlMs: number;
  private readonly maxEntries: number;
  private unlisten?: () => Promise<void>;

  constructor(
    private readonly sql: Sql,
    private readonly store: TokenStore = new TokenStore(sql),
    opts: DbTokenVerifierOptions = {},
  ) {
    this.ttlMs = opts.ttlMs ?? 5000;
    this.maxEntries = opts.maxEntries ?? 1000;
    const listening = sql.listen(CHANNEL, () => this.cache.clear(), () => this.cache.clear());
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
    const hit = this.cache.get(key);
    if (hit && hit.until > now) return hit.ok;
    let ok: boolean;
    try {
      ok = await this.store.isActive(token);
    } catch (err) {
      // Fail closed, but say why: a 401 would tell the client its token is bad.
      throw new HttpError(503, 'SERVICE_UNAVAILABLE', 'Token store unavailable', { headers: { 'Retry-After': '1' }, cause: err });
    }
    if (this.cache.size >= this.maxEntries) this.cache.delete(this.cache.keys().next().value as string);
    this.cache.set(key, { ok, until: now + this.ttlMs });
    return ok;
  }

  /** Drops cached answers (tests; revocations in this process). */
  clear(): void {
    this.cache.clear();
  }

  async close(): Promise<void> {
    await this.unlisten?.().catch(() => {});
  }
}
