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
 * the log after them. A snapshot runs beside the follower, never inside its
 * pass, so it does not hold back the acknowledgement of a write. Once every
 * shard has a snapshot, the log below the lowest one is pruned.
 *
 * Healing: a shard that fails (an update failed half-way, or an operator
 * asked for a rebuild) or that could not be loaded at start is brought back
 * while the others serve: its last good snapshot is put back, or, when that is
 * unusable or older than the pruned log, it is refilled from the faces table;
 * it then replays the log after that point and goes live again. The bulk of
 * that work runs beside the follower; only the last stretch of the replay
 * runs inside its pass, so no change is missed. Every snapshot load or save
 * failure is logged with its cause.
 *
 * Faces enter the shards with their galleries other than `default`: every
 * face is in `default`, so a search of it is a search without a filter
 * (services/identify.ts), and naming it per face would cost a gallery entry
 * for every face in memory and in every snapshot.
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
import { changesAfter, lastPosition, listenForChanges, prunedThrough, pruneChanges, scanFaces, type LoggedChange } from '../db/change-log.js';
import type { Sql } from '../db/client.js';
import { recordSnapshots, snapshotFloor } from '../db/layout.js';
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
  /** Faces read per query when a shard is refilled from the database. */
  refillPageSize?: number;
  pollMs?: number;
  snapshotSeconds: number;
  snapshotChanges: number;
  /** The deployment's shard count: the log is pruned below the snapshots of all of them, held here or not. */
  shardCount: number;
  /** Names this process in `shard_snapshots` (which server saved a shard). */
  server: string;
}

interface Waiter {
  position: number;
  resolve: (reached: boolean) => void;
}

/** Work that must not interleave with applying the log: run by the follower's pass. */
interface PassTask {
  run: () => Promise<void>;
  resolve: () => void;
  reject: (err: unknown) => void;
}

export class IndexSync {
  private applied: number;
  private pass?: Promise<void>;
  private again = false;
  private waiters: Waiter[] = [];
  private tasks: PassTask[] = [];
  private timer?: NodeJS.Timeout;
  private unlisten?: () => Promise<void>;
  /** Highest position announced by a commit's notification, and since when one is unapplied. */
  private announced = 0;
  private behindSince?: number;
  private unsaved = 0;
  private savedAt = Date.now();
  private saving?: Promise<void>;
  private readonly healing = new Map<number, Promise<void>>();
  private stopped = false;
  /** Changes left out of search because their face awaits re-embedding (see the header). */
  private otherModel = 0;
  private readonly pageSize: number;

  private constructor(private readonly opts: IndexSyncOptions) {
    // Shards that could not load sit at position 0 until healed; the rest start from what they hold.
    const loaded = opts.index.shards().filter((s) => s.state === 'live');
    this.applied = loaded.length ? Math.min(...loaded.map((s) => s.position)) : 0;
    this.pageSize = opts.pageSize ?? 256;
  }

  /** Heals the shards that could not be loaded, replays the log after the snapshots, then keeps following it. */
  static async start(opts: IndexSyncOptions): Promise<IndexSync> {
    const sync = new IndexSync(opts);
    const report = opts.index.loadReport();
    // On a first start no shard has been saved yet, which is nothing to warn about; one
    // snapshot missing beside others is.
    if (report.length > 0 && report.every((r) => r.missing)) {
      opts.log.info({ shards: report.map((r) => r.shard) }, 'no search shard snapshots yet (first start); building the shards from the database');
    } else {
      for (const r of report) {
        if (r.error) opts.log.warn({ shard: r.shard, cause: r.error }, 'search shard snapshot could not be loaded; rebuilding the shard');
      }
    }
    await sync.healAtStart(opts.index.shards().filter((s) => s.state !== 'live').map((s) => s.shard));
    // Every shard is live now, each at its own position; the drain takes each from there.
    sync.applied = opts.index.position();
    const from = sync.applied;
    await sync.drain();
    opts.log.info({ from, to: sync.applied, otherRecognizer: sync.otherModel }, 'search index caught up with the change log');
    sync.timer = setInterval(() => sync.wake(), opts.pollMs ?? 1000);
    sync.timer.unref();
    try {
      // Commits by other processes (API nodes, when this is a shard server) wake the follower at once.
      sync.unlisten = await listenForChanges(opts.sql, (position) => sync.heard(position));
    } catch (err) {
      opts.log.warn({ err }, 'cannot LISTEN for change-log notifications; following the log by polling only');
    }
    return sync;
  }

