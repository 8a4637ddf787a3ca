/**
 * The search shards as identify, sightings, writes, /health and /metrics see
 * them, wherever they live: in this process (`localShards`, FACE_ROLE=all and
 * shard) or on shard servers that an API node fans out to (cluster-index.ts).
 *
 * "Servers" are what identify counts as live out of all: the shard servers
 * of a cluster, or, in one process, the shards themselves (each is served on
 * its own).
 */
import { scopeKey, type SearchScope } from '../db/tenants.js';
import type { FaceIndex, IndexSearchResult, ShardInfo } from '../native/face-index.js';

/** One shard as last seen; `unreachable`: its server did not answer in time. */
export type ShardView = Omit<ShardInfo, 'state'> & { state: ShardInfo['state'] | 'unreachable'; server?: string };

export interface SearchOutcome extends IndexSearchResult {
  /** The servers (or shards) that did not serve this search, named for an error message. */
  down: string[];
}

export interface ServerCount {
  live: number;
  total: number;
  /** Those out of service, named. */
  down: string[];
}

/** What a write waits for: the shards owning the faces it changed have applied its change-log position. */
export interface IndexLag {
  /** Shards (servers, in a cluster) that do not serve the write yet, out of all. */
  behind: number;
  total: number;
}

export interface SearchShards {
  /**
   * One search per query (`queries` holds them one after another), in the order given, among
   * the faces of `scope` (a tenant's faces or one of its galleries).
   */
  searchBatch(queries: Float32Array, n: number, scope: SearchScope): Promise<SearchOutcome[]>;
  /** Every shard of the deployment as last seen; never waits. */
  shards(): ShardView[];
  /** Servers in service out of all, as last seen; never waits. */
  servers(): ServerCount;
  /** Lowest change-log position every shard reflects, as last seen. */
  position(): number;
  /**
   * Waits until the shards owning `faceIds` (every shard when undefined) have
   * applied the change-log `position`, at most `timeoutMs`; resolves to the
   * lag when some of them do not serve it then. `findable`: the write makes
   * faces findable, so a shard out of search also counts as behind.
   */
  settle(position: number, findable: boolean, faceIds: readonly number[] | undefined, timeoutMs: number): Promise<IndexLag | undefined>;
}

/** Waits for this process's follower of the change log (index-sync.ts). */
export interface IndexFollower {
  /** True once the index has applied every change up to `position`; false after `timeoutMs`. */
  caughtUp(position: number, timeoutMs?: number): Promise<boolean>;
}

/** The shards of this process's own index. */
export function localShards(index: FaceIndex, follower: IndexFollower): SearchShards {
  const servers = (shards: ShardInfo[]): ServerCount => {
    const down = shards.filter((s) => s.state !== 'live').map((s) => String(s.shard));
    return { live: shards.length - down.length, total: shards.length, down };
  };
  return {
    async searchBatch(queries, n, scope) {
      const results = await index.searchBatch(queries, n, scopeKey(scope));
      return results.map((r) => ({ ...r, down: r.missing.map(String) }));
    },
    shards: () => index.shards(),
    servers: () => servers(index.shards()),
    position: () => index.position(),
    async settle(position, findable, _faceIds, timeoutMs) {
      // One follower applies the log for every shard, so there is nothing narrower to wait for.
      await follower.caughtUp(position, timeoutMs);
      const shards = index.shards();
      const behind = shards.filter((s) => s.position < position || (findable && s.state !== 'live')).length;
      return behind > 0 ? { behind, total: shards.length } : undefined;
    },
  };
}
