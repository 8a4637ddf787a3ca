/**
 * The search shards' snapshots on disk, and the change log they make
 * redundant.
 *
 * Shards are snapshotted every `snapshotChanges` changes or
 * `snapshotSeconds`, and at stop; a start loads the snapshots and replays only
 * the log after them (index-sync.ts). A snapshot runs beside the follower,
 * never inside its pass, so it does not hold back the acknowledgement of a
 * write. Once every shard of the deployment has a snapshot (here or on
 * another server, `shard_snapshots`), the log below the lowest one is pruned.
 * Every save failure is logged with its cause.
 *
 * The snapshot folder also records which recogniser's embeddings its
 * snapshots hold, and how their faces' search scopes are named: snapshots
 * made with another recogniser, or before faces carried their tenant's scope
 * (db/tenants.ts `searchScope`), are discarded before the shards open
 * (`discardForeignSnapshots`), so the start rebuilds them from the log.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { lastPosition, prunedThrough, pruneChanges } from '../db/change-log.js';
import type { Sql } from '../db/client.js';
import { recordSnapshots, snapshotFloor } from '../db/layout.js';
import { FIRST_RECOGNIZER } from '../db/reembed-store.js';
import { fsyncDir } from '../durable-fs.js';
import type { Logger } from '../log.js';
import type { FaceIndex } from '../native/face-index.js';

/** File in the snapshot folder naming the recogniser whose embeddings the snapshots hold, and their scopes' naming. */
const RECOGNIZER_FILE = 'recognizer';

/** How the snapshots' faces name their search scopes; written after the recogniser, on the same line. */
const SCOPE_NAMING = 'tenant-scopes';

/**
 * Empties the snapshot folder `dir` unless its snapshots were made with
 * `recognizer`, and records that recogniser there. Needed because a snapshot
 * of another recogniser can have the same dimension (the shards would load it
 * and answer from another embedding space); one of another dimension would
 * be refused by the shards anyway. A folder without the record predates it:
 * its snapshots are faceres'. The folder is emptied before the record is
 * written, so a crash in between only empties it again.
 */
export async function discardForeignSnapshots(dir: string, recognizer: string, log: Logger): Promise<void> {
  const file = path.join(dir, RECOGNIZER_FILE);
  let names: string[];
  try {
    names = await fs.readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    names = [];
  }
  const recorded = names.includes(RECOGNIZER_FILE) ? (await fs.readFile(file, 'utf8')).trim().split(/\s+/) : undefined;
  if (recorded?.[0] === recognizer && recorded[1] === SCOPE_NAMING) return;
  const made = recorded?.[0] ?? FIRST_RECOGNIZER;
  if (names.length > 0) {
    if (made !== recognizer) log.info({ from: made, to: recognizer }, "search snapshots hold another recogniser's embeddings; rebuilding the shards from the change log");
    else log.info('search snapshots predate tenant scopes; rebuilding the shards from the change log');
    await fs.rm(dir, { recursive: true, force: true });
  }
  await fs.mkdir(dir, { recursive: true });
  const fh = await fs.open(file, 'w', 0o644);
  try {
    await fh.writeFile(`${recognizer} ${SCOPE_NAMING}\n`);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await fsyncDir(dir);
}

export interface SnapshotOptions {
  sql: Sql;
  index: FaceIndex;
  log: Logger;
  snapshotSeconds: number;
  snapshotChanges: number;
  /** The deployment's shard count: the log is pruned below the snapshots of all of them, held here or not. */
  shardCount: number;
  /** Names this process in `shard_snapshots` (which server saved a shard). */
  server: string;
}

/** When the follower's shards are saved, and the pruning that follows each save. */
export class Snapshots {
  private unsaved = 0;
  private savedAt = Date.now();
  private saving?: Promise<void>;

  constructor(private readonly opts: SnapshotOptions) {}

  /** `count` changes were applied since the last save. */
  applied(count: number): void {
    this.unsaved += count;
  }

  /** A shard's durable snapshot is old or gone (it was just rebuilt): save at the next chance. */
  due(): void {
    this.unsaved = Math.max(this.unsaved, this.opts.snapshotChanges);
  }

  /** Starts a snapshot beside the follower when one is due and none is running. */
  maybeSave(): void {
    if (this.unsaved === 0 || this.saving) return;
    const due = this.unsaved >= this.opts.snapshotChanges || Date.now() - this.savedAt >= this.opts.snapshotSeconds * 1000;
    if (!due) return;
    this.saving = this.save('periodic').finally(() => {
      this.saving = undefined;
    });
  }

  /** Resolves once no save is running. */
  async settled(): Promise<void> {
    await this.saving;
  }

  /** At stop, after `settled`: saves what the last save did not cover. */
  async final(): Promise<void> {
    if (this.unsaved > 0) await this.save('at shutdown');
  }

  /** Saves every live shard, logs each failure with its cause, and prunes the log the snapshots make redundant. */
  private async save(why: string): Promise<void> {
    const unsaved = this.unsaved;
    let outcomes;
    try {
      outcomes = await this.opts.index.snapshot();
    } catch (err) {
      this.opts.log.warn({ err, why }, 'search index snapshot failed');
      return;
    }
    const failed = outcomes.filter((o) => o.error);
    for (const o of failed) this.opts.log.warn({ shard: o.shard, cause: o.error, why }, 'search shard snapshot could not be saved');
    if (failed.length === 0) {
      this.unsaved = Math.max(0, this.unsaved - unsaved);
      this.savedAt = Date.now();
    }
    await this.prune(outcomes.filter((o) => !o.error && !o.skipped));
  }

  /**
   * Records where the shards just saved stand, then deletes the log below what
   * the durable snapshot of every shard of the deployment covers (a shard
   * without one, here or on another server, keeps it all).
   */
  private async prune(saved: { shard: number; position: number }[]): Promise<void> {
    try {
      await recordSnapshots(this.opts.sql, saved, this.opts.server);
      const through = await snapshotFloor(this.opts.sql, this.opts.shardCount);
      if (through === undefined || through <= (await prunedThrough(this.opts.sql))) return;
      const deleted = await pruneChanges(this.opts.sql, through);
      this.opts.log.info({ through, deleted, head: await lastPosition(this.opts.sql) }, 'change log pruned below the shard snapshots');
    } catch (err) {
      this.opts.log.warn({ err }, 'change log could not be pruned; trying again after the next snapshot');
    }
  }
}
