/**
 * The Postgres connection pool, and the one place that knows how to close it.
 *
 * Queries are tagged templates only (parameters never spliced into SQL text);
 * the migration files are the one exception, read from disk and run whole.
 *
 * Two pools: `sql` for requests that hold a connection for one query or one
 * transaction, and a small `stream` pool for listings that stream from a
 * cursor. A streaming listing holds its connection for as long as its client
 * takes to read the answer, so slow readers may exhaust `stream`, but they
 * never take a connection every other database route needs.
 *
 * Both connect as the role row-level security binds (018-row-level-security.sql):
 * a statement sees the rows of the tenant its transaction names through
 * `transaction`, or, under a named bypass, every tenant's; outside both, none.
 * A third, small pool connects as the tables' owner for schema work alone.
 */
import postgres from 'postgres';
import type { TenantId } from '../auth.js';
import { DomainError } from '../errors.js';
import type { Logger } from '../log.js';

export type Sql = postgres.Sql;
export type TransactionSql = postgres.TransactionSql;

declare const owned: unique symbol;
/** Connections as the tables' owner (`Database.owner`): what schema work takes, so no pool of the tenant role is handed to it. */
export type OwnerSql = Sql & { readonly [owned]: true };

/**
 * Runs a read that wants what is committed now: on the primary, or, with a
 * replica, on it while the primary is lost (read-replica.ts `fresh`). Stores
 * take one for the reads a request cannot do without (a face by id, a token).
 * `found` says whether an answer holds everything asked for: one from the
 * replica that does not (a face, a token, a gallery it lacks) may only be
 * behind, and the primary is asked instead (its answer awaited, or its
 * failure passed on as the retryable 503), so that a lost primary never
 * makes something that exists answer as missing.
 */
export type FreshRead = <T>(read: (sql: Sql) => Promise<T>, found: (answer: T) => boolean) => Promise<T>;

/** The fresh reads of a deployment without a replica: the primary, however long it takes. */
export const onPrimary =
  (sql: Sql): FreshRead =>
  (read) =>
    read(sql);

/**
 * Runs a read that may be behind by the replica's lag bound (listings, history searches, person
 * views): on the replica while it is within the bound, else on the primary's listing pool, and
 * on the replica once a measurement finds the primary lost while the read waits for it
 * (read-replica.ts `read`). `discard` releases an answer the primary gives after the read has
 * been answered by the replica (a listing's open cursor).
 */
export type ReplicaRead = <T>(read: (sql: Sql) => Promise<T>, discard?: (late: T) => void) => Promise<T>;

/** The reads of a deployment without a replica: all on `sql`. */
export const onPool =
  (sql: Sql): ReplicaRead =>
  (read) =>
    read(sql);

/** The role of every pooled connection: row-level security binds it to the tenant its transaction names. */
export const TENANT_ROLE = 'face_tenant';

/** The role of the named bypass, which reads and writes every tenant's rows. */
const DEPLOYMENT_ROLE = 'face_deployment';

/**
 * Work that reads or writes across tenants, by name: the only transactions that take the bypass
 * (docs/architecture.md says what each is for).
 */
export type AcrossTenants =
  | 'authentication'
  | 'search index'
  | 'administration'
  | 'history retention'
  | 'photo collection'
  | 're-embedding';

/** What a transaction's statements are bound to: one tenant's rows, or a named bypass. */
export type Binding = TenantId | AcrossTenants;

export interface DatabaseOptions {
  url: string;
  /** Pool size; each in-flight store request holds at most one connection. */
  max?: number;
  /** Size of the listing pool; a listing beyond it waits for a reader ahead of it to finish. */
  streamMax?: number;
  log?: Logger;
}

/** Connections for streamed listings unless told otherwise. */
export const STREAM_POOL = 4;

export interface Database {
  /** The server's URL, for a connection of its own beside the pools (read-replica.ts's probe). */
  readonly url: string;
  readonly sql: Sql;
  /** The pool for cursors that stream into responses (see the module comment). */
  readonly stream: Sql;
  /**
   * The tables' owner, outside row-level security: migrations, the history's partitions (schema
   * changes) and the server's statistics of this process's sessions; never a tenant's rows.
   */
  readonly owner: OwnerSql;
  /** Each pool's name as the server sees it (application_name) and its size. */
  readonly pools: ReadonlyArray<{ pool: 'main' | 'listings'; applicationName: string; max: number }>;
  /** Lets running queries finish for up to `timeoutS` seconds, then drops the connections. */
  close(timeoutS?: number): Promise<void>;
}

/**
 * A pool of connections to `url` taking the tenant role, or, with `asOwner`, the login role
 * itself. A connection is only opened by its first query, so a pool made before the migration
 * that creates the role (018) is usable once it has run.
 */
export function openPool(url: string, opts: { max: number; name: string; asOwner?: boolean; log?: Logger }): Sql {
  return postgres(url, {
    max: opts.max,
    // Idle connections are released so a quiet service holds few backends.
    idle_timeout: 60,
    connect_timeout: 10,
    connection: { application_name: opts.name, ...(opts.asOwner ? {} : { role: TENANT_ROLE }) },
    // Notices (e.g. "relation already exists, skipping") are not problems.
    onnotice: (notice) => opts.log?.debug({ notice: notice.message }, 'postgres notice'),
  });
}

