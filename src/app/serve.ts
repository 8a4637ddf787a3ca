/**
 * What the starters of every role share: the service's version, listening
 * with the configured limits, and the cameras' settings.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { StaticTokenVerifier, type TokenVerifier } from '../auth.js';
import type { CameraOptions } from '../camera/camera.js';
import { findProjectRoot, type Config } from '../config/index.js';
import { databaseUnavailable } from '../db/client.js';
import { FairShare } from '../http/fair-share.js';
import type { RouteRegistry } from '../http/registry.js';
import { listen } from '../http/server.js';
import type { Logger } from '../log.js';
import type { ServiceMetrics } from '../metrics/service-metrics.js';

export function serviceVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(path.join(findProjectRoot(), 'package.json'), 'utf8')) as { version?: string };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}

/**
 * Listens accepting the operator token alone (shard servers, camera workers, whose routes are
 * between the nodes of one deployment); `undo` releases what was opened when it cannot.
 */
export async function serveOperatorOnly(config: Config, registry: RouteRegistry, metrics: ServiceMetrics, log: Logger, undo: () => Promise<void>) {
  const operator = new StaticTokenVerifier(config.token);
  try {
    return await serve(config, registry, operator, metrics, log);
  } catch (err) {
    await undo();
    throw err;
  }
}

/** Listens with the configured limits; every role serves through this. */
export function serve(config: Config, registry: RouteRegistry, verifier: TokenVerifier, metrics: ServiceMetrics, log: Logger) {
  return listen({
    host: config.host,
    port: config.port,
    registry,
    verifier,
    fairShare: new FairShare(config.fairShare),
    limits: {
      maxBodyBytes: config.maxBodyBytes,
      maxUploadBytes: config.maxUploadBytes,
      maxInflight: config.maxInflight,
      maxEngineInflight: config.maxEngineInflight,
      maxBodyMemory: config.maxBodyMemory,
      requestTimeoutMs: config.requestTimeoutMs,
    },
    shutdownTimeoutMs: config.shutdownTimeoutMs,
    log,
    observer: (sample) => metrics.requestFinished(sample),
    translateError: databaseUnavailable,
  });
}

/** The cameras' settings, as each camera takes them. */
export function cameraOptions(config: Config): CameraOptions {
  const { fps, trackMaxS, lostS, stallS } = config.cameras;
  return { fps, maxTrackMs: trackMaxS * 1000, lostMs: lostS * 1000, stallMs: stallS * 1000 };
}
