/**
 * Service configuration, read once from the environment at start-up.
 *
 * Every variable has a documented default so that `npm start` works on a fresh
 * checkout; a malformed value stops the process before anything listens, with
 * the offending variable named. The engine's settings are declared apart, in
 * config/engine-options.ts, which also feeds the addon and the README.
 */
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { engineConfigFrom, engineEnvSchema, yesNo, type EngineConfig } from './engine-options.js';

/** Walks up from this module until a folder holding package.json: the project root in both src/ and dist/src/. */
export function findProjectRoot(start: string = path.dirname(fileURLToPath(import.meta.url))): string {
  let dir = start;
  for (;;) {
    if (existsSync(path.join(dir, 'package.json'))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`no package.json above ${start}`);
    dir = parent;
  }
}

const MiB = 1024 * 1024;

const intVar = (fallback: number, min = 0) =>
  z.coerce.number().int().min(min).default(fallback);

const boolVar = (fallback: boolean) => yesNo.default(fallback);

/** Empty strings in the environment mean "not set", as shells make unsetting awkward. */
function dropEmpty(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined && v !== '') out[k] = v;
  return out;
}

/** Every variable but the engine's, which config/engine-options.ts declares. */
function envSchema(root: string, cores: number, totalMem: number) {
  return z.object({
    PORT: intVar(8080).pipe(z.number().max(65535)),
    HOST: z.string().default('0.0.0.0'),
    FACE_TOKEN: z.string().optional(),
    DATABASE_URL: z.string().optional(),
    DATABASE_READ_URL: z.string().optional(),
    FACE_READ_MAX_LAG_MS: intVar(1000, 1),
    FACE_PG_PORT: intVar(0, 0).pipe(z.number().max(65535)),
    FACE_PUBLIC_URL: z.url({ protocol: /^https?$/ }).optional(),
    FACE_DB_POOL: intVar(20, 1),
    FACE_DATA_DIR: z.string().default(path.join(root, 'data')),
    // A 48 MP phone JPEG is 15 to 25 MiB.
    FACE_MAX_UPLOAD_BYTES: intVar(32 * MiB, 1),
    // verify carries two photos plus form overhead, so the body cap sits above two uploads.
    FACE_MAX_BODY_BYTES: intVar(65 * MiB, 1),
    FACE_MAX_INFLIGHT: intVar(Math.max(64, cores * 16), 1),
    // Photo routes hold an upload and a decoded image each, and the inference workers are the
    // bottleneck anyway: a few per core keeps batches full without holding memory for a queue.
    // Four per core, so that 2 x cores phone photos in the engine's heavy lane leave slots for
    // small photos in its light lane (the engine sheds by estimated wait, not by count).
    FACE_MAX_ENGINE_INFLIGHT: intVar(Math.max(8, cores * 4), 1),
    // Request bodies held at once, all requests together: a quarter of RAM, at most 512 MiB.
    FACE_MAX_BODY_MEMORY: intVar(Math.min(512 * MiB, Math.floor(totalMem / 4)), MiB),
    FACE_REQUEST_TIMEOUT_MS: intVar(30_000, 100),
    FACE_SHUTDOWN_TIMEOUT_MS: intVar(10_000, 0),
    FACE_FETCH_TIMEOUT_MS: intVar(5000, 1),
    FACE_FETCH_MAX_REDIRECTS: intVar(3, 0),
    FACE_FETCH_ALLOW_PRIVATE: boolVar(false),
    FACE_MIN_QUALITY: z.coerce.number().min(0).max(1).default(0),
    FACE_IDEMPOTENCY_TTL_S: intVar(86_400, 60),
    FACE_SHARDS: intVar(cores, 1).pipe(z.number().max(4096)),
    FACE_ROLE: z.enum(['all', 'api', 'shard']).default('all'),
    FACE_SHARD_IDS: z
      .string()
      .regex(/^\d+(,\d+)*$/, 'expected shard numbers separated by commas, e.g. 0 or 2,3')
      .transform((v) => v.split(',').map(Number))
      .optional(),
    FACE_SHARD_SERVERS: z
      .string()
      .transform((v) => v.split(',').map((e) => e.trim()).filter(Boolean))
      .pipe(z.array(z.string().regex(/^\d+(\+\d+)*@https?:\/\/[^\s,@]+$/, 'expected <shards joined by +>@<http(s) base URL>, e.g. 2+3@http://shard-2:8080')).min(1))
      .transform((entries) =>
        entries.map((e) => {
          const at = e.indexOf('@');
          return { shards: e.slice(0, at).split('+').map(Number), url: e.slice(at + 1).replace(/\/+$/, '') };
        }),
      )
      .optional(),
    FACE_SHARD_DEADLINE_MS: intVar(1000, 1),
    FACE_SHARD_MAX_BEHIND_MS: intVar(2000, 0),
    // auto is the scan: on face embeddings it beats the graphs at equal recall at
    // every size measured, up to 10M faces on one node (bench/RESULTS.md, "Search").
    FACE_INDEX_KIND: z.enum(['hnsw', 'scan', 'auto']).default('auto'),
    // Scan kind: candidates per query re-scored exactly, the scan's recall knob.
    FACE_INDEX_RERANK: intVar(512, 1).pipe(z.number().max(100_000)),
    // Graphs: f16 halves graph memory at about 1e-3 similarity error and, on face
    // embeddings, keeps f32's recall@1 without exact copies (bench/RESULTS.md).
    FACE_INDEX_SCALAR: z.enum(['f32', 'f16', 'i8']).default('f16'),
    // Absent: per scalar kind (only i8 keeps exact f32 copies to re-rank with).
    FACE_INDEX_EXACT_COPIES: yesNo.optional(),
    // 0: one per core. Every search, apply and snapshot runs on this pool.
    FACE_INDEX_THREADS: intVar(0, 0).pipe(z.number().max(1024)),
    FACE_INDEX_SNAPSHOT_SECONDS: intVar(60, 1),
    FACE_INDEX_SNAPSHOT_CHANGES: intVar(10_000, 1),
    FACE_IDENTIFY_STRICT: boolVar(false),
    FACE_IDENTIFY_MAX_N: intVar(100, 1).pipe(z.number().max(10_000)),
    FACE_FRIEND_SIGHTINGS: intVar(5, 1),
    FACE_FRIEND_WINDOW_S: intVar(604_800, 1),
    FACE_THUMBNAIL_SIZE: intVar(160, 16).pipe(z.number().max(1024)),
    FACE_THUMBNAIL_RETENTION_DAYS: intVar(0, 0),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  });
}