export function connect({ url, max = 10, streamMax = STREAM_POOL, log }: DatabaseOptions): Database {
  const pool = (size: number, name: string, asOwner = false) => openPool(url, { max: size, name, asOwner, log });
  // The process id tells this process's connections apart from another node's on the same server.
  const pools = [
    { pool: 'main' as const, applicationName: `face-service[${process.pid}]`, max },
    { pool: 'listings' as const, applicationName: `face-service-listings[${process.pid}]`, max: streamMax },
  ];
  const sql = pool(max, pools[0].applicationName);
  const stream = pool(streamMax, pools[1].applicationName);
  const owner = pool(2, `face-service-owner[${process.pid}]`, true) as OwnerSql;
  let closing: Promise<void> | undefined;
  return {
    url,
    sql,
    stream,
    owner,
    pools,
    close(timeoutS = 5) {
      closing ??= Promise.all([sql, stream, owner].map((p) => p.end({ timeout: timeoutS }))).then(() => {});
      return closing;
    },
  };
}

export interface PoolUsage {
  pool: string;
  max: number;
  /** Open connections by server-side state (active, idle, idle in transaction, ...). */
  connections: Record<string, number>;
}

/**
 * How many connections each pool holds open and what they are doing, as the
 * server reports them (pg_stat_activity): the client library keeps its own
 * counts private. Asked as the login role, the only one that sees its own
 * sessions' states (the tenant role sees them as insufficient privilege).
 */
export async function poolUsage(db: Database): Promise<PoolUsage[]> {
  const names = db.pools.map((p) => p.applicationName);
  const rows = await db.owner<Array<{ name: string; state: string | null; n: number }>>`
    SELECT application_name AS name, state, count(*)::int AS n
    FROM pg_stat_activity WHERE application_name IN ${db.owner(names)}
    GROUP BY 1, 2`;
  return db.pools.map((p) => ({
    pool: p.pool,
    max: p.max,
    connections: Object.fromEntries(rows.filter((r) => r.name === p.applicationName).map((r) => [r.state ?? 'unknown', r.n])),
  }));
}

/** Postgres SQLSTATE of a failed query, if it is one. */
export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** Codes after which a transaction can simply be run again. */
const RETRYABLE = new Set(['40001', '40P01']);

/**
 * Binds the statements of `tx` that follow: to one tenant's rows (the setting the policies read),
 * or, for a named bypass, to every tenant's (its role). The one place either is done.
 */
export async function bind(tx: TransactionSql, binding: Binding): Promise<void> {
  if (typeof binding === 'number') await tx`SELECT set_config('face.tenant', ${String(binding)}, true)`;
  else await tx`SET LOCAL ROLE ${tx(DEPLOYMENT_ROLE)}`;
}

/**
 * Runs `fn` in a transaction bound to `binding` (see `bind`), again (a few times) when Postgres
 * aborted it as a deadlock victim or a serialization failure. `fn` must be safe to repeat.
 */
export async function transaction<T>(sql: Sql, binding: Binding, fn: (tx: TransactionSql) => Promise<T>, attempts = 4): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return (await sql.begin((tx) =>
        // Sent with `fn`'s first statement rather than a round trip ahead of it: the statements of a
        // transaction run in the order they are made, and a failed binding aborts those after it.
        Promise.all([bind(tx, binding), fn(tx)]).then(([, answer]) => answer),
      )) as T;
    } catch (err) {
      if (i >= attempts || !RETRYABLE.has(sqlState(err) ?? '')) throw err;
      await new Promise((r) => setTimeout(r, 5 * i + Math.random() * 10));
    }
  }
}

/** A bound transaction held open by its caller; `end` commits it (a failed one is rolled back, quietly). */
export interface OpenTransaction {
  tx: TransactionSql;
  end(): Promise<void>;
}

/**
 * Begins a transaction bound to `binding` that stays open until `end`: a listing streams its rows
 * from a cursor inside one, for as long as its reader takes (paging.ts).
 */
export function openTransaction(sql: Sql, binding: Binding): Promise<OpenTransaction> {
  return new Promise((resolve, reject) => {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let opened = false;
    const settled: Promise<unknown> = sql.begin(async (tx) => {
      await bind(tx, binding);
      opened = true;
      resolve({ tx, end: () => (release(), settled.then(() => {}, () => {})) });
      await released;
    });
    settled.catch((err) => {
      if (!opened) reject(err);
    });
  });
}

/**
 * What a lost or demoted primary looks like to a query: the server shutting down or refusing
 * connections (57P01-57P03), a connection that broke (08xxx), a write reaching a server that
 * is now read-only (25006), and the client library's and the network's own codes for a
 * connection closed, refused, reset or timed out.
 */
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '08000', '08001', '08003', '08004', '08006', '25006']);
const UNAVAILABLE_CONNECTION = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/**
 * A query that failed because the database is gone for the moment (a restart, a failover) as
 * the domain error a client may retry: 503 SERVICE_UNAVAILABLE with Retry-After. A write
 * that failed so did not commit, or committed without its answer: the client's retry, with
 * the same Idempotency-Key, tells which. Anything else: undefined.
 */
export function databaseUnavailable(err: unknown): DomainError | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !(UNAVAILABLE_STATES.has(code) || UNAVAILABLE_CONNECTION.has(code))) return undefined;
  return new DomainError('SERVICE_UNAVAILABLE', 'The database is unavailable for the moment (a restart or a failover); retry shortly', {
    retryAfterS: 1,
    cause: err,
  });
}
