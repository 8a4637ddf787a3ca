/** The camera worker's starter (FACE_ROLE=camera). */
import { Cameras } from '../camera/cameras.js';
import { HttpSightingWriter } from '../camera/http-writer.js';
import type { Config } from '../config/index.js';
import { log as rootLog, type Logger } from '../log.js';
import { ServiceMetrics } from '../metrics/service-metrics.js';
import type { Engine } from '../native/engine.js';
import { buildCameraRegistry } from '../routes/index.js';
import { cameraOptions, serveOperatorOnly, serviceVersion } from './serve.js';

export interface RunningCameraWorker {
  port: number;
  cameras: Cameras;
  metrics: ServiceMetrics;
  close(): Promise<void>;
}

/**
 * A camera worker (FACE_ROLE=camera): the cameras of FACE_CAMERAS, their
 * faces detected and followed by this process's engine, their sightings
 * written to the API node at FACE_CAMERA_API_URL with FACE_TOKEN. It serves
 * /health (the cameras' states) and /metrics; no database, no face routes.
 * `cameras.done` resolves once every camera has stopped (files read to
 * their end).
 */
export async function startCameraWorker({ config, engine, log = rootLog }: { config: Config; engine: Engine; log?: Logger }): Promise<RunningCameraWorker> {
  const { list, apiUrl } = config.cameras;
  if (config.role !== 'camera' || !list || !apiUrl || !config.token) throw new Error('startCameraWorker runs FACE_ROLE=camera with FACE_CAMERAS, FACE_CAMERA_API_URL and FACE_TOKEN');
  const metrics = new ServiceMetrics({ engine, log });
  const cameras = new Cameras(list, engine, new HttpSightingWriter(apiUrl, config.token), cameraOptions(config), log);
  metrics.watchCameras(cameras);
  const registry = buildCameraRegistry({ engine, cameras, metrics, serviceVersion: serviceVersion() });
  const listening = await serveOperatorOnly(config, registry, metrics, log, async () => {
    await cameras.stop();
    metrics.close();
  });
  let closing: Promise<void> | undefined;
  return {
    port: listening.port,
    cameras,
    metrics,
    close() {
      closing ??= (async () => {
        await cameras.stop();
        await listening.close();
        metrics.close();
        engine.close();
      })();
      return closing;
    },
  };
}
