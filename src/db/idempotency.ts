/**
 * Idempotency keys of writes (010-idempotency-keys.sql): the key is recorded in the write's own
 * transaction, so a retried write either finds the first one's result or runs as if it were the
 * first. Expired keys are ignored by lookups and taken over by a new write; `prune` deletes them.
 */
import { DomainError } from '../errors.js';
import type { Sql, TransactionSql } from './client.js';

/** One caller's key for one request. */
export interface IdempotencyKey {
  /** Whose key: a hash of the caller's token. */
  scope: Buffer;
  key: string;
  /** The request the key came with (its parameters, the photo by its hash). */
  fingerprint: Buffer;
}

/** A write recorded under a key. */
export interface IdempotentRecord<T> {
  fingerprint: Buffer;
  result: T;
}

/** The key was recorded by another write between this one's lookup and its commit. */
export class KeyTaken extends Error {}

export class IdempotencyStore {
  constructor(
    private readonly sql: Sql,
    /** How long a key answers for its write, seconds. */
    private readonly ttlS: number,
  ) {}

  /** The unexpired write under `k`, if any. */
  async find<T>(k: IdempotencyKey): Promise<IdempotentRecord<T> | undefined> {
    const [row] = await this.sql<{ fingerprint: Buffer; result: T }[]>`
      SELECT fingerprint, result FROM idempotency_keys
      WHERE scope = ${k.scope} AND key = ${k.key} AND created_at > now() - make_interval(secs => ${this.ttlS})`;
    return row ? { fingerprint: row.fingerprint, result: row.result } : undefined;
  }

  /**
   * Records `result` under `k` inside the write's transaction `tx`. An expired key is taken
   * over; a live one (another write committed it first, or holds it uncommitted: then this
   * waits for that one) throws KeyTaken, which rolls the write back.
   */
  async recordIn(tx: TransactionSql, k: IdempotencyKey, result: unknown): Promise<void> {
    const rows = await tx`
      INSERT INTO idempotency_keys (scope, key, fingerprint, result)
      VALUES (${k.scope}, ${k.key}, ${k.fingerprint}, ${tx.json(result as never)})
      ON CONFLICT (scope, key) DO UPDATE
        SET fingerprint = excluded.fingerprint, result = excluded.result, created_at = now()
        WHERE idempotency_keys.created_at <= now() - make_interval(secs => ${this.ttlS})
      RETURNING key`;
    if (rows.length === 0) throw new KeyTaken(`idempotency key ${k.key} was recorded by another write`);
  }

  /** Deletes the expired keys, at most `batch` at a time; returns how many. */
  async prune(batch = 10_000): Promise<number> {
    const rows = await this.sql`
      DELETE FROM idempotency_keys WHERE ctid IN (
        SELECT ctid FROM idempotency_keys WHERE created_at <= now() - make_interval(secs => ${this.ttlS}) LIMIT ${batch})
      RETURNING 1`;
    return rows.length;
  }
}

/** A key sent again with another request: 409, naming the header. */
export function keyReused(key: string): DomainError {
  return new DomainError('CONFLICT', `Idempotency-Key ${JSON.stringify(key)} was used with a different request`, { param: 'idempotency-key' });
}
