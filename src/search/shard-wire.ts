/**
 * What API nodes and shard servers say to each other (shard-server.ts
 * answers, through routes/shard.ts; shard-client.ts asks): the zod schemas of
 * the answers, checked on both sides, and the query body of a search, which
 * is binary: the query embeddings as float32, little-endian, one after
 * another (`dims` each).
 */
import { z } from 'zod';
import { bytesToFloats, floatsToBytes } from '../db/embedding.js';

/** Media type of a search's query body. */
export const VECTORS_TYPE = 'application/octet-stream';

/** Most queries in one search call: the faces of one photo are far fewer. */
export const MAX_QUERIES = 256;

/** Longest wait for a position one call may ask for; below the request deadline. */
export const MAX_WAIT_MS = 20_000;

export const wireShard = z.object({
  shard: z.number().int().min(0),
  state: z.enum(['loading', 'rebuilding', 'live', 'failed', 'offline']),
  size: z.number().int().min(0),
  position: z.number().int().min(0),
  pending: z.number().int().min(0),
  memoryBytes: z.number().min(0),
  snapshotAgeS: z.number().optional(),
  snapshotPosition: z.number().int().optional(),
});
export type WireShard = z.infer<typeof wireShard>;

const served = {
  position: z.number().int().min(0).meta({ description: 'Lowest change-log position the held shards reflect.' }),
  behind_ms: z
    .number()
    .min(0)
    .meta({ description: 'How long a committed change has been waiting to be applied here (0: caught up with every change announced).' }),
  shards: z.array(wireShard).meta({ description: 'The held shards as they are now.' }),
};

export const searchAnswer = z.object({
  ...served,
  results: z.array(
    z.object({
      matches: z.array(z.object({ id: z.number().int().min(1), similarity: z.number() })).meta({ description: 'Best first; ties by id.' }),
      missing: z.array(z.number().int()).meta({ description: 'Held shards not searched (not live).' }),
      faces: z
        .number()
        .int()
        .min(0)
        .optional()
        .meta({ description: 'Faces compared against: those in scope on the held shards searched (absent from servers older than it).' }),
    }),
  ),
});
export type SearchAnswer = z.infer<typeof searchAnswer>;

export const strangerAnswer = z.object({
  searched: z.number().int().min(0).meta({ description: "Strangers' sightings searched here: their part of the N of the 1:N decision." }),
  results: z.array(
    z.object({
      matches: z.array(z.object({ id: z.number().int().min(1), similarity: z.number() })).meta({ description: 'Sighting ids, best first.' }),
    }),
  ),
});
export type StrangerAnswer = z.infer<typeof strangerAnswer>;

export const stateAnswer = z.object({
  ...served,
  strangers: z
    .number()
    .int()
    .min(0)
    .optional()
    .meta({ description: "Strangers' sightings held for grouping (absent: grouping is off here)." }),
  shard_count: z.number().int().min(1).meta({ description: "The deployment's shard count this server routes by." }),
  rule: z.string(),
  recognizer: z.string(),
  dims: z.number().int().min(1),
  held: z.array(z.number().int().min(0)).meta({ description: 'The shards this server holds (FACE_SHARD_IDS).' }),
});
export type StateAnswer = z.infer<typeof stateAnswer>;

export const positionAnswer = z.object({
  ...served,
  reached: z.boolean().meta({ description: 'Whether the held shards reflect at_least now; false when wait_ms ran out first.' }),
});
export type PositionAnswer = z.infer<typeof positionAnswer>;

/** The query body of a search: float32 little-endian rows. */
export function encodeQueries(queries: Float32Array): Buffer {
  return floatsToBytes(queries);
}

/** The rows of a query body; undefined unless it holds whole rows of `dims`, at least one and at most MAX_QUERIES. */
export function decodeQueries(body: Buffer, dims: number): Float32Array | undefined {
  const row = dims * 4;
  if (body.length === 0 || body.length % row !== 0 || body.length / row > MAX_QUERIES) return undefined;
  return bytesToFloats(body);
}
