/**
 * The change log the search index follows (002-face-changes.sql): one row per
 * face added, deleted or moved between galleries, in commit order.
 *
 * Writers append in their own transaction with `logChanges`, which takes the
 * change-log lock first and holds it to commit, so positions become visible
 * in position order and "after the last position seen" never skips one. The
 * follower (search/index-sync.ts) reads with `changesAfter`, joined with
 * the faces as they are now, so replaying old entries converges on the
 * current database.
 *
 * Each row carries the search shard of its face (009-change-log-shard.sql),
 * so a shard server holding some of the shards reads only their rows; the
 * log stays one ordered stream, read through a filter.
 *
 * The log is pruned (`pruneChanges`) below what every search shard's durable
 * snapshot covers, so it does not grow without bound and a restart replays
 * only the recent tail. A shard that needs an older position is refilled from
 * the faces table (`scanFaces`) and replays the log after the scan.
 */
import type { Row } from 'postgres';
import { bind, transaction, type Sql, type TransactionSql } from './client.js';
import { bytesToFloats } from './embedding.js';
import { shardOfFace } from './layout.js';

/**
 * Advisory-lock key of the change log. Taken last, just before the change
 * rows are inserted, and held to commit, so positions commit in position
 * order; being last in every transaction it cannot close a cycle with the
 * other locks.
 */
const CHANGE_LOG_LOCK = 0x66636c67; // "fclg"

/**
 * Ids per INSERT. postgres.js sends at most 65,534 parameters in one
 * statement and each row takes three, so a gallery of any size is logged in
 * several statements of the same transaction.
 */
export const CHANGE_LOG_CHUNK = 10_000;

export type ChangeOp = 'upsert' | 'delete' | 'galleries';

/** PostgreSQL's type ids of `integer` and `bigint`, for array parameters (shard numbers, face ids). */
const INT4 = 23;
const INT8 = 20;

/**
 * Appends one change row per face, in the caller's transaction, after taking
 * the change-log lock; returns the highest position drawn (undefined for no
 * ids). Any number of ids: they go in chunks, in the order given. Each row
 * carries its face's shard by the deployment's layout (search_layout); with
 * no layout recorded yet, none, and every shard server reads the row.
 */
export async function logChanges(tx: TransactionSql, faceIds: readonly (number | string)[], op: ChangeOp): Promise<number | undefined> {
  if (faceIds.length === 0) return undefined;
  const [lock] = await tx<{ shards: number | null }[]>`
    SELECT pg_advisory_xact_lock(${CHANGE_LOG_LOCK}), (SELECT shards FROM search_layout) AS shards`;
  const shards = lock.shards;
  let last: number | undefined;
  for (let from = 0; from < faceIds.length; from += CHANGE_LOG_CHUNK) {
    const rows = faceIds
      .slice(from, from + CHANGE_LOG_CHUNK)
      .map((id) => ({ face_id: String(id), op, shard: shards === null ? null : shardOfFace(id, shards) }));
    const [top] = await tx`
      WITH added AS (INSERT INTO face_changes ${tx(rows, 'face_id', 'op', 'shard')} RETURNING position)
      SELECT max(position) AS position FROM added`;
    last = Number(top.position);
  }
  // Delivered at commit, to every process following the log (shard servers): they read it
  // at once instead of at their next poll.
  await tx`SELECT pg_notify(${CHANGE_CHANNEL}, ${String(last)})`;
  return last;
}

/** The LISTEN/NOTIFY channel on which every commit that logged changes announces its last position. */
export const CHANGE_CHANNEL = 'face_changes';

/**
 * Calls `onChange` with the last position of every commit that logs changes,
 * from now on, over a connection of its own that postgres.js re-opens after a
 * drop. Notifications are a hint: one missed while reconnecting is found by
 * the follower's poll. Resolves to the function that stops listening.
 */
export async function listenForChanges(sql: Sql, onChange: (position: number) => void): Promise<() => Promise<void>> {
  const { unlisten } = await sql.listen(CHANGE_CHANNEL, (payload) => onChange(Number(payload)));
  return unlisten;
}

/** The highest position logged so far (0 for an empty log), pruned rows included. */
export async function lastPosition(sql: Sql | TransactionSql): Promise<number> {
  const [row] = await sql`
    SELECT greatest((SELECT coalesce(max(position), 0) FROM face_changes), (SELECT pruned_through FROM face_changes_horizon)) AS position`;
  return Number(row.position);
}

