/**
 * Frames of one camera, decoded by FFmpeg (Debian's `ffmpeg`, spawned: one
 * process per camera and per connection, so a source that crashes the
 * decoder takes nothing else with it, and every codec and transport FFmpeg
 * knows works the same way).
 *
 * FFmpeg does the rate cap and the size cap (`fps`, frames at most
 * MAX_FRAME_WIDTH wide, so an 8K source costs what 1080p does) and writes
 * JPEG frames to a pipe. Its `fps` filter emits frames at exact steps of
 * 1/fps from the stream's start, so the n-th frame's time in the stream is
 * n/fps.
 *
 * A live source (RTSP, HTTP MJPEG) is never waited for: its frames are read as
 * they come and only the newest is kept for the detector; one it did not take
 * in time is counted as dropped. A file is read at the detector's pace
 * (the pipe is paused), so every frame is seen and the file ends when its
 * frames do.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable } from 'node:stream';

export interface Frame {
  jpeg: Buffer;
  /** Seconds since the stream began, as FFmpeg timed it. */
  pts: number;
  /** When it was decoded (ms since the epoch). */
  decodedAt: number;
}

export interface FrameSourceOptions {
  /** rtsp://, http(s):// or a file path. */
  source: string;
  fps: number;
  /** RTSP over TCP (default) or UDP. */
  transport?: 'tcp' | 'udp';
  /** No frame for this long: the source is stalled, and the decoder stopped. */
  stallMs: number;
  /** The ffmpeg binary. */
  ffmpeg?: string;
}

/** Frames wider than this are scaled down by the decoder. */
export const MAX_FRAME_WIDTH = 1920;

/** A JPEG frame bigger than this is not a frame the decoder was asked for: the source is refused. */
const MAX_FRAME_BYTES = 16 * 2 ** 20;

/** Lines of the decoder's own messages kept for the log line that says why it stopped. */
const KEPT_LINES = 5;

/** Whether `source` is a live stream (RTSP, HTTP) rather than a file. */
export const isLive = (source: string) => /^(rtsps?|rtmp|https?|udp|tcp|srt):\/\//i.test(source);

/** The source as it may be logged and shown: credentials in a URL replaced. */
export function redacted(source: string): string {
  return source.replace(/^([a-z]+:\/\/)[^/@]*@/i, '$1***@');
}

/** The decoder's arguments for a source. */
export function ffmpegArgs(opts: FrameSourceOptions): string[] {
  // A live stream is probed for 1 s rather than FFmpeg's 5 (over RTSP/UDP it waits out the whole
  // probe before the first frame): a camera's stream says what it is within its first second.
  const input: string[] = isLive(opts.source) ? ['-analyzeduration', '1000000'] : [];
  if (/^rtsps?:/i.test(opts.source)) input.push('-rtsp_transport', opts.transport ?? 'tcp', '-timeout', String(opts.stallMs * 1000));
  else if (/^https?:/i.test(opts.source)) input.push('-rw_timeout', String(opts.stallMs * 1000));
  return [
    '-hide_banner',
    '-nostdin',
    '-loglevel',
    'warning',
    ...input,
    '-i',
    opts.source,
    '-an',
    '-sn',
    '-vf',
    `fps=${opts.fps},scale='min(iw,${MAX_FRAME_WIDTH})':-2`,
    '-f',
    'image2pipe',
    '-c:v',
    'mjpeg',
    '-q:v',
    '3',
    'pipe:1',
  ];
}

/** How a decoder run ended. */
export interface SourceEnd {
  /** The file ended (a live source never ends this way). */
  ended: boolean;
  /** Why it stopped otherwise, for the log: the decoder's last words, a stall, or a stop. */
  reason?: string;
}

/**
 * One decoder run: frames until the source ends, fails or stalls, or `stop`.
 * `next()` gives the next frame (the newest, for a live source), or undefined
 * once it is over; `end` then says how.
 */
