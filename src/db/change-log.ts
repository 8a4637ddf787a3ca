/**
 * The change log the search index follows (002-face-changes.sql): one row per
 * face added, deleted or moved between galleries, in commit order.
 *
 * Writers append in their own transaction with `logChanges`, which takes the
 * change-log lock first and holds it to commit, so positions become visible
 * in position order and "after the last position seen" never skips one. The
 * follower (services/index-sync.ts) reads with `changesAfter`, joined with
 * the faces as they are now, so replaying old entries converges on the
 * current database.
 */
import { bytesToFloats } from './embedding.js';
import type { Sql, TransactionSql } from './client.js';

/**
 * Advisory-lock key of the change log. Taken last, just before the change
 * rows are inserted, and held to commit, so positions commit in position
 * order; being last in every transaction it cannot close a cycle with the
 * other locks.
 */
const CHANGE_LOG_LOCK = 0x66636c67; // "fclg"

/**
 * Ids per INSERT. postgres.js sends at most 65,534 parameters in one
 * statement and each row takes two, so a gallery of any size is logged in
 * several statements of the same transaction.
 */
export const CHANGE_LOG_CHUNK = 10_000;

export type ChangeOp = 'upsert' | 'delete' | 'galleries';

/**
 * Appends one change row per face, in the caller's transaction, after taking
 * the change-log lock; returns the highest position drawn (undefined for no
 * ids). Any number of ids: they go in chunks, in the order given.
 */
export async function logChanges(tx: TransactionSql, faceIds: readonly (number | string)[], op: ChangeOp): Promise<number | undefined> {
  if (faceIds.length === 0) return undefined;
  await tx`SELECT pg_advisory_xact_lock(${CHANGE_LOG_LOCK})`;
  let last: number | undefined;
  for (let from = 0; from < faceIds.length; from += CHANGE_LOG_CHUNK) {
    const rows = faceIds.slice(from, from + CHANGE_LOG_CHUNK).map((id) => ({ face_id: String(id), op }));
    const [top] = await tx`
      WITH added AS (INSERT INTO face_changes ${tx(rows, 'face_id', 'op')} RETURNING position)
      SELECT max(position) AS position FROM added`;
    last = Number(top.position);
  }
  return last;
}

/** The highest position logged so far (0 for an empty log). */
export async function lastPosition(sql: Sql): Promise<number> {
  const [row] = await sql`SELECT coalesce(max(position), 0) AS position FROM face_changes`;
  return Number(row.position);
}

/** One logged change as the follower sees it: the face row read as it is now. */
export type LoggedChange =
  | { position: number; faceId: number; kind: 'gone' }
  | { position: number; faceId: number; kind: 'galleries'; galleries: string[] }
  | { position: number; faceId: number; kind: 'other-model' }
  | { position: number; faceId: number; kind: 'upsert'; embedding: Float32Array; galleries: string[] };

/**
 * Up to `limit` changes after `position`, in order. A change whose face is
 * gone (or that says delete) reads `gone`; a face embedded by a recogniser
 * other than `model` reads `other-model` (its re-embedding logs an upsert
 * later). `galleries` are the face's galleries besides `default`, sorted.
 */
export async function changesAfter(sql: Sql, position: number, limit: number, model: string): Promise<LoggedChange[]> {
  const rows = await sql`
    SELECT c.position, c.face_id, c.op, f.id IS NOT NULL AS present, f.model = ${model} AS current,
      CASE WHEN c.op = 'galleries' OR f.model <> ${model} THEN NULL ELSE f.embedding END AS embedding,
      ARRAY(SELECT m.gallery FROM face_galleries m WHERE m.face_id = c.face_id ORDER BY m.gallery) AS galleries
    FROM face_changes c LEFT JOIN faces f ON f.id = c.face_id
    WHERE c.position > ${position}
    ORDER BY c.position
    LIMIT ${limit}`;
  return rows.map((r): LoggedChange => {
    const at = { position: Number(r.position), faceId: Number(r.face_id) };
    if (!r.present || r.op === 'delete') return { ...at, kind: 'gone' };
    const galleries = r.galleries as string[];
    if (r.op === 'galleries') return { ...at, kind: 'galleries', galleries };
    if (!r.current) return { ...at, kind: 'other-model' };
    return { ...at, kind: 'upsert', embedding: bytesToFloats(r.embedding as Buffer), galleries };
  });
}
