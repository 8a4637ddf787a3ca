/**
 * Service configuration, read once from the environment at start-up.
 *
 * Every variable has a documented default so that `npm start` works on a fresh
 * checkout; a malformed value stops the process before anything listens, with
 * the offending variable named. Settings are declared in two tables: the
 * service's (config/service-settings.ts) and the engine's
 * (config/engine-options.ts, which also feeds the addon); the tables of
 * docs/configuration.md are generated from them.
 */
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { envSchema, valuesFrom, type SettingValues } from './declare.js';
import { ENGINE_OPTIONS, type EngineConfig } from './engine-options.js';
import { SERVICE_SETTINGS } from './service-settings.js';

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

/** Empty strings in the environment mean "not set", as shells make unsetting awkward. */
function dropEmpty(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined && v !== '') out[k] = v;
  return out;
}

/**
 * The service's configuration: a value for each setting in config/service-settings.ts (grouped
 * as declared there, with its doc) and config/engine-options.ts.
 */
export type Config = SettingValues<typeof SERVICE_SETTINGS> & EngineConfig;

/** Parses the environment; throws an Error naming every invalid variable. */
export function loadConfig(
  env: NodeJS.ProcessEnv = process.env,
  opts: { root?: string; cores?: number; totalMem?: number } = {},
): Config {
  const root = opts.root ?? findProjectRoot();
  const cores = opts.cores ?? os.availableParallelism();
  const totalMem = opts.totalMem ?? os.totalmem();
  const vars = dropEmpty(env);
  const parsed = envSchema(SERVICE_SETTINGS).safeParse(vars);
  const engineVars = envSchema(ENGINE_OPTIONS).safeParse(vars);
  if (!parsed.success || !engineVars.success) {
    const issues = [...(parsed.error?.issues ?? []), ...(engineVars.error?.issues ?? [])];
    const lines = issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new Error(`invalid configuration: ${lines.join('; ')}`);
  }
  const service = valuesFrom(SERVICE_SETTINGS, parsed.data, { root, cores, totalMem, dataDir: '' });
  const config: Config = { ...service, ...valuesFrom(ENGINE_OPTIONS, engineVars.data, { root, cores, totalMem, dataDir: service.dataDir }) };
  const roleProblems = [
    (config.role === 'api' || config.role === 'shard') &&
      !config.databaseUrl &&
      `DATABASE_URL: FACE_ROLE=${config.role} needs the deployment's PostgreSQL (no embedded one)`,
    (config.role === 'api' || config.role === 'shard') && !config.token && `FACE_TOKEN: FACE_ROLE=${config.role} needs the operator token the nodes share`,
    config.role === 'camera' && !config.token && 'FACE_TOKEN: FACE_ROLE=camera needs a token its sightings are written with',
    config.role === 'camera' && !config.cameras.apiUrl && 'FACE_CAMERA_API_URL: FACE_ROLE=camera needs the API node its sightings go to',
    config.role === 'camera' && !config.cameras.list && 'FACE_CAMERAS: FACE_ROLE=camera needs cameras to read',
    config.role === 'shard' && config.cameras.list && 'FACE_CAMERAS: a shard server reads no cameras (give them to an API node or a camera worker)',
    config.role === 'api' && !config.cluster.servers && 'FACE_SHARD_SERVERS: FACE_ROLE=api needs the shard servers to search',
    config.databaseReadUrl && !config.databaseUrl && 'DATABASE_READ_URL: a replica needs its primary in DATABASE_URL',
    config.cluster.shardIds?.some((k) => k >= config.index.shards) && `FACE_SHARD_IDS: every shard must be below FACE_SHARDS=${config.index.shards}`,
  ].filter((p): p is string => typeof p === 'string');
  if (roleProblems.length) throw new Error(`invalid configuration: ${roleProblems.join('; ')}`);
  return config;
}
