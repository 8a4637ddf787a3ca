/**
 * The search shards of the native addon (`FaceIndex`, crates/index): the only
 * importer of that part of the binding.
 *
 * The shapes are the addon's generated types. Every native call goes through
 * `native()` below, which turns the addon's coded failures (thrown or
 * rejected) into DomainErrors once, with engine.ts's `mapEngineError`.
 * Positions and ids cross as plain numbers: both are bigserials that stay far
 * below 2^53.
 */
import type * as Addon from '../../build/addon/index.cjs';
import type { DomainError } from '../errors.js';
import { addonPath, loadAddon, mapEngineError } from './engine.js';

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
 * Runs one call into the addon, synchronous or not, and maps what it throws or
 * rejects with: the one place this file turns native failures into DomainErrors.
 */
function native<T>(call: () => T): T {
  let out: T;
  try {
    out = call();
  } catch (err) {
    throw mapEngineError(err);
  }
  if (out instanceof Promise) {
    return out.catch((err: unknown) => {
      throw mapEngineError(err);
    }) as T;
  }
  return out;
}

class NativeIndexWrapper implements FaceIndex {
  private closed = false;

  constructor(private readonly index: Addon.FaceIndex) {}

  async apply(changes: IndexChange[]): Promise<void> {
    if (changes.length === 0) return;
    await native(() => this.index.apply(changes));
  }

  async searchBatch(queries: Float32Array, n: number, gallery?: string, shards?: number[]): Promise<IndexSearchResult[]> {
    if (queries.length === 0) return [];
    return native(() => this.index.searchBatch(queries, n, gallery ?? null, shards ?? null));
  }

  shards(): ShardInfo[] {
    return native(() => this.index.shards()).map((s) => ({ ...s, snapshotAgeS: s.snapshotAgeS ?? undefined, snapshotPosition: s.snapshotPosition ?? undefined }));
  }

  threads(): number {
    return native(() => this.index.threads());
  }

  setOffline(shard: number): void {
    native(() => this.index.setOffline(shard));
  }

  setOnline(shard: number): void {
    native(() => this.index.setOnline(shard));
  }

  loadReport(): ShardSnapshot[] {
    return native(() => this.index.loadReport());
  }

  markFailed(shard: number): Promise<void> {
    return native(() => this.index.markFailed(shard));
  }

  reload(shard: number): Promise<ShardSnapshot> {
    return native(() => this.index.reload(shard));
  }

  beginRebuild(shard: number): Promise<void> {
    return native(() => this.index.beginRebuild(shard));
  }

  refill(shard: number, ids: Float64Array, vectors: Float32Array, galleries: string[][]): Promise<number> {
    return native(() => this.index.refill(shard, ids, vectors, galleries));
  }

  replay(shard: number, changes: IndexChange[]): Promise<number> {
    return native(() => this.index.replay(shard, changes));
  }

  finishRebuild(shard: number, position: number): Promise<void> {
    return native(() => this.index.finishRebuild(shard, position));
  }

  snapshot(): Promise<ShardSnapshot[]> {
    return native(() => this.index.snapshot());
  }

  position(): number {
    return native(() => this.index.position());
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    native(() => this.index.close());
  }
}

/**
 * The shard that owns face `id` among `shards` shards: the rule the index routes by (crates/index/src/route.rs).
 * Throws BAD_PARAM for an id that is not a whole number in 0..2^53, or for no shards.
 */
export function shardOf(id: number, shards: number): number {
  routing ??= loadAddon<typeof Addon>();
  const binding = routing;
  return native(() => binding.shardOf(id, shards));
}
let routing: typeof Addon | undefined;

/**
 * Creates the shards and loads their snapshots from `opts.dir`; shards without a usable one stay empty and rebuilding (`loadReport`).
 * A missing addon is reported as such (an Error naming the file), not mapped.
 */
export async function openFaceIndex(opts: IndexOptions, file: string = addonPath()): Promise<FaceIndex> {
  const binding = loadAddon<typeof Addon>(file);
  return new NativeIndexWrapper(await native(() => binding.FaceIndex.open(opts)));
}