/** Positions at or below this may have been pruned from the log (0: none). */
export async function prunedThrough(sql: Sql): Promise<number> {
  const [row] = await sql`SELECT pruned_through FROM face_changes_horizon`;
  return Number(row.pruned_through);
}

/** Rows deleted per statement, so pruning a long log never holds one long transaction. */
const PRUNE_CHUNK = 10_000;

/**
 * Deletes the log rows at or below `through`, which every search shard's
 * snapshot must already cover. The horizon is raised first, in its own
 * commit, so no reader meets a gap it cannot explain. Returns the rows deleted.
 */
export async function pruneChanges(sql: Sql, through: number): Promise<number> {
  await sql`UPDATE face_changes_horizon SET pruned_through = greatest(pruned_through, ${through})`;
  let deleted = 0;
  for (;;) {
    const result = await sql`
      DELETE FROM face_changes WHERE position IN (
        SELECT position FROM face_changes WHERE position <= ${through} ORDER BY position LIMIT ${PRUNE_CHUNK})`;
    deleted += result.count;
    if (result.count < PRUNE_CHUNK) return deleted;
  }
}

/**
 * The search scopes of face row `f`, as tenants.ts `scopeKey` spells them: its tenant's, then its tenant's
 * name for each gallery it is in besides `default`, sorted. Searches filter by one of them.
 */
const scopesOf = (sql: Sql | TransactionSql) => sql`
  ARRAY['t' || f.tenant_id] || ARRAY(SELECT 't' || m.tenant_id || '/' || m.gallery FROM face_galleries m WHERE m.face_id = f.id ORDER BY m.gallery)`;

/** One page of a face scan for the search index: row k of `vectors` is face `ids[k]`. */
export interface FacePage {
  ids: Float64Array;
  vectors: Float32Array;
  /** Each face's search scopes (`scopesOf`). */
  galleries: string[][];
}

/** Which shards a scan reads: `only` of the deployment's `count` shards. */
export interface ShardFilter {
  count: number;
  only: readonly number[];
}

/**
 * Reads every face embedded by `model` with `dims`-sized embeddings, in id
 * order, `pageSize` at a time, from one consistent database snapshot; resolves
 * to the change position that snapshot reflects, so replaying the log after
 * it brings the scanned faces current. Positions commit in order (the
 * change-log lock), so the highest one visible has every lower one visible.
 *
 * With `shards`, only the faces of those shards: each page's ids are read
 * first and routed here (faces carry no shard column, and SQL cannot compute
 * the rule), then the embeddings of those kept, so refilling one shard of
 * several reads the others' ids but not their embeddings. Pages then hold
 * fewer faces, none when the page of ids had none of them.
 */
export async function scanFaces(
  sql: Sql,
  model: string,
  dims: number,
  pageSize: number,
  onPage: (page: FacePage) => Promise<void>,
  shards?: ShardFilter,
): Promise<number> {
  return sql.begin('ISOLATION LEVEL REPEATABLE READ READ ONLY', async (tx) => {
    await bind(tx, 'search index');
    const position = await lastPosition(tx);
    const columns = tx`f.id, f.embedding, ${scopesOf(tx)} AS galleries`;
    let after = '0';
    for (;;) {
      let rows;
      let read: number;
      if (shards === undefined) {
        rows = await tx`
          SELECT ${columns} FROM faces f
          WHERE f.model = ${model} AND f.id > ${after} AND length(f.embedding) = ${dims * 4}
          ORDER BY f.id
          LIMIT ${pageSize}`;
        read = rows.length;
        if (read) after = String(rows[read - 1].id);
      } else {
        const ids = await tx<{ id: string }[]>`
          SELECT f.id FROM faces f
          WHERE f.model = ${model} AND f.id > ${after} AND length(f.embedding) = ${dims * 4}
          ORDER BY f.id
          LIMIT ${pageSize}`;
        read = ids.length;
        if (read) after = ids[read - 1].id;
        const kept = ids.map((r) => r.id).filter((id) => shards.only.includes(shardOfFace(id, shards.count)));
        rows = kept.length ? await tx`SELECT ${columns} FROM faces f WHERE f.id = ANY(${tx.array(kept, INT8)}) ORDER BY f.id` : [];
      }
      if (rows.length > 0) {
        const page: FacePage = { ids: new Float64Array(rows.length), vectors: new Float32Array(rows.length * dims), galleries: [] };
        rows.forEach((r, k) => {
          page.ids[k] = Number(r.id);
          page.vectors.set(bytesToFloats(r.embedding as Buffer), k * dims);
          page.galleries.push(r.galleries as string[]);
        });
        await onPage(page);
      }
      if (read < pageSize) return position;
    }
  });
}

