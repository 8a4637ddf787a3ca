/**
 * The routes a shard server (FACE_ROLE=shard) answers for API nodes: search
 * of the shards it holds, its state, and waiting for a change-log position;
 * what they answer is search/shard-server.ts's. Operator token only: these
 * are between the nodes of one deployment, which share FACE_TOKEN. The
 * answers' shapes are search/shard-wire.ts's.
 */
import { z } from 'zod';
import { numberParam } from '../http/params.js';
import type { RouteRegistry } from '../http/registry.js';
import type { ShardServer } from '../search/shard-server.js';
import { MAX_QUERIES, MAX_WAIT_MS, positionAnswer, searchAnswer, stateAnswer, strangerAnswer, VECTORS_TYPE } from '../search/shard-wire.js';
import { galleryName } from './schemas.js';
import { tenantOf } from '../auth.js';

export interface ShardServerDeps {
  server: ShardServer;
  /** Largest `n` a search may ask for (FACE_IDENTIFY_MAX_N). */
  maxN: number;
}

export function registerShardServer(registry: RouteRegistry, deps: ShardServerDeps): void {
  const { server } = deps;

  registry.define({
    method: 'POST',
    path: '/v0/shard/search',
    summary: 'Search the shards this server holds (API nodes ask it)',
    description:
      `Needs a deployment operator token. The body holds the query embeddings (1 to ${MAX_QUERIES}) as float32, little-endian, ` +
      `one after another; each gets its top n faces over the live shards held here. Shards that are not live are ` +
      `listed as missing, never waited for.`,
    auth: 'deployment',
    binaryBody: { mediaType: VECTORS_TYPE, param: 'vectors', description: 'Query embeddings: float32 little-endian, `dims` per query.' },
    request: z.object({
      vectors: z.custom<Buffer>((v) => Buffer.isBuffer(v), { message: `expected a ${VECTORS_TYPE} body` }),
      n: numberParam(z.number().int().min(1).max(deps.maxN)).meta({ description: `Matches per query, 1 to ${deps.maxN}.` }),
      // The API node's principal's tenant, sent by a deployment operator's token: taken as it is named.
      tenant: numberParam(z.number().int().min(1).max(Number.MAX_SAFE_INTEGER))
        .transform(tenantOf)
        .meta({ description: 'Whose faces: only faces of this tenant are searched and counted.' }),
      gallery: galleryName.optional().meta({ description: "Only faces of this gallery of the tenant's (absent: its `default`, which holds all its faces)." }),
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
    handler: ({ input }) => server.search(input.vectors, input.n, { tenant: input.tenant, gallery: input.gallery }, input.shards),
  });

  registry.define({
    method: 'POST',
    path: '/v0/shard/strangers',
    summary: "Search the strangers' sightings this server holds (API nodes ask it when grouping)",
    description:
      `Needs a deployment operator token. The body holds the query embeddings (1 to ${MAX_QUERIES}) as in a search; each gets its top ` +
      `n sightings of the tenant's strangers among those on the shards held here, once the server has read every one up to \`up_to\` ` +
      `from the database. 503 when this server does not group strangers.`,
    auth: 'deployment',
    binaryBody: { mediaType: VECTORS_TYPE, param: 'vectors', description: 'Query embeddings: float32 little-endian, `dims` per query.' },
    request: z.object({
      vectors: z.custom<Buffer>((v) => Buffer.isBuffer(v), { message: `expected a ${VECTORS_TYPE} body` }),
      n: numberParam(z.number().int().min(1).max(deps.maxN)).meta({ description: `Matches per query, 1 to ${deps.maxN}.` }),
      up_to: numberParam(z.number().int().min(0)).meta({ description: "The newest strangers' sighting the caller knows of: read before searching." }),
      tenant: numberParam(z.number().int().min(1))
        .transform(tenantOf)
        .meta({ description: 'Whose strangers: only sightings of this tenant are searched and counted.' }),
      since: numberParam(z.number().int())
        .optional()
        .meta({ description: 'Only sightings seen at or after this time, in ms since the epoch (absent: all).' }),
    }),
    response: { status: 200, description: 'The matching sightings per query.', schema: strangerAnswer },
    errors: ['SERVICE_UNAVAILABLE'],
    handler: ({ input }) => server.searchStrangers(input.vectors, input.n, input.up_to, input.since ?? -Infinity, input.tenant),
  });

  registry.define({
    method: 'GET',
    path: '/v0/shard/state',
    summary: "This shard server's layout, held shards and position",
    description: 'Needs a deployment operator token. API nodes read it at start (and refuse a server that routes differently) and then every second.',
    auth: 'deployment',
    limited: false,
    response: { status: 200, description: 'The state.', schema: stateAnswer },
    errors: [],
    async handler() {
      return server.state();
    },
  });

  registry.define({
    method: 'GET',
    path: '/v0/shard/position',
    summary: 'Wait until the held shards reflect a change-log position',
    description:
      'Needs a deployment operator token. Answers once every held shard has applied the change at `at_least` (an API node ' +
      'asks this before acknowledging a write), or after `wait_ms` with reached=false.',
    auth: 'deployment',
    request: z.object({
      at_least: numberParam(z.number().int().min(0)).meta({ description: 'Change-log position to wait for.' }),
      wait_ms: numberParam(z.number().int().min(0).max(MAX_WAIT_MS)).default(0).meta({ description: `Longest wait, at most ${MAX_WAIT_MS} ms.` }),
    }),
    response: { status: 200, description: 'Where the shards stand.', schema: positionAnswer },
    errors: [],
    handler: ({ input }) => server.waitFor(input.at_least, input.wait_ms),
  });
}
