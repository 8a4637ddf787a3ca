/**
 * GStreamer's RTSP server (rtsp-server.py, Debian's python3-gi and
 * gir1.2-gst-rtsp-server-1.0) as a child process: a real camera stream for
 * the camera tests and benches; and the camera worker that reads it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { findProjectRoot } from '../../src/config/index.js';
import { startProcess, type ServiceProcess } from './process.js';

/** Debian's Python, which has python3-gi (a python3 earlier on PATH may not). */
const PYTHON = '/usr/bin/python3';

export interface RtspServer {
  url(name: string): string;
  /** Kills it (SIGKILL: a camera that loses power). */
  kill(): Promise<void>;
}

/** Starts a server on `port` serving each `mounts` file at /<name>; resolves once it listens. */
export async function startRtspServer(port: number, mounts: Record<string, string>): Promise<RtspServer> {
  const script = path.join(findProjectRoot(), 'test', 'harness', 'rtsp-server.py');
  const child: ChildProcess = spawn(PYTHON, [script, String(port), ...Object.entries(mounts).map(([n, f]) => `${n}=${f}`)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      if (d.toString().includes('ready')) resolve();
    });
    void exited.then(() => reject(new Error(`the RTSP server exited before listening: ${output.slice(-2000)}`)));
  });
  return {
    url: (name) => `rtsp://127.0.0.1:${port}/${name}`,
    async kill() {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Whether this machine can run it; the tests that need it say what is missing. */
export async function rtspMissing(): Promise<string | undefined> {
  const probe = spawn(PYTHON, ['-c', 'import gi; gi.require_version("GstRtspServer", "1.0"); from gi.repository import GstRtspServer'], { stdio: 'ignore' });
  const code = await new Promise<number | null>((resolve) => {
    probe.once('exit', resolve);
    probe.once('error', () => resolve(-1));
  });
  return code === 0 ? undefined : `GStreamer's RTSP server for Python (Debian: gir1.2-gst-rtsp-server-1.0, python3-gi) is not installed`;
}

/**
 * A camera worker (FACE_ROLE=camera) as a child process reading `cameras` (cam_id → source),
 * writing its sightings to the service at `api` with `token`; resolves once it listens.
 */
export function startCameraWorker(api: string, token: string, cameras: Record<string, string>, env: Record<string, string> = {}): Promise<ServiceProcess> {
  return startProcess({
    ...process.env,
    HOST: '127.0.0.1',
    PORT: '0',
    // Info: the harness waits for the "listening" line.
    LOG_LEVEL: 'info',
    FACE_ROLE: 'camera',
    FACE_TOKEN: token,
    FACE_CAMERA_API_URL: api,
    FACE_CAMERAS: Object.entries(cameras)
      .map(([c, u]) => `${c}=${u}`)
      .join(','),
    ...env,
  });
}
