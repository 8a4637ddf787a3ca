/**
 * The operator's controls of the search shards held in this process
 * (FACE_ROLE=all, and each shard server for its own): take one out of
 * service, put it back, rebuild it. routes/shards-admin.ts serves them under
 * /v0/admin/shards; a shard this process does not hold is NOT_FOUND.
 */
import { notFound } from '../errors.js';
import type { FaceIndex } from '../native/face-index.js';
import type { SearchShards } from './search-shards.js';

export class ShardControl {
  constructor(
    /** The shards held by this process. */
    private readonly index: FaceIndex,
    /** The follower of the change log that rebuilds them (index-sync.ts). */
    private readonly follower: { rebuild(k: number): Promise<void> },
    /** The shards as they are reported (through a migration's view, where one runs). */
    readonly view: SearchShards,
  ) {}

  /** Takes shard `k` out of search; it keeps receiving changes. */
  setOffline(k: number): void {
    this.held(k);
    this.index.setOffline(k);
  }

  /** Puts shard `k` back into search. */
  setOnline(k: number): void {
    this.held(k);
    this.index.setOnline(k);
  }

  /** Takes shard `k` out of service and rebuilds it from its snapshot and the change log (or the database). */
  async rebuild(k: number): Promise<void> {
    this.held(k);
    await this.follower.rebuild(k);
  }

  private held(k: number): void {
    if (!this.index.shards().some((s) => s.shard === k)) throw notFound(`No search shard ${k} in this process`);
  }
}
