/**
 * Cameras, measured: the service (its own process, embedded PostgreSQL), a camera worker
 * (FACE_ROLE=camera, its own process, writing to it over HTTP) and GStreamer's RTSP server
 * playing videos made with ffmpeg from LFW photos, in real time, as cameras would.
 *
 *   npm run bench:cameras -- [--parts passages,capacity,flap] [--passages 20] [--cameras 1,2,3,4]
 *       [--faces 1,5] [--window 20] [--minutes 2] [--flap-s 15] [--lfw DIR] [--json FILE]
 *
 * 1. passages: `--passages` people walk through a 1080p, 25 fps view one after another (3 s
 *    each, 2.5 s apart; every fifth passage two people at once), served over RTSP. Reported:
 *    sightings per passage (goal 1.0) and the lag from a passage's last frame to its sighting
 *    (p50/p99, the worker's own measure; it includes FACE_CAMERA_LOST_S, the wait that says
 *    the face has gone). Every other passage's person is enrolled first (from the photo they
 *    walk with): the passages whose sightings name them, against the frames from the middle of
 *    those passages named by identify without a box (the worker sends each sighting with its
 *    tracked face's box; goal: as many).
 * 2. capacity: for each of `--faces` (faces always in view, walking), `--cameras` cameras at
 *    1080p, 25 fps served at once, read at FACE_CAMERA_FPS (5); over `--window` seconds after a
 *    warm-up, the frames processed per camera per second and the share dropped. A camera
 *    count keeps up while it processes ~5 frames/s each and drops under 5%.
 * 3. flap: one camera whose RTSP server is killed every `--flap-s` seconds and started again
 *    3 s later, for `--minutes`; the worker's resident memory every 10 s (goal: flat) and its
 *    reconnects.
 *
 * The worker, the service and the RTSP server share this machine's cores; the RTSP server only
 * repacketises the H.264 it reads (no decoding), a small share of a core.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { frameAt, makeVideo, type Appearance } from '../../test/harness/camera-video.js';
import { freePort, startBenchService } from '../../test/harness/load-service.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { cpuDelta, cpuSnapshot } from '../../test/harness/proc-cpu.js';
import type { ServiceProcess } from '../../test/harness/process.js';
import { startCameraWorker, startRtspServer, type RtspServer } from '../../test/harness/rtsp.js';
import { numberArg, optionArg as arg, saveJson } from '../lib/args.js';
import { lfwMissing, limitPeople, loadLfw } from '../lib/lfw.js';

const TOKEN = 'camera-bench-token';
const W = 1920;
const H = 1080;
const FPS = 25;

interface CameraState {
  cam_id: string;
  state: string;
  frames_decoded: number;
  frames_processed: number;
  frames_dropped: number;
  sightings_written: number;
  reconnects: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

/** LFW's faces sit in the middle of each photo: that part, enlarged as a person near a camera. */
const person = (photo: string, from: number, to: number, x: number, y: number, vx: number): Appearance => ({
  photo,
  from,
  to,
  x,
  y,
  vx,
  crop: { w: 130, h: 160, x: 60, y: 45 },
  width: 220,
});