  /** Highest change-log position the index reflects. */
  position(): number {
    return this.applied;
  }

  /**
   * For how long a change announced by a commit has been waiting to be
   * applied (0: every announced change is applied). A follower that cannot
   * read the log (the database is unreachable or a lock holds it) grows this
   * while its shards stay live: a shard server reports it, and API nodes count
   * a server far behind as not caught up.
   */
  behindMs(): number {
    return this.behindSince === undefined ? 0 : Date.now() - this.behindSince;
  }

  private heard(position: number): void {
    if (position <= this.applied) return;
    this.announced = Math.max(this.announced, position);
    this.behindSince ??= Date.now();
    this.wake();
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

  /**
   * Takes shard `k` out of search and rebuilds it from its snapshot and the
   * log (or from the database when the snapshot is unusable), as for a shard
   * that failed. Resolves once the rebuild has started; /v0/admin/shards shows
   * it come back.
   */
  async rebuild(k: number): Promise<void> {
    await this.opts.index.markFailed(k);
    this.wake();
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
          await this.runTasks();
          this.healFailed();
          this.maybeSnapshot();
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
    await this.unlisten?.().catch(() => {});
    await this.pass;
    for (const t of this.tasks.splice(0)) t.reject(new Error('search index follower stopped'));
    await Promise.allSettled([...this.healing.values()]);
    await this.saving;
    for (const w of this.waiters.splice(0)) w.resolve(this.applied >= w.position);
    if (this.unsaved > 0) await this.save('at shutdown');
    this.opts.index.close();
  }

  /** The log entries after `position` as index changes, and how far they go. */
  private async readChanges(position: number, limit: number): Promise<{ changes: IndexChange[]; rows: number }> {
    const rows = await changesAfter(this.opts.sql, position, limit, this.opts.model);
    return { changes: rows.map((r) => this.toChange(r)), rows: rows.length };
  }

  private toChange(r: LoggedChange): IndexChange {
    const { position, faceId: id } = r;
    switch (r.kind) {
      case 'gone':
        return { position, op: 'delete', id };
      case 'galleries':
        return { position, op: 'galleries', id, galleries: r.galleries };
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
        return { position, op: 'upsert', id, vector: r.embedding, galleries: r.galleries };
    }
  }

  /** Applies every logged change after the current position, page by page. */
  private async drain(): Promise<void> {
    for (;;) {
      const { changes, rows } = await this.readChanges(this.applied, this.pageSize);
      if (rows === 0) return;
      await this.opts.index.apply(changes);
      this.applied = changes[changes.length - 1].position;
      this.unsaved += changes.length;
      if (this.applied >= this.announced) this.behindSince = undefined;
      this.release();
      if (rows < this.pageSize) return;
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

  /** Runs `run` inside the follower's pass, between two drains. */
  private inPass(run: () => Promise<void>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.tasks.push({ run, resolve, reject });
      this.wake();
    });
  }

  private async runTasks(): Promise<void> {
    for (const t of this.tasks.splice(0)) {
      try {
        await t.run();
        t.resolve();
      } catch (err) {
        t.reject(err);
      }
    }
  }

  /** Starts healing every failed shard that is not already being healed. */
  private healFailed(): void {
    if (this.stopped) return;
    for (const s of this.opts.index.shards()) {
      if ((s.state !== 'failed' && s.state !== 'rebuilding') || this.healing.has(s.shard)) continue;
      const k = s.shard;
      this.opts.log.warn({ shard: k, state: s.state }, 'search shard out of service; rebuilding it while the others serve');
      const healing = this.heal(k)
        .catch((err) => this.opts.log.error({ err, shard: k }, 'search shard rebuild failed; retrying at the next poll'))
        .finally(() => this.healing.delete(k));
      this.healing.set(k, healing);
    }
  }

  /**
   * Brings shard `k` back: its snapshot, else a database scan, then the log
   * after that point. All but the last stretch of the replay runs beside the
   * follower (the shard buffers or drops what arrives meanwhile: the replay
   * covers it); the rest, and going live, run inside the pass so nothing is
   * missed between the two.
   */
  private async heal(k: number): Promise<void> {
    const { index, log, sql } = this.opts;
    const started = Date.now();
    const snapshot = await index.reload(k);
    if (snapshot.error) log.warn({ shard: k, cause: snapshot.error }, 'search shard snapshot could not be loaded; rebuilding the shard from the database');
    let from = snapshot.position;
    let source = from > 0 ? 'snapshot' : 'log';
    if (from < (await prunedThrough(sql))) {
      from = await this.refill([k]);
      source = 'database';
    }
    const replayed = { count: 0 };
    const replayFrom = from;
    const catchUp = async () => {
      for (;;) {
        const { changes, rows } = await this.readChanges(from, 4096);
        if (rows === 0) return;
        replayed.count += await index.replay(k, changes);
        from = changes[changes.length - 1].position;
        if (this.stopped) throw new Error('search index follower stopped');
      }
    };
    await catchUp();
    const finish = async () => {
      await catchUp();
      // Another process sharing the database may have pruned rows after `replayFrom` before they were
      // read (this one never prunes past a shard's snapshot): then the replay may have a hole, and the
      // next attempt refills from the database.
      if ((await prunedThrough(sql)) > replayFrom) {
        await index.markFailed(k);
        throw new Error('the change log was pruned during the rebuild');
      }
      const at = Math.max(from, this.applied);
      await index.finishRebuild(k, at);
      // Its durable snapshot is old (or gone): save soon, so a restart or the next heal starts from here
      // and the log below it can be pruned.
      this.unsaved = Math.max(this.unsaved, this.opts.snapshotChanges);
    };
    await this.inPass(finish);
    log.info({ shard: k, source, replayed: replayed.count, position: Math.max(from, this.applied), ms: Date.now() - started }, 'search shard rebuilt and back in service');
  }

  /**
   * At start, the shards whose snapshot could not be loaded (just tried;
   * nothing serves yet): empty, they replay the log with the others at the
   * first drain, unless the log was pruned, when one database scan fills
   * them all. They go live where that leaves them.
   */
  private async healAtStart(ks: number[]): Promise<void> {
    if (ks.length === 0) return;
    const started = Date.now();
    const scanned = 0 < (await prunedThrough(this.opts.sql));
    const from = scanned ? await this.refill(ks) : 0;
    for (const k of ks) await this.opts.index.finishRebuild(k, from);
    this.unsaved = Math.max(this.unsaved, this.opts.snapshotChanges);
    this.opts.log.info({ shards: ks, source: scanned ? 'database' : 'log', position: from, ms: Date.now() - started }, 'search shards refilled; the change log after them replays next');
  }

  /**
   * Empties shards `ks` and fills them from one scan of the faces table (each
   * takes its own faces); resolves to the change position the scan reflects.
   */
  private async refill(ks: number[]): Promise<number> {
    const { index } = this.opts;
    for (const k of ks) await index.beginRebuild(k);
    return scanFaces(this.opts.sql, this.opts.model, this.opts.dims, this.opts.refillPageSize ?? 4096, async (page) => {
      for (const k of ks) await index.refill(k, page.ids, page.vectors, page.galleries);
    });
  }

  /** Starts a snapshot beside the follower when one is due and none is running. */
  private maybeSnapshot(): void {
    if (this.unsaved === 0 || this.saving || this.stopped) return;
    const due = this.unsaved >= this.opts.snapshotChanges || Date.now() - this.savedAt >= this.opts.snapshotSeconds * 1000;
    if (!due) return;
    this.saving = this.save('periodic').finally(() => {
      this.saving = undefined;
    });
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
