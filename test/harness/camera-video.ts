/**
 * Camera videos made from photos with ffmpeg, for the camera tests and
 * benches: a plain background on which each photo walks in view for a while
 * (a passage), then leaves. H.264 in Matroska, as a camera's RTSP stream
 * carries it.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** One person passing by: `photo` in view from `from` to `to` seconds, its top left moving from (x, y) by (vx, vy) pixels a second. */
export interface Appearance {
  photo: string;
  from: number;
  to: number;
  x: number;
  y: number;
  vx?: number;
  vy?: number;
  /** The part of the photo shown (default all of it). */
  crop?: { w: number; h: number; x: number; y: number };
  /** Width the shown part is scaled to (default its own). */
  width?: number;
}

export interface VideoPlan {
  width: number;
  height: number;
  /** The video's own frame rate. */
  fps: number;
  seconds: number;
  appearances: Appearance[];
}

/** Writes the video of `plan` to `out` (.mkv); resolves once it is written. */
export async function makeVideo(plan: VideoPlan, out: string): Promise<void> {
  const inputs = ['-f', 'lavfi', '-i', `color=c=0x506070:s=${plan.width}x${plan.height}:r=${plan.fps}:d=${plan.seconds}`];
  const filters: string[] = [];
  let last = '0:v';
  plan.appearances.forEach((a, i) => {
    inputs.push('-loop', '1', '-framerate', String(plan.fps), '-t', String(plan.seconds), '-i', a.photo);
    const scaled = `p${i}`;
    const steps = [a.crop && `crop=${a.crop.w}:${a.crop.h}:${a.crop.x}:${a.crop.y}`, a.width && `scale=${a.width}:-2`].filter(Boolean);
    filters.push(`[${i + 1}:v]${steps.length ? steps.join(',') : 'null'}[${scaled}]`);
    const x = `${a.x}+(t-${a.from})*${a.vx ?? 0}`;
    const y = `${a.y}+(t-${a.from})*${a.vy ?? 0}`;
    filters.push(`[${last}][${scaled}]overlay=x='${x}':y='${y}':enable='between(t,${a.from},${a.to})':eof_action=pass[v${i}]`);
    last = `v${i}`;
  });
  const map = plan.appearances.length ? ['-filter_complex', filters.join(';'), '-map', `[${last}]`] : ['-map', '0:v'];
  await run(
    'ffmpeg',
    ['-hide_banner', '-loglevel', 'error', '-y', ...inputs, ...map, '-t', String(plan.seconds), '-r', String(plan.fps), '-c:v', 'libx264', '-preset', 'veryfast', '-pix_fmt', 'yuv420p', '-g', String(plan.fps), out],
    { maxBuffer: 16 * 2 ** 20 },
  );
}

/** Writes the frame of `video` at `seconds` to `out` (.jpg), as a camera would show it then. */
export async function frameAt(video: string, seconds: number, out: string): Promise<void> {
  await run('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-y', '-ss', String(seconds), '-i', video, '-frames:v', '1', '-q:v', '2', out]);
}
