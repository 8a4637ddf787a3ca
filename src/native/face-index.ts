/**
 * The search shards of the native addon (`FaceIndex`, crates/index): the only
 * importer of that part of the binding.
 *
 * The shapes are the addon's generated types; the wrapper turns its coded
 * rejections into DomainErrors once, like engine.ts does for the engine. Positions and ids
 * cross as plain numbers: both are bigserials that stay far below 2^53.
 */
import type * as Addon from '../../build/addon/index.cjs';
import { DomainError } from '../errors.js';
import { addonPath, loadAddon } from './engine.js';

export type { IndexMatch, IndexOptions, IndexSearchResult, ShardInfo, ShardSnapshot } from '../../build/addon/index.cjs';
type IndexOptions = Addon.IndexOptions;
type IndexSearchResult = Addon.IndexSearchResult;
type ShardInfo = Addon.ShardInfo;
type ShardSnapshot = Addon.ShardSnapshot;

export type IndexScalar = IndexOptions['scalar'];
export type ShardState = ShardInfo['state'];

/** One change as the index follower makes it: the addon's `IndexChange`, with each op's fields required. */
export type IndexChange =
  | { position: number; op: 'upsert'; id: number; vector: Float32Array; galleries: string[] }
  | { position: number; op: 'delete'; id: number }
  | { position: number; op: 'galleries'; id: number; galleries: string[] };

export interface FaceIndex {
  /** Applies changes in order; all positions up to the last one count as seen (feed a gap-free log). */
  apply(changes: IndexChange[]): Promise<void>;
  /**
   * One search per query (`queries` holds them one after another), in the order given: one
   * native call. `shards`: only these of the held shards (a shard moving away is left out).
   */
  searchBatch(queries: Float32Array, n: number, gallery?: string, shards?: number[]): Promise<IndexSearchResult[]>;
  /** Read from atomics: never waits for a shard's lock, so it is safe on the event loop. */
  shards(): ShardInfo[];
  /** Threads in the index's worker pool. */
  threads(): number;
  setOffline(shard: number): void;
  setOnline(shard: number): void;
  /** How each shard's snapshot loaded when the index opened. */
  loadReport(): ShardSnapshot[];
  /** Healing, in order: markFailed → reload → (beginRebuild → refill) → replay → finishRebuild. */
  markFailed(shard: number): Promise<void>;
  reload(shard: number): Promise<ShardSnapshot>;
  beginRebuild(shard: number): Promise<void>;
  refill(shard: number, ids: Float64Array, vectors: Float32Array, galleries: string[][]): Promise<number>;
  replay(shard: number, changes: IndexChange[]): Promise<number>;
  finishRebuild(shard: number, position: number): Promise<void>;
  /** Saves every live shard: one outcome per shard. */
  snapshot(): Promise<ShardSnapshot[]>;
  /** Lowest position every shard covers. */
  position(): number;
  close(): void;
}

/**
 * Maps an index rejection: BAD_PARAM (an unknown shard, a malformed vector)
 * is the caller's; INDEX_UNAVAILABLE a 503; the rest an internal error.
 */
export function mapIndexError(err: unknown): DomainError {
  if (err instanceof DomainError) return err;
  const code = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : String(err);
  if (code === 'BAD_PARAM') return new DomainError('BAD_PARAM', message, { cause: err });
  if (code === 'INDEX_UNAVAILABLE') return new DomainError('SERVICE_UNAVAILABLE', 'Search index unavailable', { retryAfterS: 1, cause: err });
  return new DomainError('INTERNAL', 'Internal server error', { cause: err });
}

class NativeIndexWrapper implements FaceIndex {
  private closed = false;

  constructor(private readonly native: Addon.FaceIndex) {}

  async apply(changes: IndexChange[]): Promise<void> {
    if (changes.length === 0) return;
    await this.native.apply(changes);
  }

  async searchBatch(queries: Float32Array, n: number, gallery?: string, shards?: number[]): Promise<IndexSearchResult[]> {
    if (queries.length === 0) return [];
    try {
      return await this.native.searchBatch(queries, n, gallery ?? null, shards ?? null);
    } catch (err) {
      throw mapIndexError(err);
    }
  }

  shards(): ShardInfo[] {
    return this.native.shards().map((s) => ({ ...s, snapshotAgeS: s.snapshotAgeS ?? undefined, snapshotPosition: s.snapshotPosition ?? undefined }));
  }

  threads(): number {
    return this.native.threads();
  }

  setOffline(shard: number): void {
    this.native.setOffline(shard);
  }

  setOnline(shard: number): void {
    this.native.setOnline(shard);
  }

  loadReport(): ShardSnapshot[] {
    return this.native.loadReport();
  }

  async markFailed(shard: number): Promise<void> {
    try {
      await this.native.markFailed(shard);
    } catch (err) {
      throw mapIndexError(err);
    }
  }

  reload(shard: number): Promise<ShardSnapshot> {
    return this.native.reload(shard);
  }

  beginRebuild(shard: number): Promise<void> {
    return this.native.beginRebuild(shard);
  }

  refill(shard: number, ids: Float64Array, vectors: Float32Array, galleries: string[][]): Promise<number> {
    return this.native.refill(shard, ids, vectors, galleries);
  }

  replay(shard: number, changes: IndexChange[]): Promise<number> {
    return this.native.replay(shard, changes);
  }

  finishRebuild(shard: number, position: number): Promise<void> {
    return this.native.finishRebuild(shard, position);
  }

  snapshot(): Promise<ShardSnapshot[]> {
    return this.native.snapshot();
  }

  position(): number {
    return this.native.position();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.native.close();
  }
}

/** The shard that owns face `id` among `shards` shards: the rule the index routes by (crates/index/src/route.rs). */
export function shardOf(id: number, shards: number): number {
  routing ??= loadAddon<typeof Addon>();
  return routing.shardOf(id, shards);
}
let routing: typeof Addon | undefined;

/** Creates the shards and loads their snapshots from `opts.dir`; shards without a usable one stay empty and rebuilding (`loadReport`). */
export async function openFaceIndex(opts: IndexOptions, file: string = addonPath()): Promise<FaceIndex> {
  const binding = loadAddon<typeof Addon>(file);
  return new NativeIndexWrapper(await binding.FaceIndex.open(opts));
}
