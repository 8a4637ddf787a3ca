/**
 * The paging scheme every face listing shares: results by id descending;
 * `maxId`/`minId` are exclusive bounds; with `minId` and a limit, the page is
 * the `limit` results just above `minId` (still listed descending), so
 * following prev_page walks back toward newer results.
 *
 * The rows stream from a cursor on the listing pool (client.ts), so a slow
 * reader holds a listing connection, never one of the pool that serves every
 * other route. The page bounds, the cursor and the links are read in one
 * transaction bound to the caller's tenant, held open while the rows stream.
 */
import type { PendingQuery, Row } from 'postgres';
import { openTransaction, type Binding, type ReplicaRead, type TransactionSql } from './client.js';

export interface Page {
  /** At most this many results; undefined streams every match. */
  limit?: number;
  /** Only ids below this (exclusive). */
  maxId?: number;
  /** Only ids above this (exclusive). */
  minId?: number;
}

/** What a listing produced, known once its stream is consumed. */
export interface PageLinks {
  /** Smallest id listed; more (older) results exist below it. */
  nextMaxId?: number;
  /** Largest id listed; more (newer) results exist above it. */
  prevMinId?: number;
}

export interface Listing<T> {
  /** Batches of results, ids descending; pulls rows from a cursor as it is iterated. */
  batches: AsyncIterable<T[]>;
  /** Call after `batches` is exhausted (they are read as the last batch is, in its transaction). */
  links(): Promise<PageLinks>;
}

export type Fragment = PendingQuery<Row[]>;

export interface PagedQuery<T> {
  /** Ids only, for the page bounds and links: `where` and `order` filled in, `extra` a LIMIT/OFFSET. */
  ids: (sql: TransactionSql, where: Fragment, order: Fragment, extra: Fragment) => Fragment;
  /** The full rows, ids descending. */
  rows: (sql: TransactionSql, where: Fragment) => Fragment;
  /** The id column the bounds apply to. */
  idCol: (sql: TransactionSql) => Fragment;
  map: (r: Row) => T;
  idOf: (t: T) => number;
}

/**
 * A listing of `q` under `page`, through `read` (client.ts `ReplicaRead`), in one transaction bound
 * to `binding`: the page bounds, the cursor and the links on one pool, so that the links describe
 * the rows the listing read (a replica's, when it reads from one) and a listing answers wherever
 * its rows can be read. The first batch is read before the listing is returned: a primary lost in
 * the moment the listing begins is then found while the read waits, and the listing moves to the
 * replica. The transaction ends with the last batch, or when the listing is closed unread.
 */
export async function pagedListing<T>(read: ReplicaRead, binding: Binding, page: Page, batchSize: number, q: PagedQuery<T>): Promise<Listing<T>> {
  return read(
    async (pool) => {
      const open = await openTransaction(pool, binding);
      try {
        const s = open.tx;
        const bounds = (lo?: number, hi?: number) =>
          s`${lo !== undefined ? s`${q.idCol(s)} > ${lo}` : s`true`} AND ${hi !== undefined ? s`${q.idCol(s)} < ${hi}` : s`true`}`;
        let upper = page.maxId;
        const lower = page.minId;
        if (lower !== undefined && page.limit !== undefined) {
          // The page's newest result: the limit-th above minId.
          const [top] = await q.ids(s, bounds(lower, upper), s`ASC`, s`LIMIT 1 OFFSET ${page.limit - 1}`);
          if (top) upper = Number(top.id) + 1;
        }
        const limited = page.limit !== undefined ? s`LIMIT ${page.limit}` : s``;
        const rows = await openCursor(s`${q.rows(s, bounds(lower, upper))} ${limited}`, batchSize);
        let firstId: number | undefined;
        let lastId: number | undefined;
        let links: PageLinks = {};
        const { idOf } = q;
        const linksOfPage = async (): Promise<PageLinks> => {
          if (page.limit === undefined || firstId === undefined || lastId === undefined) return {};
          const [older] = await q.ids(s, bounds(undefined, lastId), s`DESC`, s`LIMIT 1`);
          const [newer] = await q.ids(s, bounds(firstId, undefined), s`ASC`, s`LIMIT 1`);
          return { ...(older ? { nextMaxId: lastId } : {}), ...(newer ? { prevMinId: firstId } : {}) };
        };
        return {
          close: () => {
            rows.close();
            void open.end();
          },
          batches: (async function* () {
            try {
              for await (const batch of rows.batches) {
                const mapped = batch.map(q.map);
                if (mapped.length) {
                  firstId ??= idOf(mapped[0]);
                  lastId = idOf(mapped[mapped.length - 1]);
                }
                yield mapped;
              }
              links = await linksOfPage();
            } finally {
              await open.end();
            }
          })(),
          links: async () => links,
        };
      } catch (err) {
        await open.end();
        throw err;
      }
    },
    (late) => late.close(),
  );
}

/** A query's rows from a cursor whose first batch has been read; `close` ends it unread. */
export interface OpenCursor {
  batches: AsyncIterable<Row[]>;
  close(): void;
}

/** Opens `query`'s cursor and reads its first batch, so that a read waiting for its server waits here. */
export async function openCursor(query: Fragment, batchSize: number): Promise<OpenCursor> {
  const cursor = query.cursor(batchSize)[Symbol.asyncIterator]();
  const first = await cursor.next();
  // postgres.js's cursor answers `return` without a promise; a failed cursor has nothing left to end.
  const end = () => Promise.resolve().then(() => cursor.return?.()).catch(() => {});
  return {
    batches: (async function* () {
      let done = first.done === true;
      try {
        if (done) return;
        yield first.value as Row[];
        for (;;) {
          const next = await cursor.next();
          if (next.done) return void (done = true);
          yield next.value;
        }
      } finally {
        // A reader that stops early (its client went away) ends the cursor, as a for-await over it would.
        if (!done) await end();
      }
    })(),
    close: () => void end(),
  };
}