/** The engine's settings (`maxBatch`, `minFace`, ...) come from config/engine-options.ts. */
export interface Config extends EngineConfig {
  port: number;
  host: string;
  /** Bootstrap API token; requests bearing it are accepted. */
  token?: string;
  databaseUrl?: string;
  /** A streaming replica of DATABASE_URL for read-only routes (listings, history search, persons). */
  databaseReadUrl?: string;
  /** Reads leave the replica for the primary while it lags more than this. */
  readMaxLagMs: number;
  /** Port for the embedded PostgreSQL (used without DATABASE_URL); undefined picks a free one. */
  pgPort?: number;
  /** Base URL clients reach this service at, for links it hands out (photo URLs). */
  publicUrl?: string;
  dbPool: number;
  /** Embedded database (pg/), photo blobs (photos/). */
  dataDir: string;
  /** Enrolment refuses detected faces whose quality is below this (0 accepts every face). */
  minQuality: number;
  /** How long an Idempotency-Key answers for its write, seconds. */
  idempotencyTtlS: number;
  maxUploadBytes: number;
  maxBodyBytes: number;
  /** Requests in progress on light routes (lookups, listings, changes). */
  maxInflight: number;
  /** Requests in progress on photo routes (detect, verify, identify, enrol): their own limit. */
  maxEngineInflight: number;
  /** Request body bytes held at once; admission over it answers 503. */
  maxBodyMemory: number;
  /** A request unanswered after this many ms gets 503 and its work is cancelled. */
  requestTimeoutMs: number;
  shutdownTimeoutMs: number;
  fetch: { timeoutMs: number; maxRedirects: number; allowPrivate: boolean };
  /**
   * all: API, shards (and, without DATABASE_URL, PostgreSQL) in this process; api: the API,
   * searching shard servers; shard: a shard server, holding `cluster.shardIds`.
   */
  role: 'all' | 'api' | 'shard';
  cluster: {
    /** Shard role: the shards held (default all of them). */
    shardIds?: number[];
    /** API role: every shard server and the shards it holds. */
    servers?: { url: string; shards: number[] }[];
    /** Longest wait for one call to a shard server. */
    deadlineMs: number;
    /** A shard server that has left a committed change unapplied for longer is not caught up (not live). */
    maxBehindMs: number;
  };
  /** Search shards: their number, kind, storage, and how often they are snapshotted to `<dataDir>/index`. */
  index: {
    shards: number;
    /** Graphs (hnsw) or batched scans of 4-bit codes re-ranked in f16 (scan); auto is the scan. */
    kind: 'hnsw' | 'scan' | 'auto';
    /** Scan kind: candidates per query re-scored exactly. */
    rerank: number;
    scalar: 'f32' | 'f16' | 'i8';
    /** Keep exact f32 copies to re-rank with; undefined: per scalar kind. */
    exactCopies?: boolean;
    /** Index worker threads; 0: one per core. */
    threads: number;
    snapshotSeconds: number;
    snapshotChanges: number;
  };
  identify: {
    /** Default of identify's `strict`: answer 503 rather than search with shards missing. */
    strict: boolean;
    /** Largest `n` identify accepts. */
    maxN: number;
  };
  /** Camera history: friend-or-foe rule and sighting thumbnails. */
  history: {
    /** A person is a friend once seen at least this many times (the new sighting included)... */
    friendSightings: number;
    /** ...within this many seconds. */
    friendWindowS: number;
    /** Longer side of a sighting thumbnail, in pixels. */
    thumbnailSize: number;
    /** Thumbnails of sightings older than this many days are deleted (the events stay); 0 keeps them. */
    thumbnailRetentionDays: number;
  };
  logLevel: string;
}

