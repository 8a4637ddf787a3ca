/**
 * The database side of re-embedding stored faces after a recogniser switch
 * (004-embedding-model.sql): which faces still carry another recogniser's
 * embedding, writing their new one, and recording those whose photo cannot be
 * re-embedded.
 *
 * Progress lives in the rows themselves: a face is pending while its model
 * differs from the target and no failure is recorded for it under that
 * target. Each batch commits whole, so a restart after a crash continues
 * from the last commit; nothing here deletes a face.
 */
import type { PendingQuery, Row } from 'postgres';
import { transaction, type Sql, type TransactionSql } from './client.js';
import { logChanges } from './change-log.js';
import { floatsToBytes } from './embedding.js';

/** The recogniser of every face stored before faces recorded theirs (and of search snapshots from then). */
export const FIRST_RECOGNIZER = 'faceres';

export interface PendingFace {
  id: number;
  photoHash: string;
  /** [x1, y1, x2, y2] as stored. */
  box: [number, number, number, number];
}

/** The outcome for one face: its new embedding, or why its photo could not give one. */
export type Reembedding = { id: number; embedding: Float32Array } | { id: number; reason: string };

export interface ReembedCensus {
  /** Recognisers of the faces not yet at the target (pending or failed). */
  from: string[];
  /** Faces whose embedding is the target's. */
  done: number;
  /** Faces still to re-embed. */
  pending: number;
  /** Faces recorded as failed for the target. */
  failed: number;
  total: number;
}

export interface ReembedWrite {
  /** Faces whose embedding was replaced (a face changed meanwhile by someone else is left out). */
  saved: number;
  /** Failures recorded (faces deleted meanwhile are left out). */
  failed: number;
  /** Last change-log position written, when any face was saved. */
  position?: number;
}

/** `model` differs from `target`, written as two ranges so the faces_model index serves it. */
function otherThan(sql: Sql | TransactionSql, column: PendingQuery<Row[]>, target: string) {
  return sql`(${column} < ${target} OR ${column} > ${target})`;
}

/** Re-embedding works through every tenant's faces: each statement runs under its bypass. */
export class ReembedStore {
  constructor(private readonly sql: Sql) {}

  private run<T>(fn: (tx: TransactionSql) => Promise<T>): Promise<T> {
    return transaction(this.sql, 're-embedding', fn);
  }

  /** Whether any face was embedded by a recogniser other than `target`; an index probe, cheap at every start. */
  async anyOther(target: string): Promise<boolean> {
    const [row] = await this.run((sql) => sql`SELECT EXISTS (SELECT 1 FROM faces f WHERE ${otherThan(sql, sql`f.model`, target)}) AS found`);
    return row.found as boolean;
  }

  /** Counts for progress reports; reads every face, so only asked when `anyOther` says there is work. */
  async census(target: string): Promise<ReembedCensus> {
    const [row] = await this.run(
      (sql) => sql`
        SELECT count(*) AS total,
          count(*) FILTER (WHERE f.model = ${target}) AS done,
          count(*) FILTER (WHERE f.model <> ${target} AND r.face_id IS NULL) AS pending,
          count(*) FILTER (WHERE f.model <> ${target} AND r.face_id IS NOT NULL) AS failed,
          coalesce(array_agg(DISTINCT f.model ORDER BY f.model) FILTER (WHERE f.model <> ${target}), '{}') AS models
        FROM faces f LEFT JOIN reembed_failures r ON r.face_id = f.id AND r.model = ${target}`,
    );
    return {
      from: row.models as string[],
      done: Number(row.done),
      pending: Number(row.pending),
      failed: Number(row.failed),
      total: Number(row.total),
    };
  }

  /** Up to `limit` pending faces with ids above `afterId`, in id order. */
  async pending(target: string, afterId: number, limit: number): Promise<PendingFace[]> {
    const rows = await this.run(
      (sql) => sql`
        SELECT f.id, f.photo_hash, f.x1, f.y1, f.x2, f.y2
        FROM faces f
        WHERE f.id > ${afterId} AND ${otherThan(sql, sql`f.model`, target)}
          AND NOT EXISTS (SELECT 1 FROM reembed_failures r WHERE r.face_id = f.id AND r.model = ${target})
        ORDER BY f.id
        LIMIT ${limit}`,
    );
    return rows.map((r) => ({ id: Number(r.id), photoHash: r.photo_hash as string, box: [r.x1, r.y1, r.x2, r.y2] }));
  }

  /**
   * Writes one batch in one transaction: each new embedding replaces the old
   * one (embedding, dim, model) and logs an `upsert` for the search index;
   * each failure is recorded under `target`. Only faces still made by another
   * recogniser are touched, so a face re-embedded meanwhile by another
   * instance, or deleted, is skipped rather than overwritten or resurrected.
   */
  async save(target: string, batch: Reembedding[]): Promise<ReembedWrite> {
    // Ascending ids: face rows are locked in the order every writer uses.
    const ordered = [...batch].sort((a, b) => a.id - b.id);
    return this.run(async (tx) => {
      const saved: string[] = [];
      let failed = 0;
      for (const r of ordered) {
        if ('embedding' in r) {
          const rows = await tx`
            UPDATE faces SET embedding = ${floatsToBytes(r.embedding)}, dim = ${r.embedding.length}, model = ${target}
            WHERE id = ${r.id} AND model <> ${target}
            RETURNING id`;
          if (rows.length) saved.push(rows[0].id as string);
        } else {
          // KEY SHARE waits out a concurrent delete of the face and then skips it, instead of failing the foreign key.
          const rows = await tx`
            INSERT INTO reembed_failures (face_id, model, reason)
            SELECT id, ${target}, ${r.reason} FROM faces WHERE id = ${r.id} AND model <> ${target} FOR KEY SHARE
            ON CONFLICT (face_id) DO UPDATE SET model = excluded.model, reason = excluded.reason, failed_at = now()
            RETURNING face_id`;
          failed += rows.length;
        }
      }
      const position = await logChanges(tx, saved, 'upsert');
      return { saved: saved.length, failed, position };
    });
  }
}
