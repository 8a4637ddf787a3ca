/**
 * What a shard server (FACE_ROLE=shard) answers API nodes, below HTTP
 * (routes/shard.ts is its route): a search of the shards it holds, its
 * state, and waiting until its follower reaches a change-log position. Every
 * answer carries where the held shards stand, so an API node's view of the
 * server (cluster-index.ts) is refreshed by each call. The shapes are
 * shard-wire.ts's, which the API node checks.
 */
import { scopeKey, searchScope } from '../db/tenants.js';
import { invalid, unavailable } from '../errors.js';
import type { FaceIndex, ShardInfo } from '../native/face-index.js';
import type { IndexFollower } from './search-shards.js';
import { decodeQueries, MAX_QUERIES, type PositionAnswer, type SearchAnswer, type StateAnswer, type StrangerAnswer, type WireShard } from './shard-wire.js';
import type { StrangerIndex } from './stranger-index.js';
import type { TenantId } from '../auth.js';

/** How the deployment routes faces to shards, and the embeddings they hold. */
export interface ShardLayout {
  shards: number;
  rule: string;
  recognizer: string;
  dims: number;
}

export class ShardServer {
  constructor(
    private readonly index: FaceIndex,
    private readonly follower: IndexFollower & { behindMs(): number },
    readonly layout: ShardLayout,
    /** The strangers' sightings on the held shards, for grouping (absent when it is off). */
    private readonly strangers?: StrangerIndex,
  ) {}

  /**
   * Top `n` per query of `vectors` (the binary query body) among the faces
   * of the tenant's `gallery` (absent: all its faces) over the live shards
   * held here, or over `shards` of them; shards not live are listed as
   * missing, never waited for.
   */
  async search(vectors: Buffer, n: number, where: { tenant: TenantId; gallery?: string }, shards: number[] | undefined): Promise<SearchAnswer> {
    const scope = searchScope(where.tenant, where.gallery);
    const { dims } = this.layout;
    const queries = decodeQueries(vectors, dims);
    if (!queries) throw invalid('vectors', `the body must hold 1 to ${MAX_QUERIES} embeddings of ${dims} float32 values`);
    const results = await this.index.searchBatch(queries, n, scopeKey(scope), shards);
    return { ...this.served(), results: results.map((r) => ({ matches: r.matches, missing: r.missing, faces: r.faces })) };
  }

  /**
   * Top `n` per query of `vectors` among the tenant's strangers' sightings held here, once those up to
   * `upTo` are read from the database; those seen before `since` (ms) are left out.
   */
  async searchStrangers(vectors: Buffer, n: number, upTo: number, since: number, tenant: TenantId): Promise<StrangerAnswer> {
    const queries = decodeQueries(vectors, this.layout.dims);
    if (!queries) throw invalid('vectors', `the body must hold 1 to ${MAX_QUERIES} embeddings of ${this.layout.dims} float32 values`);
    if (!this.strangers) throw unavailable('this shard server does not group strangers (FACE_PERSON_THRESHOLD=off)');
    const found = await this.strangers.search(queries, n, upTo, since, tenant);
    return { searched: found[0]?.searched ?? 0, results: found.map((f) => ({ matches: f.hits.map((h) => ({ id: h.sightingId, similarity: h.similarity })) })) };
  }

  /** The layout, held shards and position; API nodes refuse a server whose layout differs from theirs. */
  state(): StateAnswer {
    const { layout } = this;
    return {
      ...this.served(),
      shard_count: layout.shards,
      rule: layout.rule,
      recognizer: layout.recognizer,
      dims: layout.dims,
      held: this.index.shards().map((s) => s.shard),
      ...(this.strangers ? { strangers: this.strangers.size() } : {}),
    };
  }

  /** Once every held shard has applied `atLeast` (reached), or after `waitMs` (not reached). */
  async waitFor(atLeast: number, waitMs: number): Promise<PositionAnswer> {
    const reached = await this.follower.caughtUp(atLeast, waitMs);
    return { ...this.served(), reached };
  }

  /** Where the held shards stand, as every answer carries it. */
  private served() {
    return { position: this.index.position(), behind_ms: this.follower.behindMs(), shards: this.index.shards().map(wire) };
  }
}

function wire(s: ShardInfo): WireShard {
  return {
    shard: s.shard,
    state: s.state,
    size: s.size,
    position: s.position,
    pending: s.pending,
    memoryBytes: s.memoryBytes,
    ...(s.snapshotAgeS !== undefined ? { snapshotAgeS: s.snapshotAgeS } : {}),
    ...(s.snapshotPosition !== undefined ? { snapshotPosition: s.snapshotPosition } : {}),
  };
}
