/**
 * The service's settings, each declared once: variable, type and range,
 * default, doc. Grouped as `Config` holds them (`index.rerank` is
 * `config.index.rerank`), in the order of docs/configuration.md. The engine's settings are the
 * other table (config/engine-options.ts).
 *
 * config/index.ts reads the environment with this table and checks what spans
 * settings (a role's needs); the table of docs/configuration.md is generated from it,
 * and service-settings.test.ts fails when that table, the values `loadConfig`
 * returns, or a variable read elsewhere in src/ disagree with it. Adding a
 * setting: an entry here and the code that uses it; then regenerate the
 * table as the test says.
 */
import path from 'node:path';
import { z } from 'zod';
import { choice, flag, integer, number, set, shaped, text, unset } from './declare.js';

const MiB = 1024 * 1024;

/** `0@http://shard-0:8080,2+3@http://shard-2:8080`: each shard server's base URL and the shards it holds. */
const shardServers = shaped(
  '`<shards joined by +>@<base URL>`, comma-separated',
  '0@http://shard-0:8080,1+2@http://shard-1:8080',
  z
    .string()
    .transform((v) => v.split(',').map((e) => e.trim()).filter(Boolean))
    .pipe(z.array(z.string().regex(/^\d+(\+\d+)*@https?:\/\/[^\s,@]+$/, 'expected <shards joined by +>@<http(s) base URL>, e.g. 2+3@http://shard-2:8080')).min(1))
    .transform((entries) =>
      entries.map((e) => {
        const at = e.indexOf('@');
        return { shards: e.slice(0, at).split('+').map(Number), url: e.slice(at + 1).replace(/\/+$/, '') };
      }),
    ),
);

/** `door-1=rtsp://cam-1/stream,lobby=/videos/lobby.mp4`: each camera's id and source. */
const cameraList = shaped(
  '`<cam_id>=<source>`, comma-separated; a source is an rtsp://, rtsp+udp://, http(s):// URL or a file',
  'door-1=rtsp://10.0.0.5/stream,lobby=rtsp+udp://10.0.0.6/live',
  z
    .string()
    .transform((v) => v.split(',').map((e) => e.trim()).filter(Boolean))
    .pipe(z.array(z.string().regex(/^[^=\s]{1,255}=\S+$/, 'expected <cam_id>=<source>, e.g. door-1=rtsp://10.0.0.5/stream')).min(1))
    .transform((entries) =>
      entries.map((e) => {
        const at = e.indexOf('=');
        const source = e.slice(at + 1);
        const udp = /^rtsp\+udp:/i.test(source);
        return { camId: e.slice(0, at), source: udp ? source.replace(/^rtsp\+udp:/i, 'rtsp:') : source, transport: udp ? ('udp' as const) : ('tcp' as const) };
      }),
    )
    .refine((cams) => new Set(cams.map((c) => c.camId)).size === cams.length, 'each cam_id once'),
);

const shardIds = shaped(
  'shard numbers, comma-separated',
  '0,1',
  z
    .string()
    .regex(/^\d+(,\d+)*$/, 'expected shard numbers separated by commas, e.g. 0 or 2,3')
    .transform((v) => v.split(',').map(Number)),
);