/** Parses the environment; throws an Error naming every invalid variable. */
export function loadConfig(
  env: NodeJS.ProcessEnv = process.env,
  opts: { root?: string; cores?: number; totalMem?: number } = {},
): Config {
  const root = opts.root ?? findProjectRoot();
  const cores = opts.cores ?? os.availableParallelism();
  const totalMem = opts.totalMem ?? os.totalmem();
  const vars = dropEmpty(env);
  const parsed = envSchema(root, cores, totalMem).safeParse(vars);
  const engineVars = engineEnvSchema().safeParse(vars);
  if (!parsed.success || !engineVars.success) {
    const issues = [...(parsed.error?.issues ?? []), ...(engineVars.error?.issues ?? [])];
    const lines = issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new Error(`invalid configuration: ${lines.join('; ')}`);
  }
  const e = parsed.data;
  const roleProblems = [
    e.FACE_ROLE !== 'all' && !e.DATABASE_URL && `DATABASE_URL: FACE_ROLE=${e.FACE_ROLE} needs the deployment's PostgreSQL (no embedded one)`,
    e.FACE_ROLE !== 'all' && !e.FACE_TOKEN && `FACE_TOKEN: FACE_ROLE=${e.FACE_ROLE} needs the operator token the nodes share`,
    e.FACE_ROLE === 'api' && !e.FACE_SHARD_SERVERS && 'FACE_SHARD_SERVERS: FACE_ROLE=api needs the shard servers to search',
    e.DATABASE_READ_URL && !e.DATABASE_URL && 'DATABASE_READ_URL: a replica needs its primary in DATABASE_URL',
    e.FACE_SHARD_IDS?.some((k) => k >= e.FACE_SHARDS) && `FACE_SHARD_IDS: every shard must be below FACE_SHARDS=${e.FACE_SHARDS}`,
  ].filter((p): p is string => typeof p === 'string');
  if (roleProblems.length) throw new Error(`invalid configuration: ${roleProblems.join('; ')}`);
  return {
    port: e.PORT,
    host: e.HOST,
    token: e.FACE_TOKEN,
    databaseUrl: e.DATABASE_URL,
    databaseReadUrl: e.DATABASE_READ_URL,
    readMaxLagMs: e.FACE_READ_MAX_LAG_MS,
    pgPort: e.FACE_PG_PORT || undefined,
    publicUrl: e.FACE_PUBLIC_URL,
    dbPool: e.FACE_DB_POOL,
    dataDir: e.FACE_DATA_DIR,
    ...engineConfigFrom(engineVars.data, { root, cores, dataDir: e.FACE_DATA_DIR }),
    minQuality: e.FACE_MIN_QUALITY,
    idempotencyTtlS: e.FACE_IDEMPOTENCY_TTL_S,
    maxUploadBytes: e.FACE_MAX_UPLOAD_BYTES,
    maxBodyBytes: e.FACE_MAX_BODY_BYTES,
    maxInflight: e.FACE_MAX_INFLIGHT,
    maxEngineInflight: e.FACE_MAX_ENGINE_INFLIGHT,
    maxBodyMemory: e.FACE_MAX_BODY_MEMORY,
    requestTimeoutMs: e.FACE_REQUEST_TIMEOUT_MS,
    shutdownTimeoutMs: e.FACE_SHUTDOWN_TIMEOUT_MS,
    fetch: {
      timeoutMs: e.FACE_FETCH_TIMEOUT_MS,
      maxRedirects: e.FACE_FETCH_MAX_REDIRECTS,
      allowPrivate: e.FACE_FETCH_ALLOW_PRIVATE,
    },
    role: e.FACE_ROLE,
    cluster: { shardIds: e.FACE_SHARD_IDS, servers: e.FACE_SHARD_SERVERS, deadlineMs: e.FACE_SHARD_DEADLINE_MS, maxBehindMs: e.FACE_SHARD_MAX_BEHIND_MS },
    index: {
      shards: e.FACE_SHARDS,
      kind: e.FACE_INDEX_KIND,
      rerank: e.FACE_INDEX_RERANK,
      scalar: e.FACE_INDEX_SCALAR,
      exactCopies: e.FACE_INDEX_EXACT_COPIES,
      threads: e.FACE_INDEX_THREADS,
      snapshotSeconds: e.FACE_INDEX_SNAPSHOT_SECONDS,
      snapshotChanges: e.FACE_INDEX_SNAPSHOT_CHANGES,
    },
    identify: { strict: e.FACE_IDENTIFY_STRICT, maxN: e.FACE_IDENTIFY_MAX_N },
    history: {
      friendSightings: e.FACE_FRIEND_SIGHTINGS,
      friendWindowS: e.FACE_FRIEND_WINDOW_S,
      thumbnailSize: e.FACE_THUMBNAIL_SIZE,
      thumbnailRetentionDays: e.FACE_THUMBNAIL_RETENTION_DAYS,
    },
    logLevel: e.LOG_LEVEL,
  };
}
