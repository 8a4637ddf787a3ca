/**
 * The search shards of the native addon (`FaceIndex`, crates/index): the only
 * importer of that part of the binding.
 *
 * The wrapper keeps the addon's shapes here and turns its coded rejections
 * into HttpErrors once, like engine.ts does for the engine. Positions and ids
 * cross as plain numbers: both are bigserials that stay far below 2^53.
 */
import { HttpError, INTERNAL_REASON } from '../http/errors.js';
import { addonPath, loadAddon } from './engine.js';

export type IndexScalar = 'f32' | 'f16' | 'i8';

export interface IndexOptions {
  /** Snapshot folder. */
  dir: string;
  shards: number;
  dims: number;
  scalar: IndexScalar;
}

export type IndexChange =
  | { position: number; op: 'upsert'; id: number; vector: Float32Array; galleries: string[] }
  | { position: number; op: 'delete'; id: number }
  | { position: number; op: 'galleries'; id: number; galleries: string[] };

export interface IndexMatch {
  id: number;
  /** Cosine similarity. */
  similarity: number;
}

export interface IndexSearchResult {
  /** Best first. */
  matches: IndexMatch[];
  /** Shards that answered, and all shards. */
  live: number;
  total: number;
  /** Shards that were not searched. */
  missing: number[];
}

export type ShardState = 'loading' | 'rebuilding' | 'live' | 'failed' | 'offline';

export interface ShardInfo {
  shard: number;
  state: ShardState;
  size: number;
  position: number;
  pending: number;
  memoryBytes: number;
  snapshotAgeS?: number;
}

export interface FaceIndex {
  /** Applies changes in order; all positions up to the last one count as seen (feed a gap-free log). */
  apply(changes: IndexChange[]): Promise<void>;
  search(query: Float32Array, n: number, gallery?: string): Promise<IndexSearchResult>;
  shards(): ShardInfo[];
  setOffline(shard: number): void;
  setOnline(shard: number): void;
  /** Saves every live shard; resolves to the lowest position saved. */
  snapshot(): Promise<number>;
  /** Lowest position every shard covers. */
  position(): number;
  close(): void;
}

interface NativeIndex {
  apply(changes: IndexChange[]): Promise<void>;
  search(query: Float32Array, n: number, gallery?: string | null): Promise<IndexSearchResult>;
  shards(): ShardInfo[];
  setOffline(k: number): void;
  setOnline(k: number): void;
  snapshot(): Promise<number>;
  position(): number;
  close(): void;
}

interface NativeBinding {
  FaceIndex: { open(opts: IndexOptions): Promise<NativeIndex> };
}

/**
 * Maps an index rejection: BAD_PARAM (an unknown shard, a malformed vector)
 * is the caller's; INDEX_UNAVAILABLE a 503; the rest an internal error.
 */
export function mapIndexError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  const code = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : String(err);
  if (code === 'BAD_PARAM') return new HttpError(400, 'BAD_PARAM', message, { cause: err });
  if (code === 'INDEX_UNAVAILABLE') {
    return new HttpError(503, 'SERVICE_UNAVAILABLE', 'Search index unavailable', { headers: { 'Retry-After': '1' }, cause: err });
  }
  return new HttpError(500, 'INTERNAL', INTERNAL_REASON, { cause: err });
}

class NativeIndexWrapper implements FaceIndex {
  private closed = false;

  constructor(private readonly native: NativeIndex) {}

  async apply(changes: IndexChange[]): Promise<void> {
    if (changes.length === 0) return;
    await this.native.apply(changes);
  }

  async search(query: Float32Array, n: number, gallery?: string): Promise<IndexSearchResult> {
    try {
      return await this.native.search(query, n, gallery ?? null);
    } catch (err) {
      throw mapIndexError(err);
    }
  }

  shards(): ShardInfo[] {
    return this.native.shards().map((s) => ({ ...s, snapshotAgeS: s.snapshotAgeS ?? undefined }));
  }

  setOffline(shard: number): void {
    this.native.setOffline(shard);
  }

  setOnline(shard: number): void {
    this.native.setOnline(shard);
  }

  snapshot(): Promise<number> {
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

/** Creates the shards and loads their snapshots from `opts.dir`; shards without one start empty. */
export async function openFaceIndex(opts: IndexOptions, file: string = addonPath()): Promise<FaceIndex> {
  const binding = loadAddon<NativeBinding>(file);
  return new NativeIndexWrapper(await binding.FaceIndex.open(opts));
}
