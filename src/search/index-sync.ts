/**
 * The follower of the change log: keeps the search shards in step with the
 * face database by following face_changes (see 002-face-changes.sql), and
 * answers the writes waiting for it.
 *
 * The log is read in position order after the last position applied, joined
 * with the faces as they are now: a change whose face is gone becomes a
 * delete, so replaying old entries converges on the current database. Writers
 * commit positions in order (an advisory lock), so "after the last position
 * seen" never skips a change. A follower holding some of the shards (a shard
 * server) reads only their rows, each row carrying its face's shard, and
 * still moves to the end of the log when the newest rows are of other shards
 * (`changesAfter`), so its position, and the snapshots and pruning that go by
 * it, keep up. This process's own writes wake the follower and
 * wait for it (`caughtUp`, through index-writes.ts), so an answered add is
 * searchable at once or its answer says it is not yet; a one-second poll, and
 * LISTEN for the commits' notifications, pick up writes by other processes
 * sharing the database (API nodes, when this is a shard server).
 *
 * Beside it, and run from its pass: snapshots and pruning (snapshots.ts), and
 * the healing of failed shards (healing.ts).
 *
 * Faces enter the shards with their search scopes as the shards' galleries
 * (db/tenants.ts `searchScope`): their tenant's, and their tenant's name of
 * each gallery besides `default`. A tenant's `default` is its tenant scope, so
 * every search filters by tenant the way it filters by gallery, and no
 * tenant's search can reach another's faces.
 *
 * The shards hold the embeddings of one recogniser. A face embedded by
 * another (stored before a recogniser switch, not yet re-embedded by
 * services/reembed.ts) is left out of search, quietly: its re-embedding logs
 * an upsert that brings it in.
 */
import { changesAfter, listenForChanges, type LoggedChange } from '../db/change-log.js';
import type { Sql } from '../db/client.js';
import type { Logger } from '../log.js';
import { shardOf, type FaceIndex, type IndexChange } from '../native/face-index.js';
import { Healing, type FollowerAccess } from './healing.js';
import { Snapshots } from './snapshots.js';

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

/** The follower: applies the change log to the shards held here and answers the writes waiting for it. */
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
  private stopped = false;
  private readonly snapshots: Snapshots;
  private readonly healing: Healing;
  /** Changes left out of search because their face awaits re-embedding (see the header). */
  private otherModel = 0;
  private readonly pageSize: number;
  /** The shards whose rows are read from the log: those held here; undefined when that is all of them (no filter). */
  private readonly reads?: readonly number[];

  private constructor(private readonly opts: IndexSyncOptions) {
    // Shards that could not load sit at position 0 until healed; the rest start from what they hold.
    const loaded = opts.index.shards().filter((s) => s.state === 'live');
    this.applied = loaded.length ? Math.min(...loaded.map((s) => s.position)) : 0;
    this.pageSize = opts.pageSize ?? 256;
    const held = opts.index.shards().map((s) => s.shard);
    this.reads = held.length < opts.shardCount ? held : undefined;
    this.snapshots = new Snapshots(opts);
    const follower: FollowerAccess = {
      readChanges: (position, limit) => this.readChanges(position, limit),
      inPass: (run) => this.inPass(run),
      applied: () => this.applied,
      stopped: () => this.stopped,
    };
    this.healing = new Healing(opts, follower, this.snapshots);
  }

  /** Heals the shards that could not be loaded, replays the log after the snapshots, then keeps following it. */
  static async start(opts: IndexSyncOptions): Promise<IndexSync> {
    const sync = new IndexSync(opts);
    await sync.healing.atStart();
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
          this.healing.healFailed();
          if (!this.stopped) this.snapshots.maybeSave();
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
    await this.healing.settled();
    await this.snapshots.settled();
    for (const w of this.waiters.splice(0)) w.resolve(this.applied >= w.position);
    await this.snapshots.final();
    this.opts.index.close();
  }

  /**
   * The log entries after `position` (of the shards held here) as index
   * changes, and how many rows of them were read: fewer than `limit` when the
   * end of the log was reached. The changes may end with one beyond those
   * rows, at the end of the log (see `toChange`).
   */
  private async readChanges(position: number, limit: number): Promise<{ changes: IndexChange[]; rows: number }> {
    const logged = await changesAfter(this.opts.sql, position, limit, this.opts.model, this.reads);
    const changes: IndexChange[] = [];
    for (const r of logged) {
      const change = this.toChange(r);
      if (change) changes.push(change);
    }
    return { changes, rows: logged.filter((r) => r.kind !== 'elsewhere').length };
  }

  private toChange(r: LoggedChange): IndexChange | undefined {
    const { position, faceId: id } = r;
    switch (r.kind) {
      case 'elsewhere':
        // The end of the log, in a shard held elsewhere: the index skips a face routed to a shard it does
        // not hold and counts the position as offered, which moves every held shard there. Its row was
        // tagged by the writer; should the tag be wrong, the delete would hit a face held here, so it is
        // checked by the rule itself, and a wrong one only leaves the position where the held rows end.
        if (!this.reads || this.reads.includes(shardOf(id, this.opts.shardCount))) {
          this.opts.log.error({ faceId: id, position }, 'change-log row tagged with a shard the routing rule does not give its face');
          return undefined;
        }
        return { position, op: 'delete', id };
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
      if (changes.length === 0) return;
      await this.opts.index.apply(changes);
      this.applied = changes[changes.length - 1].position;
      this.snapshots.applied(changes.length);
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
}
