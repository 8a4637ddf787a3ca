/**
 * The paging scheme every face listing shares: results by id descending;
 * `maxId`/`minId` are exclusive bounds; with `minId` and a limit, the page is
 * the `limit` results just above `minId` (still listed descending), so
 * following prev_page walks back toward newer results.
 *
 * The rows stream from a cursor on the listing pool (client.ts), so a slow
 * reader holds a listing connection, never one of the pool that serves every
 * other route; the short queries around it (page bounds, links) use that
 * main pool.
 */
import type { PendingQuery, Row } from 'postgres';
import type { Sql } from './client.js';

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
  /** Call after `batches` is exhausted. */
  links(): Promise<PageLinks>;
}

export type Fragment = PendingQuery<Row[]>;

export interface PagedQuery<T> {
  /** Ids only, for the page bounds and links: `where` and `order` filled in, `extra` a LIMIT/OFFSET. */
  ids: (sql: Sql, where: Fragment, order: Fragment, extra: Fragment) => Fragment;
  /** The full rows, ids descending. */
  rows: (sql: Sql, where: Fragment) => Fragment;
  /** The id column the bounds apply to. */
  idCol: (sql: Sql) => Fragment;
  map: (r: Row) => T;
  idOf: (t: T) => number;
}

/**
 * A listing of `q` under `page`, read on `stream`: the cursor and the short queries of the page
 * bounds and links alike, so that the links describe the rows the listing read (a replica's, when
 * `stream` reads from one) and a listing answers wherever its rows can be read.
 */
export async function pagedListing<T>(stream: Sql, page: Page, batchSize: number, q: PagedQuery<T>): Promise<Listing<T>> {
  const bounds = (s: Sql, lo?: number, hi?: number) =>
    s`${lo !== undefined ? s`${q.idCol(s)} > ${lo}` : s`true`} AND ${hi !== undefined ? s`${q.idCol(s)} < ${hi}` : s`true`}`;
  let upper = page.maxId;
  const lower = page.minId;
  if (lower !== undefined && page.limit !== undefined) {
    // The page's newest result: the limit-th above minId.
    const [top] = await q.ids(stream, bounds(stream, lower, upper), stream`ASC`, stream`LIMIT 1 OFFSET ${page.limit - 1}`);
    if (top) upper = Number(top.id) + 1;
  }
  const limited = page.limit !== undefined ? stream`LIMIT ${page.limit}` : stream``;
  const query = stream`${q.rows(stream, bounds(stream, lower, upper))} ${limited}`;
  let firstId: number | undefined;
  let lastId: number | undefined;
  const { idOf } = q;
  const batches = (async function* () {
    for await (const rows of query.cursor(batchSize)) {
      const mapped = rows.map(q.map);
      if (mapped.length) {
        firstId ??= idOf(mapped[0]);
        lastId = idOf(mapped[mapped.length - 1]);
      }
      yield mapped;
    }
  })();
  return {
    batches,
    links: async () => {
      if (page.limit === undefined || firstId === undefined || lastId === undefined) return {};
      const [older] = await q.ids(stream, bounds(stream, undefined, lastId), stream`DESC`, stream`LIMIT 1`);
      const [newer] = await q.ids(stream, bounds(stream, firstId, undefined), stream`ASC`, stream`LIMIT 1`);
      return { ...(older ? { nextMaxId: lastId } : {}), ...(newer ? { prevMinId: firstId } : {}) };
    },
  };
}
