/**
 * The Postgres connection pool, and the one place that knows how to close it.
 *
 * Queries are tagged templates only (parameters never spliced into SQL text);
 * the migration files are the one exception, read from disk and run whole.
 */
import postgres from 'postgres';
import type { Logger } from '../log.js';

export type Sql = postgres.Sql;
export type TransactionSql = postgres.TransactionSql;

export interface DatabaseOptions {
  url: string;
  /** Pool size; each in-flight store request holds at most one connection. */
  max?: number;
  log?: Logger;
}

export interface Database {
  readonly sql: Sql;
  /** Lets running queries finish for up to `timeoutS` seconds, then drops the connections. */
  close(timeoutS?: number): Promise<void>;
}

export function connect({ url, max = 10, log }: DatabaseOptions): Database {
  const sql = postgres(url, {
    max,
    // Idle connections are released so a quiet service holds few backends.
    idle_timeout: 60,
    connect_timeout: 10,
    connection: { application_name: 'face-service' },
    // Notices (e.g. "relation already exists, skipping") are not problems.
    onnotice: (notice) => log?.debug({ notice: notice.message }, 'postgres notice'),
  });
  let closing: Promise<void> | undefined;
  return {
    sql,
    close(timeoutS = 5) {
      closing ??= sql.end({ timeout: timeoutS });
      return closing;
    },
  };
}

/** Postgres SQLSTATE of a failed query, if it is one. */
export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** Codes after which a transaction can simply be run again. */
const RETRYABLE = new Set(['40001', '40P01']);

/**
 * Runs `fn` in a transaction, again (a few times) when Postgres aborted it as
 * a deadlock victim or a serialization failure. `fn` must be safe to repeat.
 */
export async function transaction<T>(sql: Sql, fn: (tx: TransactionSql) => Promise<T>, attempts = 4): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return (await sql.begin((tx) => fn(tx))) as T;
    } catch (err) {
      if (i >= attempts || !RETRYABLE.has(sqlState(err) ?? '')) throw err;
      await new Promise((r) => setTimeout(r, 5 * i + Math.random() * 10));
    }
  }
}
