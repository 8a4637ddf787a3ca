/**
 * The cameras of one process (FACE_CAMERAS): each a `Camera` of its own, so
 * one that fails, lies or stalls never stops the others. `/health` lists
 * their states and `/metrics` counts their frames, tracks and sightings.
 */
import type { Logger } from '../log.js';
import type { Engine } from '../native/engine.js';
import { Camera, type CameraConfig, type CameraOptions, type CameraState, type SightingWriter } from './camera.js';

export class Cameras {
  private readonly cameras: Camera[];
  /** Resolves once every camera has stopped: files ended, or `stop`. */
  readonly done: Promise<void>;

  constructor(configs: CameraConfig[], engine: Pick<Engine, 'analyze'>, writer: SightingWriter, opts: CameraOptions, log: Logger) {
    this.cameras = configs.map((c) => new Camera(c, engine, writer, opts, log.child({ component: 'camera' })));
    this.done = Promise.all(this.cameras.map((c) => c.done)).then(() => undefined);
  }

  states(): CameraState[] {
    return this.cameras.map((c) => c.state());
  }

  /** Seconds from a passage's last frame to its sighting written, per camera (live sources; the newest 1,024 each). */
  lags(): { camId: string; seconds: readonly number[] }[] {
    return this.cameras.map((c) => ({ camId: c.config.camId, seconds: c.lags }));
  }

  /** Stops every camera, writing the tracks open as sightings. */
  async stop(): Promise<void> {
    await Promise.all(this.cameras.map((c) => c.stop()));
  }
}
