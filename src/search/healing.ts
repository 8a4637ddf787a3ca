/**
 * Healing the search shards: a shard that fails (an update failed half-way,
 * or an operator asked for a rebuild) or that could not be loaded at start
 * is brought back while the others serve. Its last good snapshot is put
 * back, or, when that is unusable or older than the pruned log, it is
 * refilled from the faces table; it then replays the log after that point
 * and goes live again. The bulk of that work runs beside the follower
 * (index-sync.ts); only the last stretch of the replay runs inside its pass,
 * so no change is missed. Every snapshot load failure is logged with its
 * cause.
 */
import { prunedThrough, scanFaces } from '../db/change-log.js';
import type { Sql } from '../db/client.js';
import type { Logger } from '../log.js';
import type { FaceIndex, IndexChange } from '../native/face-index.js';
import type { Snapshots } from './snapshots.js';

export interface HealingOptions {
  sql: Sql;
  index: FaceIndex;
  /** Recogniser whose embeddings the index holds. */
  model: string;
  dims: number;
  log: Logger;
  /** Faces read per query when a shard is refilled from the database. */
  refillPageSize?: number;
  /** The deployment's shard count: a refill of fewer shards reads only their faces' embeddings. */
  shardCount: number;
}

/** What the follower lends the healing: its reading of the log, its pass, and where it stands. */
export interface FollowerAccess {
  /**
   * The log entries after `position` as index changes (of the shards held here), and how many rows of
   * them were read; the changes may end with one more that only carries the log's end position.
   */
  readChanges(position: number, limit: number): Promise<{ changes: IndexChange[]; rows: number }>;
  /** Runs `run` inside the follower's pass, between two drains. */
  inPass(run: () => Promise<void>): Promise<void>;
  /** Highest position the follower has applied. */
  applied(): number;
  stopped(): boolean;
}

export class Healing {
  private readonly healing = new Map<number, Promise<void>>();

  constructor(
    private readonly opts: HealingOptions,
    private readonly follower: FollowerAccess,
    private readonly snapshots: Snapshots,
  ) {}

  /**
   * At start, the shards whose snapshot could not be loaded (just tried;
   * nothing serves yet): empty, they replay the log with the others at the
   * follower's first drain, unless the log was pruned, when one database scan
   * fills them all. They go live where that leaves them.
   */
  async atStart(): Promise<void> {
    const { index, log } = this.opts;
    const report = index.loadReport();
    // On a first start no shard has been saved yet, which is nothing to warn about; one
    // snapshot missing beside others is.
    if (report.length > 0 && report.every((r) => r.missing)) {
      log.info({ shards: report.map((r) => r.shard) }, 'no search shard snapshots yet (first start); building the shards from the database');
    } else {
      for (const r of report) {
        if (r.error) log.warn({ shard: r.shard, cause: r.error }, 'search shard snapshot could not be loaded; rebuilding the shard');
      }
    }
    const ks = index.shards().filter((s) => s.state !== 'live').map((s) => s.shard);
    if (ks.length === 0) return;
    const started = Date.now();
    const scanned = 0 < (await prunedThrough(this.opts.sql));
    const from = scanned ? await this.refill(ks) : 0;
    for (const k of ks) await index.finishRebuild(k, from);
    this.snapshots.due();
    log.info({ shards: ks, source: scanned ? 'database' : 'log', position: from, ms: Date.now() - started }, 'search shards refilled; the change log after them replays next');
  }

  /** Starts healing every failed shard that is not already being healed. */
  healFailed(): void {
    if (this.follower.stopped()) return;
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

  /** Resolves once no heal is running (each ends soon after the follower stops). */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.healing.values()]);
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
        const { changes, rows } = await this.follower.readChanges(from, 4096);
        if (rows === 0) return;
        replayed.count += await index.replay(k, changes);
        from = changes[changes.length - 1].position;
        if (this.follower.stopped()) throw new Error('search index follower stopped');
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
      const at = Math.max(from, this.follower.applied());
      await index.finishRebuild(k, at);
      // Its durable snapshot is old (or gone): save soon, so a restart or the next heal starts from here
      // and the log below it can be pruned.
      this.snapshots.due();
    };
    await this.follower.inPass(finish);
    log.info({ shard: k, source, replayed: replayed.count, position: Math.max(from, this.follower.applied()), ms: Date.now() - started }, 'search shard rebuilt and back in service');
  }

  /**
   * Empties shards `ks` and fills them from one scan of the faces table (each
   * takes its own faces; the scan reads only theirs when they are not all the
   * deployment's); resolves to the change position the scan reflects.
   */
  private async refill(ks: number[]): Promise<number> {
    const { index, shardCount } = this.opts;
    for (const k of ks) await index.beginRebuild(k);
    const only = ks.length < shardCount ? { count: shardCount, only: ks } : undefined;
    return scanFaces(
      this.opts.sql,
      this.opts.model,
      this.opts.dims,
      this.opts.refillPageSize ?? 4096,
      async (page) => {
        for (const k of ks) await index.refill(k, page.ids, page.vectors, page.galleries);
      },
      only,
    );
  }
}
