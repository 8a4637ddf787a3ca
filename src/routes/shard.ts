/**
 * The routes a shard server (FACE_ROLE=shard) answers for API nodes: search
 * of the shards it holds, its state, and waiting for a change-log position.
 * Operator token only: these are between the nodes of one deployment, which
 * share FACE_TOKEN. The answers' shapes are cluster/shard-wire.ts's.
 */
import { z } from 'zod';
import { invalid } from '../errors.js';
import { numberParam } from '../http/params.js';
import type { RouteRegistry } from '../http/registry.js';
import type { FaceIndex } from '../native/face-index.js';
import type { IndexFollower } from '../services/search-shards.js';
import { decodeQueries, MAX_QUERIES, positionAnswer, searchAnswer, stateAnswer, VECTORS_TYPE } from '../cluster/shard-wire.js';
import { galleryName } from './schemas.js';

export interface ShardServerDeps {
  index: FaceIndex;
  follower: IndexFollower & { behindMs(): number };
  layout: { shards: number; rule: string; recognizer: string; dims: number };
  /** Largest `n` a search may ask for (FACE_IDENTIFY_MAX_N). */
  maxN: number;
}

/** Longest wait for a position one request may ask for; below the request deadline. */
const MAX_WAIT_MS = 20_000;

export function registerShardServer(registry: RouteRegistry, deps: ShardServerDeps): void {
  const { index, follower, layout } = deps;
  const served = () => ({ position: index.position(), behind_ms: follower.behindMs(), shards: index.shards().map(wire) });

  registry.define({
    method: 'POST',
    path: '/v0/shard/search',
    summary: 'Search the shards this server holds (API nodes ask it)',
    description:
      `Needs the operator token. The body holds the query embeddings (1 to ${MAX_QUERIES}) as float32, little-endian, ` +
      `one after another; each gets its top n faces over the live shards held here. Shards that are not live are ` +
      `listed as missing, never waited for.`,
    auth: 'operator',
    binaryBody: { mediaType: VECTORS_TYPE, param: 'vectors', description: 'Query embeddings: float32 little-endian, `dims` per query.' },
    request: z.object({
      vectors: z.custom<Buffer>((v) => Buffer.isBuffer(v), { message: `expected a ${VECTORS_TYPE} body` }),
      n: numberParam(z.number().int().min(1).max(deps.maxN)).meta({ description: `Matches per query, 1 to ${deps.maxN}.` }),
      gallery: galleryName.optional().meta({ description: 'Only faces of this gallery (absent: all).' }),
      shards: z
        .string()
        .regex(/^\d+(,\d+)*$/, 'expected shard numbers separated by commas')
        .transform((v) => v.split(',').map(Number))
        .optional()
        .meta({
          description:
            'Only these of the held shards (absent: all). An API node names the shards it expects of this server, so a ' +
            'shard that is being moved to another server is searched on one of them only.',
        }),
    }),
    response: { status: 200, description: 'The matches per query.', schema: searchAnswer },
    errors: [],
    async handler({ input }) {
      const queries = decodeQueries(input.vectors, layout.dims);
      if (!queries) throw invalid('vectors', `the body must hold 1 to ${MAX_QUERIES} embeddings of ${layout.dims} float32 values`);
      const results = await index.searchBatch(queries, input.n, input.gallery, input.shards);
      return { ...served(), results: results.map((r) => ({ matches: r.matches, missing: r.missing })) };
    },
  });

  registry.define({
    method: 'GET',
    path: '/v0/shard/state',
    summary: "This shard server's layout, held shards and position",
    description: 'Needs the operator token. API nodes read it at start (and refuse a server that routes differently) and then every second.',
    auth: 'operator',
    limited: false,
    response: { status: 200, description: 'The state.', schema: stateAnswer },
    errors: [],
    async handler() {
      return { ...served(), shard_count: layout.shards, rule: layout.rule, recognizer: layout.recognizer, dims: layout.dims, held: index.shards().map((s) => s.shard) };
    },
  });

  registry.define({
    method: 'GET',
    path: '/v0/shard/position',
    summary: 'Wait until the held shards reflect a change-log position',
    description:
      'Needs the operator token. Answers once every held shard has applied the change at `at_least` (an API node ' +
      'asks this before acknowledging a write), or after `wait_ms` with reached=false.',
    auth: 'operator',
    request: z.object({
      at_least: numberParam(z.number().int().min(0)).meta({ description: 'Change-log position to wait for.' }),
      wait_ms: numberParam(z.number().int().min(0).max(MAX_WAIT_MS)).default(0).meta({ description: `Longest wait, at most ${MAX_WAIT_MS} ms.` }),
    }),
    response: { status: 200, description: 'Where the shards stand.', schema: positionAnswer },
    errors: [],
    async handler({ input }) {
      const reached = await follower.caughtUp(input.at_least, input.wait_ms);
      return { ...served(), reached };
    },
  });
}

function wire(s: ReturnType<FaceIndex['shards']>[number]) {
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