async function main(): Promise<void> {
  const lfwDir = arg('lfw') ?? path.resolve('..', 'shared', 'testdata', 'lfw');
  const missing = lfwMissing(lfwDir);
  if (missing.length) throw new Error(`LFW is missing: ${missing.join(', ')}`);
  const parts = new Set((arg('parts') ?? 'passages,capacity,flap').split(','));
  const dir = mkdtempSync(path.join(os.tmpdir(), 'camera-bench-'));
  // One photo of each of the first 200 people, so consecutive passages are different people.
  const set = limitPeople(loadLfw(lfwDir), 200);
  const photos = set.files.filter((_, i) => i === 0 || set.person[i] !== set.person[i - 1]).map((f) => path.join(lfwDir, 'images', f));
  const report: Record<string, unknown> = { date: new Date().toISOString(), machine: machineLine(describeMachine()) };
  console.log(`cameras; ${report.machine}`);
  const service = await startBenchService(TOKEN, { FACE_RECOGNIZER: arg('mode') ?? 'sface:mirror' });
  const workers: ServiceProcess[] = [];
  const servers: RtspServer[] = [];
  const startWorker = async (cameras: Record<string, string>, env: Record<string, string> = {}) => {
    const w = await startCameraWorker(service.base, TOKEN, cameras, env);
    workers.push(w);
    return w;
  };
  const stopWorker = async (w: ServiceProcess) => {
    w.child.kill('SIGTERM');
    await w.exited;
  };
  const auth = { Authorization: `Token ${TOKEN}` };
  const states = async (w: ServiceProcess) => ((await (await fetch(`${w.base}/health`)).json()) as { cameras: CameraState[] }).cameras;
  try {
    // 1. One sighting per passage, and the lag.
    if (parts.has('passages')) {
      const n = numberArg('passages', 20);
      const appearances: Appearance[] = [];
      let people = 0;
      for (let k = 0; k < n; k++) {
        const from = 1 + k * 5.5;
        appearances.push(person(photos[people++ % photos.length], from, from + 3, 300, 400, 80));
        if (k % 5 === 4) appearances.push(person(photos[people++ % photos.length], from, from + 3, 1300, 300, -60));
      }
      const video = path.join(dir, 'passages.mkv');
      // A long empty tail: the server plays a file once per connection, and the bench stops before it ends.
      await makeVideo({ width: W, height: H, fps: FPS, seconds: 2 + n * 5.5 + 30, appearances }, video);
      // Every other passage's person enrolled, under a meta naming the passage.
      const named = appearances.filter((_, i) => i % 2 === 0).map((a, k) => ({ a, meta: `passage-${k}` }));
      for (const { a, meta } of named) {
        const fd = new FormData();
        fd.append('photo', new Blob([readFileSync(a.photo)], { type: 'image/jpeg' }), 'photo.jpg');
        fd.append('meta', meta);
        const res = await fetch(`${service.base}/v0/face/`, { method: 'POST', headers: auth, body: fd });
        if (res.status !== 200) throw new Error(`enrolling ${a.photo}: ${res.status} ${await res.text()}`);
      }
      const port = await freePort();
      const server = await startRtspServer(port, { door: video });
      servers.push(server);
      const worker = await startWorker({ door: server.url('door') });
      const expected = appearances.length;
      const until = Date.now() + (n * 5.5 + 20) * 1000;
      while (Date.now() < until && (await states(worker))[0].sightings_written < expected) await sleep(1000);
      await sleep(3000);
      const metrics = await (await fetch(`${worker.base}/metrics`, { headers: { Authorization: `Token ${TOKEN}` } })).text();
      const q = (quantile: string) => Number(new RegExp(`face_camera_lag_seconds\\{cam="door",quantile="${quantile}"\\} ([\\d.e+-]+)`).exec(metrics)?.[1]);
      const [cam] = await states(worker);
      await stopWorker(worker);
      await server.kill();
      // What the sightings named, against identify without a box on each enrolled passage's middle frame.
      const events = (await (await fetch(`${service.base}/v0/history/search`, { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify({ limit: 1000 }) })).json()) as {
        results: { meta: string }[];
      };
      const namedBySightings = named.filter(({ meta }) => events.results.some((e) => e.meta === meta)).length;
      let namedByIdentify = 0;
      for (const { a, meta } of named) {
        const frame = path.join(dir, `${meta}.jpg`);
        await frameAt(video, (a.from + a.to) / 2, frame);
        const fd = new FormData();
        fd.append('photo', new Blob([readFileSync(frame)], { type: 'image/jpeg' }), 'frame.jpg');
        // Every face: a frame of a passage with two people holds both.
        fd.append('mf_selector', 'all');
        const answer = (await (await fetch(`${service.base}/v0/identify/`, { method: 'POST', headers: auth, body: fd })).json()) as { results?: Record<string, { face: { meta: string } }[]> };
        if (Object.values(answer.results ?? {}).some((found) => found[0]?.face.meta === meta)) namedByIdentify++;
      }
      // A sighting that matched no stored face has an empty meta.
      const namedSightings = events.results.filter((e) => e.meta).length;
      const result = {
        passages: expected,
        sightings: cam.sightings_written,
        perPassage: cam.sightings_written / expected,
        lagP50: q('0.5'),
        lagP99: q('0.99'),
        dropped: cam.frames_dropped / Math.max(1, cam.frames_decoded),
        enrolledPassages: named.length,
        namedBySightings,
        namedByIdentify,
        namedSightings,
      };
      report.passages = result;
      console.log(
        `passages: ${expected} (${n} walks, every fifth with two people) → ${cam.sightings_written} sightings: ${result.perPassage.toFixed(2)} per passage; ` +
          `lag from a passage's last frame to its sighting p50 ${result.lagP50.toFixed(2)} s, p99 ${result.lagP99.toFixed(2)} s (FACE_CAMERA_LOST_S 1.5 s included); ${pct(result.dropped)} of frames dropped`,
      );
      console.log(
        `named: ${namedBySightings} of ${named.length} enrolled passages by their sightings, ${namedByIdentify} of ${named.length} by identify of their middle frame without a box; ` +
          `${namedSightings} sightings named in all`,
      );
    }

    // 2. Cameras per node before frames drop.
    if (parts.has('capacity')) {
      const windowS = numberArg('window', 20);
      const rows: { faces: number; cameras: number; processedPerS: number; dropped: number }[] = [];
      for (const faces of (arg('faces') ?? '1,5').split(',').map(Number)) {
        const seconds = windowS + 25;
        const appearances = Array.from({ length: faces }, (_, k) =>
          person(photos[(k * 7) % photos.length], 0, seconds, 100 + (k % 3) * 550, 150 + Math.floor(k / 3) * 450, k % 2 ? -8 : 8),
        );
        const video = path.join(dir, `faces-${faces}.mkv`);
        await makeVideo({ width: W, height: H, fps: FPS, seconds, appearances }, video);
        for (const count of (arg('cameras') ?? '1,2,3,4').split(',').map(Number)) {
          const port = await freePort();
          const mounts = Object.fromEntries(Array.from({ length: count }, (_, k) => [`cam${k}`, video]));
          const server = await startRtspServer(port, mounts);
          servers.push(server);
          const worker = await startWorker(Object.fromEntries(Object.keys(mounts).map((m) => [m, server.url(m)])));
          await sleep(8000);
          const before = await states(worker);
          const cpuBefore = cpuSnapshot({ [worker.child.pid as number]: 'worker' });
          await sleep(windowS * 1000);
          const after = await states(worker);
          const cpuAfter = cpuSnapshot({ [worker.child.pid as number]: 'worker' });
          // The worker and its decoders; the machine's busy share of its two cores.
          const cpu = cpuBefore && cpuAfter ? cpuDelta(cpuBefore, cpuAfter) : undefined;
          const workerCores = cpu ? (cpu.worker ?? 0) / windowS : NaN;
          const machineBusy = cpu ? cpu['machine busy'] / (cpu['machine busy'] + cpu['machine idle']) : NaN;
          await stopWorker(worker);
          await server.kill();
          const processed = after.reduce((s, c, i) => s + c.frames_processed - before[i].frames_processed, 0);
          const decoded = after.reduce((s, c, i) => s + c.frames_decoded - before[i].frames_decoded, 0);
          const dropped = after.reduce((s, c, i) => s + c.frames_dropped - before[i].frames_dropped, 0);
          const row = { faces, cameras: count, processedPerS: processed / count / windowS, dropped: dropped / Math.max(1, decoded), workerCores, machineBusy };
          rows.push(row);
          console.log(
            `capacity: ${faces} face(s) in view, ${count} camera(s) at 1080p: ${row.processedPerS.toFixed(2)} frames/s processed per camera (of 5), ${pct(row.dropped)} dropped; ` +
              `worker and its decoders ${workerCores.toFixed(2)} cores, machine ${pct(machineBusy)} busy`,
          );
        }
      }
      report.capacity = rows;
    }

    // 3. Memory with one camera flapping.
    if (parts.has('flap')) {
      const minutes = numberArg('minutes', 2);
      const flapS = numberArg('flap-s', 15);
      const video = path.join(dir, 'flap.mkv');
      await makeVideo({ width: W, height: H, fps: FPS, seconds: flapS + 5, appearances: [person(photos[3], 1, 4, 400, 400, 60), person(photos[5], 6, 9, 900, 300, -60)] }, video);
      const port = await freePort();
      let server = await startRtspServer(port, { flap: video });
      const worker = await startWorker({ flap: server.url('flap') }, { FACE_CAMERA_STALL_S: '5' });
      const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${worker.child.pid}/status`, 'utf8'))?.[1]) / 1024;
      const samples: { s: number; rssMiB: number }[] = [];
      const started = Date.now();
      let nextFlap = started + flapS * 1000;
      let nextSample = started;
      while (Date.now() - started < minutes * 60_000) {
        if (Date.now() >= nextSample) {
          samples.push({ s: Math.round((Date.now() - started) / 1000), rssMiB: rss() });
          nextSample += 10_000;
        }
        if (Date.now() >= nextFlap) {
          await server.kill();
          await sleep(3000);
          server = await startRtspServer(port, { flap: video });
          nextFlap = Date.now() + flapS * 1000;
        }
        await sleep(500);
      }
      servers.push(server);
      const [cam] = await states(worker);
      await stopWorker(worker);
      const first = samples.filter((x) => x.s <= 60).map((x) => x.rssMiB);
      const last = samples.filter((x) => x.s >= minutes * 60 - 60).map((x) => x.rssMiB);
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
      const result = { minutes, flapS, reconnects: cam.reconnects, sightings: cam.sightings_written, firstMinuteMiB: mean(first), lastMinuteMiB: mean(last), maxMiB: Math.max(...samples.map((x) => x.rssMiB)), samples };
      report.flap = result;
      console.log(
        `flap: ${minutes} min, the stream killed every ${flapS} s: ${cam.reconnects} reconnects, ${cam.sightings_written} sightings; worker resident ` +
          `${result.firstMinuteMiB.toFixed(0)} MiB in the first minute, ${result.lastMinuteMiB.toFixed(0)} MiB in the last, max ${result.maxMiB.toFixed(0)} MiB`,
      );
    }
  } finally {
    for (const w of workers) if (w.child.exitCode === null) w.child.kill('SIGKILL');
    for (const s of servers) await s.kill().catch(() => undefined);
    await service.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const json = arg('json');
  if (json) saveJson(json, report);
  console.log('cameras bench done');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
