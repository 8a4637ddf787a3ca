/**
 * One camera from the command line: `npm run camera -- --source <url|file> --cam-id <id> [options]`.
 *
 * Runs a camera worker (FACE_ROLE=camera, src/main.ts) for that one camera:
 * the stream decoded by ffmpeg, faces detected and followed here, one
 * sighting per person passing by written to the service at --url. Given a
 * file, it stops once the file's last tracks are written; given a stream, at
 * SIGINT or SIGTERM, writing the tracks in view first. Many cameras: the
 * same worker with FACE_CAMERAS, or FACE_CAMERAS on an API node.
 *
 * Exit status: the worker's (0 after a file's end or a stop); 2 bad usage.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { findProjectRoot } from '../config/index.js';
import { runCli } from './run.js';

const USAGE = `usage: npm run camera -- --source <url | file> --cam-id <id> [options]

Reads one camera and writes one sighting per person passing by to a running service.
  --source S        rtsp://… (TCP), rtsp+udp://… (UDP), http(s):// MJPEG, or a video file
  --cam-id ID       the camera's cam_id in the history

options:
  --url URL         the service (default http://127.0.0.1:8080)
  --token TOKEN     API token (default: the FACE_TOKEN environment variable)
  --port N          serve /health and /metrics of the worker on this port (default: a free one)
  --fps N           frames per second decoded and detected (default FACE_CAMERA_FPS, 5)
`;

async function main(argv: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        source: { type: 'string' },
        'cam-id': { type: 'string' },
        url: { type: 'string', default: 'http://127.0.0.1:8080' },
        token: { type: 'string' },
        port: { type: 'string', default: '0' },
        fps: { type: 'string' },
        help: { type: 'boolean' },
      },
    }));
  } catch (err) {
    process.stderr.write(`camera: ${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const token = values.token ?? process.env.FACE_TOKEN;
  const missing = [!values.source && '--source', !values['cam-id'] && '--cam-id', !token && '--token (or FACE_TOKEN)'].filter(Boolean);
  if (missing.length) {
    process.stderr.write(`camera: ${missing.join(', ')} needed\n${USAGE}`);
    return 2;
  }
  const worker = spawn(process.execPath, [path.join(findProjectRoot(), 'dist', 'src', 'main.js')], {
    stdio: 'inherit',
    env: {
      ...process.env,
      FACE_ROLE: 'camera',
      FACE_CAMERAS: `${values['cam-id']}=${values.source}`,
      FACE_CAMERA_API_URL: values.url,
      FACE_TOKEN: token,
      PORT: values.port,
      ...(values.fps ? { FACE_CAMERA_FPS: values.fps } : {}),
    },
  });
  // The worker writes the tracks in view before it exits.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => worker.kill(signal));
  return new Promise((resolve) => worker.on('exit', (code, signal) => resolve(code ?? (signal ? 128 + 15 : 1))));
}

runCli('camera', main);
