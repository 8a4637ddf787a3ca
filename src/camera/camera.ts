/**
 * One camera: its stream decoded (frames.ts) → faces detected on each frame
 * the engine can take → followed across frames (tracker.ts) → one sighting
 * per passage, written through `SightingWriter` (identify with `cam_id`, in
 * this process or over HTTP), so grouping, `friend`, thumbnails and history
 * behave as for any sighting.
 *
 * The stream is reconnected with backoff (RECONNECT_MS, doubling, reset by
 * the next frame) when it drops, never starts or stalls; the tracks open when
 * it drops are written first. A file ends the camera at its end (or fails
 * it, unretried, when the decoder refuses it). A camera's
 * failures stay in it: they are logged with the decoder's last words,
 * counted, and shown in its state, and other cameras go on.
 *
 * Sightings are written in the background, at most WRITES_IN_FLIGHT at a
 * time; beyond that the frame loop waits (a live stream drops frames
 * meanwhile, counted), so a slow API never makes memory grow.
 */
import type { Logger } from '../log.js';
import type { Engine } from '../native/engine.js';
import { FrameSource, isLive, redacted, type Frame } from './frames.js';
import { Tracker, type BoxObject, type Passage } from './tracker.js';

export interface CameraConfig {
  camId: string;
  source: string;
  transport?: 'tcp' | 'udp';
}

/** Where a passage becomes a sighting. */
export interface SightingWriter {
  /** Records the face in `box` of `jpeg`, seen at `seenAt`, as a sighting of `camId`; the persons it went to. */
  write(camId: string, jpeg: Buffer, box: BoxObject, seenAt: Date): Promise<number[]>;
}

export interface CameraOptions {
  fps: number;
  /** A track older than this gives a sighting and starts again. */
  maxTrackMs: number;
  /** A track unseen for this long has ended. */
  lostMs: number;
  /** No frame for this long: the stream is stalled and reconnected. */
  stallMs: number;
  ffmpeg?: string;
}

export type CameraStateName = 'connecting' | 'streaming' | 'reconnecting' | 'ended' | 'failed' | 'stopped';

/** What /health and /metrics show of a camera. */
export interface CameraState {
  cam_id: string;
  source: string;
  state: CameraStateName;
  /** Why the stream last stopped, while it is not streaming. */
  last_error?: string;
  frames_decoded: number;
  frames_processed: number;
  frames_dropped: number;
  tracks_open: number;
  sightings_written: number;
  sightings_failed: number;
  reconnects: number;
}

/** First wait before reconnecting, doubled after each failed try up to RECONNECT_MAX_MS. */
export const RECONNECT_MS = 1000;
export const RECONNECT_MAX_MS = 30_000;

/** Sightings being written at once per camera. */
const WRITES_IN_FLIGHT = 4;

/** Cosine of two embeddings of one face across frames: well above any two people (SFace's 1:1 threshold is 0.36). */
const SAME_FACE = 0.5;

export class Camera {
  private readonly tracker: Tracker;
  private readonly live: boolean;
  private current?: FrameSource;
  private stopping = false;
  private wakeSleep?: () => void;
  private writes = new Set<Promise<void>>();
  private readonly stats = { decoded: 0, processed: 0, dropped: 0, written: 0, failed: 0, reconnects: 0 };
  private status: CameraStateName = 'connecting';
  private fileStart?: number;
  private lastError?: string;
  /** Seconds from a passage's last frame to its sighting written, for live sources (the newest 1,024): the lag metric. */
  readonly lags: number[] = [];
  readonly done: Promise<void>;

  constructor(
    readonly config: CameraConfig,
    private readonly engine: Pick<Engine, 'analyze'>,
    private readonly writer: SightingWriter,
    private readonly opts: CameraOptions,
    private readonly log: Logger,
  ) {
    this.live = isLive(config.source);
    this.tracker = new Tracker({ lostMs: opts.lostMs, maxAgeMs: opts.maxTrackMs, sameFace: SAME_FACE });
    this.done = this.run();
  }

  state(): CameraState {
    const decoded = this.stats.decoded + (this.current?.decoded ?? 0);
    const dropped = this.stats.dropped + (this.current?.dropped ?? 0);
    return {
      cam_id: this.config.camId,
      source: redacted(this.config.source),
      state: this.status,
      ...(this.lastError && this.status !== 'streaming' ? { last_error: this.lastError } : {}),
      frames_decoded: decoded,
      frames_processed: this.stats.processed,
      frames_dropped: dropped,
      tracks_open: this.tracker.open(),
      sightings_written: this.stats.written,
      sightings_failed: this.stats.failed,
      reconnects: this.stats.reconnects,
    };
  }

