/**
 * Monthly partitions of the camera history (007-sightings-partitioned.sql).
 *
 * `sightings` is partitioned by range of seen_at into UTC calendar months,
 * `sightings_YYYY_MM`, with a default partition for rows whose month has no
 * partition yet. Two maintenance steps keep it that way:
 *
 * - ensureSightingPartitions creates the months ahead of time, so rows land
 *   in their own month and not in the default partition, and gives a month
 *   of its own to any rows that did land there (they are moved, keeping their
 *   ids).
 * - detachSightingPartitionsBefore detaches whole old months. A detached
 *   month is an ordinary table, no longer read by history searches, that an
 *   operator can dump and drop; the thumbnails of its sightings go with it
 *   into `<month>_thumbnails`.
 *
 * Both take an ACCESS EXCLUSIVE lock on sightings for a moment (creating or
 * detaching a partition), so they wait at most `lockTimeoutMs` for it: a long
 * streamed history listing holds a lock that would otherwise make every new
 * history query queue behind the waiting step. A step that times out throws
 * (SQLSTATE 55P03) and changes nothing; run it again later.
 *
 * Both change the schema, so they run on the tables' owner (client.ts
 * `Database.owner`), which row-level security does not bind: its
 * transactions take no tenant.
 */
import type { OwnerSql, Sql, TransactionSql } from './client.js';

/** Arbitrary constant identifying "sightings partition maintenance" among advisory locks. */
const PARTITION_LOCK = 7_461_832_190_447_007n;

/** How long a step waits for its lock on sightings before giving up. */
const LOCK_TIMEOUT_MS = 5000;

export interface SightingPartition {
  name: string;
  /** Inclusive lower bound. */
  from: Date;
  /** Exclusive upper bound. */
  to: Date;
}

export interface DetachedPartition extends SightingPartition {
  /** The standalone table holding the thumbnails of the detached sightings. */
  thumbnails: string;
}

export interface EnsureOptions {
  /** The clock; the current time when absent. */
  now?: Date;
  /** Months after the current one to create (default 3). */
  monthsAhead?: number;
  /** Also every month from this one's up to the current one (a backfill). */
  since?: Date;
  lockTimeoutMs?: number;
}

export interface DetachOptions {
  /** The clock; the current time when absent. */
  now?: Date;
  /** Thumbnails moved per transaction before the detach (default 5000). */
  batch?: number;
  lockTimeoutMs?: number;
}

const monthStart = (d: Date, add = 0) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + add, 1));

/** The attached monthly (range) partitions, oldest first; the default partition is not listed. */
export async function listSightingPartitions(sql: Sql | TransactionSql): Promise<SightingPartition[]> {
  const rows = await sql`SELECT partition_name, lo, hi FROM sightings_partition_bounds() ORDER BY lo`;
  return rows.map((r) => ({ name: r.partition_name as string, from: r.lo as Date, to: r.hi as Date }));
}

/**
 * Creates the partitions of the current month and of `monthsAhead` months
 * after it (and of every month since `since`, when given), plus one for
 * every month that has rows in the default partition, moving those rows into
 * it. Months already covered, and months detached but not yet dropped, are
 * left alone. Returns the partitions created. Idempotent; concurrent callers
 * (several service nodes) take turns on an advisory lock.
 */
export async function ensureSightingPartitions(owner: OwnerSql, opts: EnsureOptions = {}): Promise<string[]> {
  const now = opts.now ?? new Date();
  const ahead = opts.monthsAhead ?? 3;
  if (!Number.isInteger(ahead) || ahead < 0) throw new RangeError(`monthsAhead must be a whole number >= 0, not ${ahead}`);
  const first = opts.since && opts.since < now ? monthStart(opts.since) : monthStart(now);
  const last = monthStart(now, ahead);
  const months: string[] = [];
  for (let m = first; m <= last; m = monthStart(m, 1)) months.push(m.toISOString());
  return owner.begin(async (tx) => {
    await lockMaintenance(tx, opts.lockTimeoutMs);
    const rows = await tx`SELECT name FROM sightings_add_partitions(${months}::timestamptz[]) AS name`;
    return rows.map((r) => r.name as string);
  });
}

/**
 * Detaches every monthly partition that ends on or before `before`, never
 * the current month or a later one, and returns them oldest first. Each
 * becomes a standalone table of the same name (its indexes and checks kept,
 * the append-only trigger gone), no longer part of history searches, counts
 * or friend windows; the thumbnails of its sightings are moved to
 * `<name>_thumbnails`. Archive both, then drop them. Rows of those months
 * that sit in the default partition stay in the history.
 *
 * The thumbnails move first, in batches, while the month is still attached,
 * so the lock on sightings is held only for the detach itself (and for
 * moving thumbnails of sightings added to that month meanwhile). Stopped
 * halfway, the history is consistent (the month's thumbnails read as
 * expired) and a second call completes it.
 */
export async function detachSightingPartitionsBefore(owner: OwnerSql, before: Date, opts: DetachOptions = {}): Promise<DetachedPartition[]> {
  const cutoff = Math.min(before.getTime(), monthStart(opts.now ?? new Date()).getTime());
  const batch = opts.batch ?? 5000;
  const old = (await listSightingPartitions(owner)).filter((p) => p.to.getTime() <= cutoff);
  const detached: DetachedPartition[] = [];
  for (const p of old) {
    const thumbnails = `${p.name}_thumbnails`;
    await owner`CREATE TABLE IF NOT EXISTS ${owner(thumbnails)} (LIKE sighting_thumbnails INCLUDING ALL)`;
    for (let after = 0; ; ) {
      const [moved] = await owner`
        WITH part AS (SELECT s.id FROM ${owner(p.name)} s WHERE s.id > ${after} ORDER BY s.id LIMIT ${batch}),
        gone AS (DELETE FROM sighting_thumbnails t USING part WHERE t.sighting_id = part.id RETURNING t.*),
        kept AS (INSERT INTO ${owner(thumbnails)} SELECT * FROM gone ON CONFLICT DO NOTHING)
        SELECT count(*)::int AS n, max(id) AS last FROM part`;
      if (moved.n < batch) break;
      after = Number(moved.last);
    }
    const done = await owner.begin(async (tx) => {
      await lockMaintenance(tx, opts.lockTimeoutMs);
      // Another caller may have detached it while this one moved thumbnails.
      const still = (await listSightingPartitions(tx)).some((q) => q.name === p.name);
      if (!still) return false;
      await tx`ALTER TABLE sightings DETACH PARTITION ${tx(p.name)}`;
      // Archives, outside row-level security now: for the owner alone, as the service reads neither.
      await tx`REVOKE ALL ON ${tx(p.name)}, ${tx(thumbnails)} FROM face_tenant, face_deployment`;
      // Sightings recorded in that month since the batches above.
      await tx`
        WITH gone AS (DELETE FROM sighting_thumbnails t USING ${tx(p.name)} s WHERE t.sighting_id = s.id RETURNING t.*)
        INSERT INTO ${tx(thumbnails)} SELECT * FROM gone ON CONFLICT DO NOTHING`;
      return true;
    });
    if (done) detached.push({ ...p, thumbnails });
  }
  return detached;
}

async function lockMaintenance(tx: TransactionSql, lockTimeoutMs = LOCK_TIMEOUT_MS): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(${PARTITION_LOCK.toString()}::bigint)`;
  // After the advisory lock: waiting for another maintainer is not waiting on readers.
  await tx`SELECT set_config('lock_timeout', ${`${Math.max(1, Math.round(lockTimeoutMs))}ms`}, true)`;
}
