/**
 * Keeps the search shards in step with the face database by following its
 * change log (face_changes, see 002-face-changes.sql).
 *
 * The log is read in position order after the last position applied, joined
 * with the faces as they are now: a change whose face is gone becomes a
 * delete, so replaying old entries converges on the current database. Writers
 * commit positions in order (an advisory lock), so "after the last position
 * seen" never skips a change. This process's own writes wake the follower and
 * wait for it (`caughtUp`, through index-writes.ts), so an answered add is
 * searchable at once or its answer says it is not yet; a one-second poll
 * picks up writes by other processes sharing the database.
 *
 * Shards are snapshotted to disk every `snapshotChanges` changes or
 * `snapshotSeconds`, and at stop; a start loads the snapshots and replays only
 * the log after them.
 *
 * The shards hold the embeddings of one recogniser. A face embedded by
 * another (stored before a recogniser switch, not yet re-embedded by
 * services/reembed.ts) is left out of search, quietly: its re-embedding logs
 * an upsert that brings it in. Snapshots made with another recogniser are
 * discarded before the shards open (`discardForeignSnapshots`), so the start
 * rebuilds them from the log.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { changesAfter } from '../db/change-log.js';
import type { Sql } from '../db/client.js';
import { DEFAULT_GALLERY } from '../db/galleries.js';
import { fsyncDir } from '../db/photos.js';
import { FIRST_RECOGNIZER } from '../db/reembed-store.js';
import type { Logger } from '../log.js';
import type { FaceIndex, IndexChange } from '../native/face-index.js';

/** File in the snapshot folder naming the recogniser whose embeddings the snapshots hold. */
const RECOGNIZER_FILE = 'recognizer';

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
  const recorded = names.includes(RECOGNIZER_FILE) ? (await fs.readFile(file, 'utf8')).trim() : undefined;
  if (recorded === recognizer) return;
  const made = recorded ?? FIRST_RECOGNIZER;
  if (names.length > 0 && made !== recognizer) {
    log.info({ from: made, to: recognizer }, "search snapshots hold another recogniser's embeddings; rebuilding the shards from the change log");
    await fs.rm(dir, { recursive: true, force: true });
  }
  await fs.mkdir(dir, { recursive: true });
  const fh = await fs.open(file, 'w', 0o644);
  try {
    await fh.writeFile(`${recognizer}\n`);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await fsyncDir(dir);
}

export interface IndexSyncOptions {
  sql: Sql;
  index: FaceIndex;
  /** Recogniser whose embeddings the index holds; faces stored by another are left out until re-embedded. */
  model: string;
  /** Embedding size the index holds. */
  dims: number;
  log: Logger;
  /** Change-log rows read per query. */
  pageSize?: number;
  pollMs?: number;
  snapshotSeconds: number;
  snapshotChanges: number;
}

interface Waiter {
  position: number;
  resolve: (reached: boolean) => void;
}

export class IndexSync {
  private applied: number;
  private pass?: Promise<void>;
  private again = false;
  private waiters: Waiter[] = [];
  private timer?: NodeJS.Timeout;
  private unsaved = 0;
  private savedAt = Date.now();
  private stopped = false;
  /** Changes left out of search because their face awaits re-embedding (see the header). */
  private otherModel = 0;
  private readonly pageSize: number;

  private constructor(private readonly opts: IndexSyncOptions) {
    this.applied = opts.index.position();
    this.pageSize = opts.pageSize ?? 256;
  }

  /** Replays the log after the shards' snapshots, then keeps following it. */
  static async start(opts: IndexSyncOptions): Promise<IndexSync> {
    const sync = new IndexSync(opts);
    const from = sync.applied;
    await sync.drain();
    opts.log.info({ from, to: sync.applied, otherRecognizer: sync.otherModel }, 'search index caught up with the change log');
    sync.timer = setInterval(() => sync.wake(), opts.pollMs ?? 1000);
    sync.timer.unref();
    return sync;
  }

  /** Highest change-log position the index reflects. */
  position(): number {
    return this.applied;
  }

  /**
   * Resolves true once the index reflects every change up to `position`, or
   * false after `timeoutMs` (the follower is stuck, e.g. the database is
   * unreachable; the write itself has committed regardless).
   */
  caughtUp(position: number, timeoutMs = 10_000): Promise<boolean> {
    if (this.applied >= position) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const waiter: Waiter = { position, resolve: () => {} };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        resolve(false);
      }, timeoutMs);
      waiter.resolve = (reached) => {
        clearTimeout(timer);
        resolve(reached);
      };
      this.waiters.push(waiter);
      this.wake();
    });
  }

  /** Starts a catch-up pass, or asks the running one to look again when it is done. */
  wake(): void {
    if (this.stopped) return;
    if (this.pass) {
      this.again = true;
      return;
    }
    this.pass = (async () => {
      try {
        do {
          this.again = false;
          await this.drain();
          await this.maybeSnapshot();
        } while (this.again && !this.stopped);
      } catch (err) {
        // The next poll retries; waiters time out if this persists.
        this.opts.log.warn({ err }, 'search index could not follow the change log');
      } finally {
        this.pass = undefined;
      }
    })();
  }

  /** Stops following, saves the shards and releases them. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.pass;
    for (const w of this.waiters.splice(0)) w.resolve(this.applied >= w.position);
    try {
      if (this.unsaved > 0) await this.opts.index.snapshot();
    } catch (err) {
      this.opts.log.warn({ err }, 'search index snapshot at shutdown failed');
    }
    this.opts.index.close();
  }

  /** Applies every logged change after the current position, page by page. */
  private async drain(): Promise<void> {
    const { sql, index, model } = this.opts;
    for (;;) {
      const rows = await changesAfter(sql, this.applied, this.pageSize, model);
      if (rows.length === 0) return;
      const changes: IndexChange[] = rows.map((r) => {
        const { position, faceId: id } = r;
        switch (r.kind) {
          case 'gone':
            return { position, op: 'delete', id };
          case 'galleries':
            return { position, op: 'galleries', id, galleries: [DEFAULT_GALLERY, ...r.galleries] };
          case 'other-model':
            // Expected after a recogniser switch, for every such face: counted, not logged one by one.
            this.otherModel++;
            return { position, op: 'delete', id };
          case 'upsert':
            if (r.embedding.length !== this.opts.dims) {
              // Its model matches, so this is damage, not a pending migration. Refusing it would stall the
              // log for every later face; it is left out of search instead.
              this.opts.log.warn({ faceId: id, dims: r.embedding.length }, 'face embedding has the wrong size for the search index; not searchable');
              return { position, op: 'delete', id };
            }
            return { position, op: 'upsert', id, vector: r.embedding, galleries: [DEFAULT_GALLERY, ...r.galleries] };
        }
      });
      await index.apply(changes);
      this.applied = changes[changes.length - 1].position;
      this.unsaved += changes.length;
      this.release();
      if (rows.length < this.pageSize) return;
    }
  }

  private release(): void {
    if (this.waiters.length === 0) return;
    const still: Waiter[] = [];
    for (const w of this.waiters) {
      if (this.applied >= w.position) w.resolve(true);
      else still.push(w);
    }
    this.waiters = still;
  }

  private async maybeSnapshot(): Promise<void> {
    if (this.unsaved === 0) return;
    const due = this.unsaved >= this.opts.snapshotChanges || Date.now() - this.savedAt >= this.opts.snapshotSeconds * 1000;
    if (!due) return;
    const unsaved = this.unsaved;
    await this.opts.index.snapshot();
    this.unsaved -= unsaved;
    this.savedAt = Date.now();
  }
}
