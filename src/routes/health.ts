/**
 * GET /health, on every role: liveness and what the engine runs on (execution providers,
 * SIMD level, recogniser), plus the request load, and after a recogniser
 * switch the re-embedding of stored faces.
 *
 * No token needed: load balancers and orchestrators probe it without
 * credentials, and then it reveals nothing about stored data. With a token it
 * adds counts: every tenant's for a deployment's operator, its own tenant's
 * for any other (services/health.ts). It bypasses the concurrency
 * limit so a saturated service still reports itself; while shutting down it
 * answers 503 so traffic drains away.
 */
import { z } from 'zod';
import type { RouteRegistry } from '../http/registry.js';
import { health, type HealthDeps } from '../services/health.js';

const healthResponse = z.object({
  status: z.literal('ok'),
  role: z.enum(['all', 'api', 'shard', 'camera']).meta({ description: 'FACE_ROLE: all in one process, an API node, a shard server, or a camera worker.' }),
  engine: z.object({
    providers: z.array(z.string()).meta({ description: 'Execution providers in use, in priority order.' }),
    simd: z.string().meta({ description: 'SIMD level of the similarity kernels.' }),
    recognizer: z.string().meta({ description: 'Manifest id of the recogniser (embeddings).' }),
    detector: z.string().meta({ description: 'Manifest id of the face detector.' }),
    dim: z.number().int().meta({ description: 'Embedding dimension.' }),
    models: z.array(z.object({ id: z.string(), onnx: z.string() })),
    fixed_shapes: z.boolean().meta({ description: 'Whether model inputs are padded to a few fixed shapes (FACE_FIXED_SHAPES; on by default with a GPU provider).' }),
    warmup: z
      .array(
        z.object({
          model: z.string(),
          shapes: z.number().int().meta({ description: 'Input shapes the model ran at before the service was ready.' }),
          ms: z.number().int().meta({ description: 'What they took together, the slowest worker of each (TensorRT engine builds or cache loads included).' }),
        }),
      )
      .meta({ description: 'The warm-up at start, one entry per model; empty without fixed shapes.' }),
  })
    .optional()
    .meta({ description: 'Absent on a shard server, which runs no models.' }),
  search: z
    .object({
      live: z.number().int().meta({ description: 'Search servers in service: shard servers (FACE_ROLE=api), held shards (shard), shards (all).' }),
      total: z.number().int(),
      faces: z
        .number()
        .int()
        .optional()
        .meta({ description: "With a token only: the faces the shards hold, every tenant's, for a deployment operator's token; its tenant's stored faces for any other." }),
    })
    .optional()
    .meta({ description: 'The search shards; absent without a face database. Details: GET /v0/admin/shards.' }),
  migration: z
    .object({
      state: z.enum(['running', 'done']).meta({ description: 'running: faces are still being re-embedded, and no search shard counts as live.' }),
      from: z.array(z.string()).meta({ description: 'Recognisers whose embeddings are being replaced.' }),
      to: z.string().meta({ description: 'The recogniser in use.' }),
      done: z.number().int().meta({ description: "Faces whose embedding is the current recogniser's." }),
      failed: z.number().int().meta({ description: 'Faces whose photo could not be re-embedded: kept, not searchable; the log gives each reason.' }),
      total: z.number().int().meta({ description: 'Faces stored when the migration started.' }),
    })
    .optional()
    .meta({ description: 'Present when stored faces were embedded by another recogniser: their re-embedding from the stored photos.' }),
  database: z
    .object({
      server: z.string().optional().meta({ description: "The server this node writes to, `address:port` as it reports itself: behind the database proxy, the Patroni member that leads." }),
      timeline: z.number().int().optional().meta({ description: "The server's WAL timeline: one more after each promotion." }),
      read_only: z.boolean().optional().meta({ description: 'True when the server is a replica, where writes fail: a failover in progress.' }),
      failovers: z.number().int().meta({ description: 'Times the server or its timeline changed since this node started.' }),
      failed_checks: z.number().int().meta({ description: 'Checks (every 2 s) that got no answer: the database unreachable.' }),
      checked_s_ago: z.number().optional().meta({ description: 'Seconds since the last check that answered.' }),
    })
    .optional()
    .meta({ description: 'The database this node writes to; absent without a face database.' }),
  cameras: z
    .array(
      z.object({
        cam_id: z.string(),
        source: z.string().meta({ description: 'The stream or file, credentials hidden.' }),
        state: z.enum(['connecting', 'streaming', 'reconnecting', 'ended', 'failed', 'stopped']).meta({
          description:
            'connecting: starting the decoder; streaming: frames arrive; reconnecting: waiting to try again (last_error says why); ended: a file read to its end; ' +
            'failed: a file the decoder refused (last_error says why); stopped: the worker is stopping.',
        }),
        last_error: z.string().optional().meta({ description: 'Why the stream last stopped (the decoder\'s last words, a stall), while it is not streaming.' }),
        frames_decoded: z.number().int(),
        frames_processed: z.number().int().meta({ description: 'Frames the detector took.' }),
        frames_dropped: z.number().int().meta({ description: 'Frames of a live stream replaced by a newer one before the detector was free.' }),
        tracks_open: z.number().int().meta({ description: 'Faces in view being followed.' }),
        sightings_written: z.number().int(),
        sightings_failed: z.number().int().meta({ description: 'Sightings refused or not written in time (each logged).' }),
        reconnects: z.number().int(),
      }),
    )
    .optional()
    .meta({ description: 'The cameras this process reads (FACE_CAMERAS); absent when it reads none.' }),
  inflight: z.number().int().meta({ description: 'Requests in progress that count toward the limit.' }),
  max_inflight: z.number().int(),
});

export function registerHealth(registry: RouteRegistry, deps: HealthDeps): void {
  registry.define({
    method: 'GET',
    path: '/health',
    summary: 'Service health, engine details and load',
    description: 'No token needed; a token, when sent, adds the counts it may see (search.faces). Answers 503 while the service shuts down.',
    auth: 'optional',
    limited: false,
    response: { status: 200, description: 'The service is up.', schema: healthResponse },
    errors: [],
    async handler({ server, principal }) {
      return { ...(await health(deps, principal)), inflight: server.inflight, max_inflight: server.maxInflight };
    },
  });
}
