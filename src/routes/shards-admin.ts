/**
 * The operator's view of the search shards, GET /v0/admin/shards, on every
 * role that searches (in a cluster, an API node shows each shard as its
 * server last reported it), and the controls of shards held in this process
 * (offline, online, rebuild: search/shard-control.ts), on FACE_ROLE=all and
 * on each shard server for its own shards. Operator token only.
 */
import { z } from 'zod';
import { idParam } from '../http/params.js';
import { principalOf, type RouteRegistry } from '../http/registry.js';
import type { AuditLog } from '../services/tenants.js';
import type { SearchShards } from '../search/search-shards.js';
import type { ShardControl } from '../search/shard-control.js';

export const shardLine = z.object({
  shard: z.number().int(),
  state: z
    .enum(['loading', 'rebuilding', 'live', 'failed', 'offline', 'unreachable'])
    .meta({ description: 'unreachable: its shard server did not answer in time (API nodes of a cluster).' }),
  server: z.string().optional().meta({ description: 'In a cluster: the shard server holding it.' }),
  size: z.number().int().meta({ description: 'Faces in the shard.' }),
  position: z.number().int().meta({ description: 'Change-log position the shard reflects.' }),
  pending: z.number().int().meta({ description: 'Changes buffered while the shard is not live (bounded: past 100,000 they are dropped and replayed from the change log instead).' }),
  memory_bytes: z.number().int().meta({ description: 'Graph, gallery table and exact copies, measured at the last snapshot, load or rebuild and scaled by the faces since.' }),
  snapshot_age_s: z.number().nullable().meta({ description: 'Seconds since its last snapshot was saved or loaded; null when none.' }),
  snapshot_position: z
    .number()
    .int()
    .nullable()
    .meta({ description: 'Change-log position its last snapshot covers; null when none. The log is pruned below the lowest of these over all shards.' }),
});

const shardsResponse = z.object({
  live: z.number().int().meta({ description: 'Search servers in service: shard servers in a cluster, shards in a single process.' }),
  total: z.number().int(),
  position: z.number().int().meta({ description: 'Lowest change-log position all shards reflect.' }),
  shards: z.array(shardLine),
});

const shardParams = z.object({
  k: idParam('Shard number, from 0.', { min: 0, max: 4095 }),
});

function report(index: SearchShards) {
  const { live, total } = index.servers();
  return {
    live,
    total,
    position: index.position(),
    shards: index.shards().map((s) => ({
      shard: s.shard,
      state: s.state,
      ...(s.server ? { server: s.server } : {}),
      size: s.size,
      position: s.position,
      pending: s.pending,
      memory_bytes: s.memoryBytes,
      snapshot_age_s: s.snapshotAgeS ?? null,
      snapshot_position: s.snapshotPosition ?? null,
    })),
  };
}

export function registerShardsReport(registry: RouteRegistry, index: SearchShards): void {
  registry.define({
    method: 'GET',
    path: '/v0/admin/shards',
    summary: 'State, size, position and snapshot age of every search shard',
    description: 'Deployment operators only (FACE_TOKEN, or a token made with --deployment); any other token answers 403 FORBIDDEN.',
    auth: 'deployment',
    limited: false,
    response: { status: 200, description: 'The shards.', schema: shardsResponse },
    errors: [],
    async handler() {
      return report(index);
    },
  });
}

/** The shard controls; each use is recorded in `audit`. */
export function registerShardsControl(registry: RouteRegistry, control: ShardControl, audit: AuditLog): void {
  for (const [action, online] of [
    ['offline', false],
    ['online', true],
  ] as const) {
    registry.define({
      method: 'POST',
      path: `/v0/admin/shards/:k/${action}`,
      summary: online ? 'Put a search shard back into service' : 'Take a search shard out of service (it keeps receiving changes)',
      description: 'Deployment operators only (FACE_TOKEN, or a token made with --deployment); any other token answers 403 FORBIDDEN.',
      auth: 'deployment',
      limited: false,
      params: shardParams,
      response: { status: 200, description: 'All shards after the change.', schema: shardsResponse },
      errors: ['NOT_FOUND'],
      async handler({ params, ...ctx }) {
        if (online) control.setOnline(params.k);
        else control.setOffline(params.k);
        await audit.recordDeployment(principalOf(ctx), `shard.${action}`, String(params.k));
        return report(control.view);
      },
    });
  }

  registry.define({
    method: 'POST',
    path: '/v0/admin/shards/:k/rebuild',
    summary: 'Rebuild a search shard while the others serve',
    description:
      'Operator tokens only; a client token answers 403 FORBIDDEN. Takes the shard out of search ' +
      '(state failed, then rebuilding) and rebuilds it from its last snapshot plus the change log, or from the face ' +
      'database when the snapshot is unusable or older than the pruned change log; it goes live again by itself. ' +
      'Answers at once with the shards as they are; poll GET /v0/admin/shards to see it return. This is what happens ' +
      'on its own to a shard that fails.',
    auth: 'deployment',
    limited: false,
    params: shardParams,
    response: { status: 200, description: 'All shards once the rebuild has started.', schema: shardsResponse },
    errors: ['NOT_FOUND'],
    async handler({ params, ...ctx }) {
      await control.rebuild(params.k);
      await audit.recordDeployment(principalOf(ctx), 'shard.rebuild', String(params.k));
      return report(control.view);
    },
  });
}