  /** Stops reading, writes the open tracks as sightings, and resolves once they are written. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.current?.stop('the worker is stopping');
    this.wakeSleep?.();
    await this.done;
  }

  private async run(): Promise<void> {
    let wait = RECONNECT_MS;
    while (!this.stopping) {
      const source = new FrameSource({ source: this.config.source, fps: this.opts.fps, transport: this.config.transport, stallMs: this.opts.stallMs, ffmpeg: this.opts.ffmpeg });
      this.current = source;
      this.status = 'connecting';
      let frames = 0;
      for (let frame = await source.next(); frame; frame = await source.next()) {
        if (frames++ === 0) {
          this.status = 'streaming';
          wait = RECONNECT_MS;
          this.log.info({ cam: this.config.camId, source: redacted(this.config.source) }, 'camera streaming');
        }
        await this.process(frame);
      }
      const end = await source.end;
      this.stats.decoded += source.decoded;
      this.stats.dropped += source.dropped;
      this.current = undefined;
      // Whatever was in view when the stream stopped has passed, as far as this camera knows.
      this.record(this.tracker.flush());
      if (this.stopping) break;
      if (!this.live) {
        // A file that failed will fail again: it is not retried.
        this.status = end.ended ? 'ended' : 'failed';
        if (end.ended) this.log.info({ cam: this.config.camId, frames: this.stats.decoded }, 'camera source ended');
        else {
          this.lastError = end.reason;
          this.log.error({ cam: this.config.camId, source: redacted(this.config.source), reason: end.reason }, 'camera source failed');
        }
        break;
      }
      this.lastError = end.reason ?? 'the stream ended';
      this.status = 'reconnecting';
      this.stats.reconnects++;
      this.log.warn({ cam: this.config.camId, source: redacted(this.config.source), reason: this.lastError, retryInMs: wait }, 'camera stream stopped; reconnecting');
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, wait);
        this.wakeSleep = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wait = Math.min(wait * 2, RECONNECT_MAX_MS);
    }
    await Promise.all(this.writes);
    if (this.status !== 'ended' && this.status !== 'failed') this.status = 'stopped';
  }

  private async process(frame: Frame): Promise<void> {
    const at = this.live ? frame.decodedAt : this.startedAt(frame);
    let passages: Passage[];
    try {
      const analysis = await this.engine.analyze(frame.jpeg, { embed: false, age: false, gender: false, emotions: false });
      const detections = analysis.faces.map((f) => ({ box: { x1: f.x1, y1: f.y1, x2: f.x2, y2: f.y2 }, quality: f.quality }));
      passages = await this.tracker.step(frame.jpeg, at, detections, async (boxes) => {
        const embedded = await this.engine.analyze(frame.jpeg, { embed: true, age: false, gender: false, emotions: false, boxes: boxes.map((b) => [b.x1, b.y1, b.x2, b.y2]) });
        return boxes.map((_, k) => embedded.embeddings.subarray(k * embedded.dim, (k + 1) * embedded.dim));
      });
    } catch (err) {
      // A frame the engine refuses (corrupt, too large) is skipped; the stream goes on.
      this.log.debug({ cam: this.config.camId, err: (err as Error).message }, 'frame skipped');
      return;
    }
    this.stats.processed++;
    this.record(passages);
    while (this.writes.size >= WRITES_IN_FLIGHT) await Promise.race(this.writes);
  }

  /** A file's frame time: when this camera began reading it, plus the frame's time in the file. */
  private startedAt(frame: Frame): number {
    this.fileStart ??= frame.decodedAt - frame.pts * 1000;
    return this.fileStart + frame.pts * 1000;
  }

  private record(passages: Passage[]): void {
    for (const p of passages) {
      const write = this.writer.write(this.config.camId, p.best.jpeg, p.best.box, new Date(p.firstSeen)).then(
        () => {
          this.stats.written++;
          if (!this.live) return;
          this.lags.push((Date.now() - p.lastSeen) / 1000);
          if (this.lags.length > 1024) this.lags.shift();
        },
        (err) => {
          this.stats.failed++;
          this.log.warn({ cam: this.config.camId, err: (err as Error).message }, 'sighting not written');
        },
      );
      this.writes.add(write);
      void write.finally(() => this.writes.delete(write));
    }
  }
}
