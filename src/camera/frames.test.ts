/**
 * The decoder on each kind of source (a file, RTSP over UDP, HTTP MJPEG; RTSP
 * over TCP is camera.test.ts's), and against sources that lie: frames far
 * larger than asked for, a file cut short, bytes that are no video, a server
 * that accepts and never sends. Each ends the run with a reason (or its
 * frames), never a hang. Needs ffmpeg and GStreamer's RTSP server (in CI,
 * installed by .ci/run).
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import { rtspMissing, startRtspServer } from '../../test/harness/rtsp.js';
import { FrameSource, MAX_FRAME_WIDTH, redacted, type Frame } from './frames.js';

const run = promisify(execFile);
const missing = [
  await run('ffmpeg', ['-version']).then(
    () => undefined,
    () => 'ffmpeg is not installed (Debian: ffmpeg)',
  ),
  await rtspMissing(),
].filter((m): m is string => typeof m === 'string');
if (missing.length && process.env.CI) throw new Error(`frames.test.ts needs ${missing.join('; ')}`);
if (missing.length) console.warn(`frames.test.ts: skipped, ${missing.join('; ')}`);
const suite = missing.length ? describe.skip : describe;

/** Width of a baseline JPEG, from its SOF0 segment. */
function jpegWidth(jpeg: Buffer): number {
  const sof = jpeg.indexOf(Buffer.from([0xff, 0xc0]));
  return jpeg.readUInt16BE(sof + 7);
}

async function drain(source: FrameSource): Promise<Frame[]> {
  const frames: Frame[] = [];
  for (let f = await source.next(); f; f = await source.next()) frames.push(f);
  return frames;
}

suite('frames decoded by ffmpeg', () => {
  let dir: string;
  const video = (name: string) => path.join(dir, name);

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'frames-test-'));
    const lavfi = (size: string, seconds: number, codec: string[], out: string) =>
      run('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', `testsrc2=s=${size}:r=5:d=${seconds}`, ...codec, video(out)]);
    await Promise.all([
      lavfi('7680x4320', 1, ['-c:v', 'mjpeg', '-q:v', '10'], 'eight-k.mkv'),
      lavfi('320x240', 6, ['-c:v', 'libx264', '-preset', 'ultrafast', '-g', '5', '-pix_fmt', 'yuv420p'], 'whole.mkv'),
    ]);
    const whole = readFileSync(video('whole.mkv'));
    writeFileSync(video('cut.mkv'), whole.subarray(0, Math.floor(whole.length / 2)));
    writeFileSync(video('junk.mkv'), Buffer.alloc(64 * 1024, 'not a video '));
  }, 120_000);

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a file at the rate asked for, each frame timed in the stream, to its end', async () => {
    const source = new FrameSource({ source: video('whole.mkv'), fps: 2, stallMs: 10_000 });
    const frames = await drain(source);
    expect(await source.end).toEqual({ ended: true });
    expect(frames.length).toBeGreaterThanOrEqual(11);
    expect(frames.length).toBeLessThanOrEqual(13);
    expect(frames.slice(0, 3).map((f) => f.pts)).toEqual([0, 0.5, 1]);
    expect(source.dropped).toBe(0);
  });

  it('RTSP over UDP', async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, '127.0.0.1', () => {
        const p = (probe.address() as net.AddressInfo).port;
        probe.close(() => resolve(p));
      });
    });
    const server = await startRtspServer(port, { live: video('whole.mkv') });
    try {
      const source = new FrameSource({ source: server.url('live'), transport: 'udp', fps: 5, stallMs: 5000 });
      const first = await source.next();
      source.stop();
      await drain(source);
      expect(first && jpegWidth(first.jpeg)).toBe(320);
    } finally {
      await server.kill();
    }
  }, 30_000);

  it('HTTP MJPEG (multipart/x-mixed-replace), as many IP cameras serve it', async () => {
    const { stdout } = await run('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-i', video('whole.mkv'), '-frames:v', '3', '-f', 'image2pipe', '-c:v', 'mjpeg', 'pipe:1'], {
      encoding: 'buffer',
      maxBuffer: 16 * 2 ** 20,
    });
    const jpegs = (stdout as Buffer).toString('latin1').split('\xff\xd9').filter((p) => p.length > 0).map((p) => Buffer.from(`${p}\xff\xd9`, 'latin1'));
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'multipart/x-mixed-replace; boundary=frame' });
      let k = 0;
      const timer = setInterval(() => {
        const jpeg = jpegs[k++ % jpegs.length];
        res.write(`--frame\r\nContent-Type: image/jpeg\r\nContent-Length: ${jpeg.length}\r\n\r\n`);
        res.write(jpeg);
        res.write('\r\n');
      }, 100);
      res.on('close', () => clearInterval(timer));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const source = new FrameSource({ source: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/video.mjpg`, fps: 5, stallMs: 5000 });
      const first = await source.next();
      source.stop();
      await drain(source);
      expect(first && jpegWidth(first.jpeg)).toBe(320);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  }, 30_000);

  it('8K frames arrive at most MAX_FRAME_WIDTH wide', async () => {
    const source = new FrameSource({ source: video('eight-k.mkv'), fps: 5, stallMs: 20_000 });
    const frames = await drain(source);
    expect(frames.length).toBeGreaterThan(0);
    for (const f of frames) expect(jpegWidth(f.jpeg)).toBe(MAX_FRAME_WIDTH);
  }, 60_000);

  it('a file cut short gives the frames it holds, then ends', async () => {
    const source = new FrameSource({ source: video('cut.mkv'), fps: 5, stallMs: 10_000 });
    const frames = await drain(source);
    await source.end;
    expect(frames.length).toBeGreaterThan(0);
    expect(frames.length).toBeLessThan(30);
  });

  it('bytes that are no video end the run with the decoder\'s reason', async () => {
    const source = new FrameSource({ source: video('junk.mkv'), fps: 5, stallMs: 10_000 });
    expect(await drain(source)).toEqual([]);
    const end = await source.end;
    expect(end.ended).toBe(false);
    expect(end.reason).toMatch(/invalid data/i);
  });

  it('a server that accepts and never sends a frame is given up after the stall time', async () => {
    const silent = net.createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const port = (silent.address() as net.AddressInfo).port;
    try {
      for (const url of [`rtsp://user:secret@127.0.0.1:${port}/live`, `http://127.0.0.1:${port}/mjpeg`]) {
        const started = Date.now();
        const source = new FrameSource({ source: url, fps: 5, stallMs: 1500 });
        expect(await drain(source)).toEqual([]);
        const end = await source.end;
        expect(end.ended).toBe(false);
        expect(end.reason).toBeTruthy();
        expect(Date.now() - started).toBeLessThan(10_000);
      }
    } finally {
      silent.close();
    }
    expect(redacted(`rtsp://user:secret@127.0.0.1:${port}/live`)).toBe(`rtsp://***@127.0.0.1:${port}/live`);
  }, 30_000);
});