export class FrameSource {
  private readonly child: ChildProcessByStdio<null, Readable, Readable>;
  private readonly live: boolean;
  private readonly frames: Frame[] = [];
  private pending: Buffer = Buffer.alloc(0);
  private waiter?: () => void;
  private stall?: NodeJS.Timeout;
  private lines: string[] = [];
  private errLine = '';
  private done?: SourceEnd;
  private stopReason?: string;
  /** Frames decoded, and those replaced by a newer one before the detector took them. */
  decoded = 0;
  dropped = 0;
  readonly end: Promise<SourceEnd>;

  constructor(private readonly opts: FrameSourceOptions) {
    this.live = isLive(opts.source);
    this.child = spawn(opts.ffmpeg ?? 'ffmpeg', ffmpegArgs(opts), { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child.stdout.on('data', (chunk: Buffer) => this.onData(chunk));
    this.child.stderr.on('data', (chunk: Buffer) => this.onLog(chunk));
    this.armStall();
    this.end = new Promise((resolve) => {
      const finish = (code: number | null, err?: Error) => {
        if (this.stall) clearTimeout(this.stall);
        const reason = this.stopReason ?? err?.message ?? (code === 0 ? undefined : this.lines.join(' | ') || `ffmpeg exited with ${code}`);
        this.done = { ended: !this.live && code === 0 && !this.stopReason, ...(reason ? { reason } : {}) };
        this.wake();
        resolve(this.done);
      };
      this.child.on('error', (err) => finish(null, new Error(`cannot start ffmpeg: ${err.message}`)));
      this.child.on('close', (code) => finish(code));
    });
  }

  /** The next frame, or undefined once the run is over. */
  async next(): Promise<Frame | undefined> {
    for (;;) {
      const frame = this.frames.shift();
      if (frame) {
        if (!this.live && this.frames.length < 2) this.child.stdout.resume();
        return frame;
      }
      if (this.done) return undefined;
      await new Promise<void>((resolve) => (this.waiter = resolve));
    }
  }

  /** Stops the decoder; `next()` then gives what is left and undefined. */
  stop(reason = 'stopped'): void {
    this.stopReason ??= reason;
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  private armStall(): void {
    if (this.stall) clearTimeout(this.stall);
    this.stall = setTimeout(() => this.stop(`no frame for ${this.opts.stallMs / 1000} s`), this.opts.stallMs);
    this.stall.unref();
  }

  private onData(chunk: Buffer): void {
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    for (;;) {
      // A JPEG of FFmpeg's encoder ends at its first EOI marker (0xFFD9): scan data escapes 0xFF.
      const end = this.pending.indexOf(EOI);
      if (end < 0) {
        if (this.pending.length > MAX_FRAME_BYTES) this.stop(`a frame over ${MAX_FRAME_BYTES} bytes`);
        return;
      }
      const jpeg = Buffer.from(this.pending.subarray(0, end + 2));
      this.pending = this.pending.subarray(end + 2);
      this.onFrame(jpeg);
    }
  }

  private onFrame(jpeg: Buffer): void {
    this.decoded++;
    this.armStall();
    const pts = (this.decoded - 1) / this.opts.fps;
    if (this.live && this.frames.length > 0) this.dropped += this.frames.splice(0).length;
    this.frames.push({ jpeg, pts, decodedAt: Date.now() });
    if (!this.live && this.frames.length >= 2) this.child.stdout.pause();
    this.wake();
  }

  private onLog(chunk: Buffer): void {
    const text = this.errLine + chunk.toString('latin1');
    const lines = text.split(/\r?\n/);
    this.errLine = lines.pop() ?? '';
    for (const line of lines) {
      // Stream descriptions and progress are noise; what is left says why a source failed.
      if (/^\s|^(Input|Output|Stream mapping|Press|frame=)/.test(line) || !line.trim()) continue;
      this.lines.push(line.trim().slice(0, 300));
      if (this.lines.length > KEPT_LINES) this.lines.shift();
    }
  }
}

const EOI = Buffer.from([0xff, 0xd9]);