export const SERVICE_SETTINGS = {
  port: set({ env: 'PORT', kind: integer(0, 65535), default: 8080, doc: 'listen port (0: a free one)' }),
  host: set({ env: 'HOST', kind: text('address', '127.0.0.1'), default: '0.0.0.0', doc: 'listen address' }),
  token: unset({
    env: 'FACE_TOKEN',
    kind: text('token', 'op-secret'),
    shown: 'unset',
    doc: 'a deployment operator token, always accepted, never stored (every node of a cluster the same)',
  }),
  databaseUrl: unset({
    env: 'DATABASE_URL',
    kind: text('postgres:// URL', 'postgres://face@db:5432/face'),
    shown: 'unset',
    doc: 'external PostgreSQL; unset starts the embedded one',
  }),
  databaseReadUrl: unset({
    env: 'DATABASE_READ_URL',
    kind: text('postgres:// URL', 'postgres://face@replica:5432/face'),
    shown: 'unset',
    doc: 'a streaming replica of `DATABASE_URL` for listings, history search and person views',
  }),
  readMaxLagMs: set({ env: 'FACE_READ_MAX_LAG_MS', kind: integer(1), default: 1000, doc: 'reads leave the replica for the primary while it lags more than this' }),
  pgPort: unset({ env: 'FACE_PG_PORT', kind: integer(1, 65535), shown: 'a free port', doc: 'embedded PostgreSQL port' }),
  publicUrl: unset({ env: 'FACE_PUBLIC_URL', kind: shaped('http(s) URL', 'https://faces.example.com', z.url({ protocol: /^https?$/ })), shown: 'from `Host`', doc: 'base of the photo URLs handed out' }),
  dbPool: set({ env: 'FACE_DB_POOL', kind: integer(1), default: 20, doc: 'PostgreSQL connections' }),
  dataDir: set({
    env: 'FACE_DATA_DIR',
    kind: text('path', '/var/lib/face'),
    default: ({ root }) => path.join(root, 'data'),
    shown: '`./data`',
    doc: 'embedded PostgreSQL, photo blobs, search shard snapshots, temporary files (`tmp/`)',
  }),
  minQuality: set({
    env: 'FACE_MIN_QUALITY',
    kind: number(0, 1),
    default: 0,
    shown: '0 (off)',
    doc: 'enrolment refuses detected faces of lower `quality` with 422 `LOW_QUALITY`',
  }),
  idempotencyTtlS: set({
    env: 'FACE_IDEMPOTENCY_TTL_S',
    kind: integer(60),
    default: 86_400,
    shown: '86400 (a day)',
    doc: 'how long an `Idempotency-Key` of `POST /v0/face/` answers for its write: a retry within it gets the first answer, not a second copy',
  }),
  // A 48 MP phone JPEG is 15 to 25 MiB.
  maxUploadBytes: set({ env: 'FACE_MAX_UPLOAD_BYTES', kind: integer(1), default: 32 * MiB, shown: '32 MiB', doc: 'largest photo' }),
  // verify carries two photos plus form overhead, so the body cap sits above two uploads.
  maxBodyBytes: set({ env: 'FACE_MAX_BODY_BYTES', kind: integer(1), default: 65 * MiB, shown: '65 MiB', doc: 'largest request body' }),
  maxInflight: set({
    env: 'FACE_MAX_INFLIGHT',
    kind: integer(1),
    default: ({ cores }) => Math.max(64, cores * 16),
    shown: 'max(64, 16 × cores)',
    doc: 'concurrent requests other than photo requests (lookups, listings, changes)',
  }),
  // Photo routes hold an upload and a decoded image each, and the inference workers are the
  // bottleneck anyway: a few per core keeps batches full without holding memory for a queue.
  // Four per core, so that 2 x cores phone photos in the engine's heavy lane leave slots for
  // small photos in its light lane (the engine sheds by estimated wait, not by count).
  maxEngineInflight: set({
    env: 'FACE_MAX_ENGINE_INFLIGHT',
    kind: integer(1),
    default: ({ cores }) => Math.max(8, cores * 4),
    shown: 'max(8, 4 × cores)',
    doc: 'concurrent photo requests (detect, verify, identify, face add)',
  }),
  maxBodyMemory: set({
    env: 'FACE_MAX_BODY_MEMORY',
    kind: integer(MiB),
    default: ({ totalMem }) => Math.min(512 * MiB, Math.floor(totalMem / 4)),
    shown: 'min(512 MiB, RAM/4)',
    doc: 'request body bytes held at once, all requests together; admission over it answers 503',
  }),
  requestTimeoutMs: set({
    env: 'FACE_REQUEST_TIMEOUT_MS',
    kind: integer(100),
    default: 30_000,
    doc: "unanswered by then: 503 `DEADLINE_EXCEEDED`, and the request's engine work is cancelled",
  }),
  shutdownTimeoutMs: set({ env: 'FACE_SHUTDOWN_TIMEOUT_MS', kind: integer(0), default: 10_000, doc: 'graceful stop: wait for requests in flight' }),
  fetch: {
    timeoutMs: set({ env: 'FACE_FETCH_TIMEOUT_MS', kind: integer(1), default: 5000, doc: 'photo URLs: longest fetch' }),
    maxRedirects: set({ env: 'FACE_FETCH_MAX_REDIRECTS', kind: integer(0), default: 3, doc: 'photo URLs: redirects followed' }),
    allowPrivate: set({
      env: 'FACE_FETCH_ALLOW_PRIVATE',
      kind: flag(),
      default: false,
      doc: 'photo URLs may name private, loopback and link-local addresses',
    }),
  },
  role: set({
    env: 'FACE_ROLE',
    kind: choice('all', 'api', 'shard', 'camera'),
    default: 'all',
    shown: '`all`',
    doc: '`all` (one process), `api` (API node of a cluster), `shard` (shard server) or `camera` (a camera worker writing to `FACE_CAMERA_API_URL`); `api` and `shard` need `DATABASE_URL` and `FACE_TOKEN`',
  }),
  cluster: {
    shardIds: unset({
      env: 'FACE_SHARD_IDS',
      kind: shardIds,
      shown: 'all shards',
      doc: 'shard server: the shards it holds, e.g. `2,3`',
    }),
    servers: unset({
      env: 'FACE_SHARD_SERVERS',
      kind: shardServers,
      shown: 'unset',
      doc: 'API node: every shard server and its shards, `0@http://shard-0:8080,2+3@http://shard-2:8080`; each shard held exactly once',
    }),
    deadlineMs: set({ env: 'FACE_SHARD_DEADLINE_MS', kind: integer(1), default: 1000, doc: 'API node: longest wait for one search or state call to a shard server' }),
    maxBehindMs: set({
      env: 'FACE_SHARD_MAX_BEHIND_MS',
      kind: integer(0),
      default: 2000,
      doc: 'API node: a shard server that has left a committed change unapplied for longer is not caught up, so not live',
    }),
  },
  index: {
    shards: set({
      env: 'FACE_SHARDS',
      kind: integer(1, 4096),
      default: ({ cores }) => cores,
      shown: 'cores',
      doc: 'search shards, fixed per deployment: recorded in the database by the first node, and a node configured otherwise refuses to start (to re-shard, stop every node, `DELETE FROM search_layout; DELETE FROM shard_snapshots;`, start them with the new count: the shards are rebuilt). Set it explicitly for a cluster',
    }),
    // auto is the scan: on face embeddings it beats the graphs at equal recall at
    // every size measured, up to 10M faces on one node (bench/RESULTS.md, "Search").
    kind: set({
      env: 'FACE_INDEX_KIND',
      kind: choice('hnsw', 'scan', 'auto'),
      default: 'auto',
      shown: '`auto`',
      doc: 'search shards: `scan` (every face as a 16-byte 4-bit code, scanned for a whole batch of concurrent queries at once, the best `FACE_INDEX_RERANK` re-scored exactly from f16; about 300 B per face at 128 dims), `hnsw` (graphs), or `auto`, which is the scan: it is faster at the same recall at every size measured up to 10M faces on one node ([benchmarks](../bench/RESULTS.md)). Changing it rebuilds the shards from the database',
    }),
    rerank: set({ env: 'FACE_INDEX_RERANK', kind: integer(1, 100_000), default: 512, doc: 'scan: candidates per query re-scored exactly (its recall knob)' }),
    // Graphs: f16 halves graph memory at about 1e-3 similarity error and, on face
    // embeddings, keeps f32's recall@1 without exact copies (bench/RESULTS.md).
    scalar: set({ env: 'FACE_INDEX_SCALAR', kind: choice('f32', 'f16', 'i8'), default: 'f16', shown: '`f16`', doc: 'graphs: scalar type' }),
    exactCopies: unset({
      env: 'FACE_INDEX_EXACT_COPIES',
      kind: flag(),
      shown: 'per scalar: only `i8`',
      doc: 'graphs: keep an f32 copy of every face (512 B at 128 dims) to re-score candidates exactly',
    }),
    threads: set({
      env: 'FACE_INDEX_THREADS',
      kind: integer(0, 1024),
      default: 0,
      shown: '0 (cores)',
      doc: "threads of the index worker pool, which runs every search, apply and snapshot (the strangers' index, which groups persons, has one thread of its own)",
    }),
    snapshotSeconds: set({ env: 'FACE_INDEX_SNAPSHOT_SECONDS', kind: integer(1), default: 60, doc: 'a shard is snapshotted at least this often while it changes' }),
    snapshotChanges: set({
      env: 'FACE_INDEX_SNAPSHOT_CHANGES',
      kind: integer(1),
      default: 10_000,
      doc: 'a shard is snapshotted after this many changes; the change log is pruned below the oldest snapshot',
    }),
  },
  fairShare: {
    ratePerS: set({
      env: 'FACE_TOKEN_RATE_PER_S',
      kind: number(0, 1_000_000),
      default: 0,
      shown: '0 (no limit)',
      doc: 'requests per second of each token unless its tenant or itself sets another; over it the answer is 429 `RATE_LIMITED` with `Retry-After`',
    }),
    // No limit unless set: one application alone may use every engine slot, as before tenants,
    // and a full lane is shared out between tenants anyway (http/limiter.ts). A limit refuses a
    // flood before its requests compete for the lane at all.
    photosInFlight: set({
      env: 'FACE_TOKEN_PHOTOS_IN_FLIGHT',
      kind: integer(0),
      default: 0,
      shown: '0 (no limit)',
      doc: 'photo requests in progress at once of each token unless its tenant or itself sets another; over it the answer is 429 `RATE_LIMITED`. Without it, a tenant may hold every photo slot until others need theirs (their share of a full lane)',
    }),
  },
  identify: {
    strict: set({ env: 'FACE_IDENTIFY_STRICT', kind: flag(), default: false, doc: "default of identify's `strict`: answer 503 rather than search with shards missing" }),
    maxN: set({ env: 'FACE_IDENTIFY_MAX_N', kind: integer(1, 10_000), default: 100, doc: 'largest `n` for identify' }),
  },
  history: {
    friendSightings: set({
      env: 'FACE_FRIEND_SIGHTINGS',
      kind: integer(1),
      default: 5,
      doc: "a sighting is a friend's when its person was seen at least this many times (it included) within `FACE_FRIEND_WINDOW_S`",
    }),
    friendWindowS: set({ env: 'FACE_FRIEND_WINDOW_S', kind: integer(1), default: 604_800, shown: '604800 (a week)', doc: 'the friend rule\'s window, seconds' }),
    thumbnailSize: set({ env: 'FACE_THUMBNAIL_SIZE', kind: integer(16, 1024), default: 160, doc: 'longer side in pixels of the face thumbnail kept with each sighting' }),
    thumbnailRetentionDays: set({
      env: 'FACE_THUMBNAIL_RETENTION_DAYS',
      kind: integer(0),
      default: 0,
      shown: '0 (keep)',
      doc: 'delete thumbnails of sightings older than this (hourly); the events stay',
    }),
  },
  persons: {
    threshold: set({
      env: 'FACE_PERSON_THRESHOLD',
      kind: shaped(
        '`strict`, `medium`, `low`, a confidence 0 to 1, or `off`',
        'strict',
        z.union([z.enum(['strict', 'medium', 'low', 'off']), z.coerce.number().min(0).max(1)]),
      ),
      default: 'medium',
      shown: '`medium`',
      doc: "what a stranger's face must reach against an earlier stranger's sighting to join their person, in identify's 1:N confidence among the sightings searched: a preset is a share of sightings that join a wrong person (`strict` 1e-5, `medium` 1e-3, `low` 1e-1); `off`: no grouping, and no embedding kept with a sighting",
    }),
    windowS: set({
      env: 'FACE_PERSON_WINDOW_S',
      kind: integer(0),
      default: 0,
      shown: '0 (all kept)',
      doc: "only strangers' sightings seen within this many seconds are matched; 0: every sighting whose thumbnail is kept",
    }),
  },
  cameras: {
    list: unset({
      env: 'FACE_CAMERAS',
      kind: cameraList,
      shown: 'none',
      doc: 'cameras read by this process (roles `all`, `api`, `camera`), each turned into one sighting per person passing by; needs `ffmpeg`',
    }),
    apiUrl: unset({
      env: 'FACE_CAMERA_API_URL',
      kind: text('http(s) base URL', 'http://face-api:8080'),
      shown: 'unset',
      doc: 'role `camera`: the API node its sightings go to, with `FACE_TOKEN`',
    }),
    fps: set({ env: 'FACE_CAMERA_FPS', kind: number(0.1, 30), default: 5, doc: 'frames per second decoded and detected per camera; a live stream drops the frames the engine cannot take' }),
    trackMaxS: set({
      env: 'FACE_CAMERA_TRACK_MAX_S',
      kind: integer(1),
      default: 60,
      doc: 'a face in view this long gives a sighting and is followed on as a new passage',
    }),
    lostS: set({ env: 'FACE_CAMERA_LOST_S', kind: number(0.1, 600), default: 1.5, doc: 'a face unseen this long has passed: its sighting is written' }),
    stallS: set({ env: 'FACE_CAMERA_STALL_S', kind: integer(1), default: 10, doc: 'a stream that sends no frame this long is reconnected (with backoff, 1 s doubling to 30 s)' }),
    // Its embeddings only tell faces apart from one frame to the next when their boxes jump.
    recognizer: set({
      env: 'FACE_CAMERA_RECOGNIZER',
      kind: text('recogniser spec', 'sface:mirror'),
      default: 'sface',
      shown: '`sface`',
      doc: 'role `camera`: the recogniser the worker runs unless `FACE_RECOGNIZER` names one; the lightest, since its embeddings only follow a face whose box jumps between frames',
    }),
  },
  logLevel: set({
    env: 'LOG_LEVEL',
    kind: choice('fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'),
    default: 'info',
    shown: '`info`',
    doc: 'JSON logs on stdout (pino); uploads and tokens are never logged',
  }),
};
