/**
 * What GET /health reports about the service below HTTP: its role, what the
 * engine runs on (execution providers, SIMD level, models, fixed shapes and
 * the warm-up that ran before the service said ready), the search
 * shards in service and the faces they hold, after a recogniser switch the
 * re-embedding of stored faces, and which database server this node writes to
 * (db/writer.ts), and the cameras it reads. The route adds the request load.
 *
 * Counts of stored data are for a caller with a token: the faces of every
 * tenant for a deployment's operator, its own tenant's for any other token.
 * Without one (a load balancer's probe) it tells liveness and readiness only.
 */
import type { TenantId, Principal } from '../auth.js';
import type { CameraState } from '../camera/camera.js';
import type { WriterWatch } from '../db/writer.js';
import { warmupByModel, type Engine } from '../native/engine.js';
import type { SearchShards } from '../search/search-shards.js';
import type { EmbeddingMigration } from './reembed.js';

export interface HealthDeps {
  role: 'all' | 'api' | 'shard' | 'camera';
  /** Absent on a shard server, which runs no models. */
  engine?: Engine;
  /** Absent without a face database. */
  index?: SearchShards;
  migration?: EmbeddingMigration;
  /** Which database server this node writes to; absent without a face database. */
  writer?: Pick<WriterWatch, 'current'>;
  /** The cameras this process reads (FACE_CAMERAS). */
  cameras?: { states(): CameraState[] };
  /** The faces a tenant holds, for a tenant's token; absent without a face database. */
  tenantFaces?: (tenant: TenantId) => Promise<number>;
}

export async function health({ role, engine, index, migration, writer, cameras, tenantFaces }: HealthDeps, caller?: Principal) {
  const info = engine?.info();
  return {
    status: 'ok' as const,
    role,
    ...(info
      ? {
          engine: {
            providers: info.providers,
            simd: info.simd,
            recognizer: info.recognizer,
            detector: info.detector,
            dim: info.dim,
            models: info.models.map((m) => ({ id: m.id, onnx: m.onnx })),
            fixed_shapes: info.fixedShapes,
            warmup: warmupByModel(info).map((w) => ({ ...w, ms: Math.round(w.ms) })),
          },
        }
      : {}),
    ...(index ? { search: await searchSummary(index, caller, tenantFaces) } : {}),
    ...(migration ? { migration: migration.status() } : {}),
    ...(writer ? { database: databaseSummary(writer) } : {}),
    ...(cameras ? { cameras: cameras.states() } : {}),
  };
}

function databaseSummary(writer: Pick<WriterWatch, 'current'>) {
  const w = writer.current();
  return {
    ...(w.server !== undefined ? { server: w.server, timeline: w.timeline, read_only: w.readOnly } : {}),
    failovers: w.failovers,
    failed_checks: w.failedChecks,
    ...(w.checkedAt !== undefined ? { checked_s_ago: Math.round((Date.now() - w.checkedAt) / 100) / 10 } : {}),
  };
}

async function searchSummary(index: SearchShards, caller: Principal | undefined, tenantFaces: HealthDeps['tenantFaces']) {
  const { live, total } = index.servers();
  if (caller?.deployment) return { live, total, faces: index.shards().reduce((n, s) => n + s.size, 0) };
  const faces = caller && tenantFaces ? await tenantFaces(caller.tenant) : undefined;
  return { live, total, ...(faces !== undefined ? { faces } : {}) };
}
