/**
 * The deployment's search layout (006-search-layout.sql): how many shards,
 * by which rule faces are routed to them, and which embeddings they hold;
 * and where each shard's durable snapshot stands, so the change log is
 * pruned only below what every shard, on every server, has saved.
 */
import { DomainError } from '../errors.js';
import type { Sql } from './client.js';

/** The routing rule of crates/index/src/route.rs: a 64-bit mix of the face id, modulo the shard count. */
export const SHARD_RULE = 'mix64-mod';

/**
 * SplitMix64's finaliser, as crates/index/src/route.rs `mix64` (a frozen
 * rule: snapshots were placed by it). The one copy on the TypeScript side:
 * the database layer, which may not load the addon, tags each change-log row
 * with its shard by it. layout.test.ts pins it to the Rust values, and
 * native/face-index.test.ts checks it against the addon's `shardOf`.
 */
export function mix64(id: bigint): bigint {
  let z = BigInt.asUintN(64, id + 0x9e3779b97f4a7c15n);
  z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
  z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
  return z ^ (z >> 31n);
}

/** The shard of face `id` among `shards` shards by SHARD_RULE: `mix64(id) % shards`. */
export function shardOfFace(id: number | string, shards: number): number {
  return Number(mix64(BigInt(id)) % BigInt(shards));
}

export interface SearchLayout {
  shards: number;
  rule: string;
  /** Absent until a node with the models has started. */
  recognizer?: string;
  dims?: number;
}

function layoutOf(row: { shards: number; rule: string; recognizer: string | null; dims: number | null }): SearchLayout {
  return { shards: row.shards, rule: row.rule, recognizer: row.recognizer ?? undefined, dims: row.dims ?? undefined };
}

export async function readLayout(sql: Sql): Promise<SearchLayout | undefined> {
  const [row] = await sql<{ shards: number; rule: string; recognizer: string | null; dims: number | null }[]>`
    SELECT shards, rule, recognizer, dims FROM search_layout`;
  return row ? layoutOf(row) : undefined;
}

/**
 * Records the layout on first start, else checks it: another shard count or
 * rule is refused (CONFLICT) before anything is served. A recogniser and
 * dimension, when given, replace the recorded ones: that is a recogniser
 * switch, which re-embeds the stored faces (services/reembed.ts).
 */
export async function claimLayout(sql: Sql, want: SearchLayout): Promise<SearchLayout> {
  return sql.begin(async (tx) => {
    await tx`INSERT INTO search_layout (shards, rule) VALUES (${want.shards}, ${want.rule}) ON CONFLICT (only_row) DO NOTHING`;
    const [row] = await tx<{ shards: number; rule: string; recognizer: string | null; dims: number | null }[]>`
      SELECT shards, rule, recognizer, dims FROM search_layout FOR UPDATE`;
    if (row.shards !== want.shards || row.rule !== want.rule) {
      throw new DomainError(
        'CONFLICT',
        `this deployment's faces are spread over ${row.shards} search shards by rule ${row.rule}; ` +
          `this node is configured for ${want.shards} by ${want.rule} (FACE_SHARDS must be the same on every node)`,
      );
    }
    if (want.recognizer === undefined || (row.recognizer === want.recognizer && row.dims === want.dims)) return layoutOf(row);
    await tx`UPDATE search_layout SET recognizer = ${want.recognizer}, dims = ${want.dims ?? null}`;
    return { ...layoutOf(row), recognizer: want.recognizer, dims: want.dims };
  }) as Promise<SearchLayout>;
}

/** Records the positions the durable snapshots of some shards cover, as saved by `server`. */
export async function recordSnapshots(sql: Sql, saved: { shard: number; position: number }[], server: string): Promise<void> {
  if (saved.length === 0) return;
  const rows = saved.map((s) => ({ shard: s.shard, position: s.position, server }));
  await sql`
    INSERT INTO shard_snapshots ${sql(rows, 'shard', 'position', 'server')}
    ON CONFLICT (shard) DO UPDATE SET position = excluded.position, server = excluded.server, saved_at = now()`;
}

/**
 * The highest log position every one of the deployment's `shards` shards has
 * a durable snapshot at or above; undefined while some shard has none (then
 * nothing may be pruned).
 */
export async function snapshotFloor(sql: Sql, shards: number): Promise<number | undefined> {
  const [row] = await sql<{ n: number; floor: string | null }[]>`
    SELECT count(*)::int AS n, min(position) AS floor FROM shard_snapshots WHERE shard < ${shards}`;
  return row.n === shards && row.floor !== null ? Number(row.floor) : undefined;
}