/**
 * One logged change as the follower sees it: the face row read as it is now.
 * `elsewhere` is read only for its position: the newest row of the log, of a
 * shard not asked for (see `changesAfter`).
 */
export type LoggedChange =
  | { position: number; faceId: number; kind: 'elsewhere' }
  | { position: number; faceId: number; kind: 'gone' }
  | { position: number; faceId: number; kind: 'galleries'; galleries: string[] }
  | { position: number; faceId: number; kind: 'other-model' }
  | { position: number; faceId: number; kind: 'upsert'; embedding: Float32Array; galleries: string[] };

/**
 * Up to `limit` changes after `position`, in order. A change whose face is
 * gone (or that says delete) reads `gone`; a face embedded by a recogniser
 * other than `model` reads `other-model` (its re-embedding logs an upsert
 * later). `galleries` are the face's search scopes (`scopesOf`).
 *
 * With `shards`, only the rows of those shards are read, and the rows without
 * a shard (logged before the log had one, or before the layout was recorded).
 * When they fall short of `limit` the read has reached the end of the log;
 * if the newest row is then of another shard, it ends the answer as
 * `elsewhere`, so the follower moves to the end of the log rather than stop
 * at its own last row: it does not look behind, and its snapshots, and the
 * pruning that waits for them, keep up. It is read in the same statement,
 * so it is the end the rows were read up to: every lower position had
 * committed (the change-log lock), so no row of the shards asked for below
 * it is missing.
 */
export function changesAfter(sql: Sql, position: number, limit: number, model: string, shards?: readonly number[]): Promise<LoggedChange[]> {
  // Every tenant's faces: read under a tenant's binding, another's would read as gone.
  return transaction(sql, 'search index', (tx) => changesIn(tx, position, limit, model, shards));
}

async function changesIn(sql: TransactionSql, position: number, limit: number, model: string, shards?: readonly number[]): Promise<LoggedChange[]> {
  const columns = sql`
    c.position, c.face_id, c.op, f.id IS NOT NULL AS present, f.model = ${model} AS current,
    CASE WHEN c.op = 'galleries' OR f.model <> ${model} THEN NULL ELSE f.embedding END AS embedding,
    ${scopesOf(sql)} AS galleries`;
  if (shards === undefined) {
    const rows = await sql`
      SELECT ${columns}
      FROM face_changes c LEFT JOIN faces f ON f.id = c.face_id
      WHERE c.position > ${position}
      ORDER BY c.position
      LIMIT ${limit}`;
    return rows.map(loggedChange);
  }
  // The page beside the newest row of the log: one row even when the page is empty (none for an empty log).
  const rows = await sql`
    SELECT h.position AS head, h.face_id AS head_face, c.*
    FROM (SELECT position, face_id FROM face_changes ORDER BY position DESC LIMIT 1) h
    LEFT JOIN LATERAL (
      SELECT ${columns}
      FROM face_changes c LEFT JOIN faces f ON f.id = c.face_id
      WHERE c.position > ${position} AND (c.shard IS NULL OR c.shard = ANY(${sql.array([...shards], INT4)}))
      ORDER BY c.position
      LIMIT ${limit}
    ) c ON true
    ORDER BY c.position`;
  const page = rows.filter((r) => r.position !== null).map(loggedChange);
  const reached = page.length ? page[page.length - 1].position : position;
  const head = rows.length ? Number(rows[0].head) : 0;
  if (page.length < limit && head > reached) page.push({ position: head, faceId: Number(rows[0].head_face), kind: 'elsewhere' });
  return page;
}

function loggedChange(r: Row): LoggedChange {
  const at = { position: Number(r.position), faceId: Number(r.face_id) };
  if (!r.present || r.op === 'delete') return { ...at, kind: 'gone' };
  const galleries = r.galleries as string[];
  if (r.op === 'galleries') return { ...at, kind: 'galleries', galleries };
  if (!r.current) return { ...at, kind: 'other-model' };
  return { ...at, kind: 'upsert', embedding: bytesToFloats(r.embedding as Buffer), galleries };
}
