// Smoke test run inside a face-service image (container/test.sh copies it in and runs it with
// the image's own user, environment and working directory). Starts the service with a fresh
// data folder and its embedded PostgreSQL, waits for /health, runs the image's HEALTHCHECK
// command, posts a demo photo to /v1/detect/ through loopback, checks the faces and that
// /metrics counted them, then stops the service with SIGTERM and expects a clean exit. Any
// failure exits non-zero with the reason and the service's log.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

// A demo photo of @vladmandic/face-api (a dev dependency, so not in the image): test.sh copies
// sample5, which shows five faces, in beside this script.
const PHOTO = '/tmp/sample5.jpg';
const EXPECTED_FACES = 5;
const START_TIMEOUT_MS = Number(process.env.SMOKE_START_TIMEOUT_MS || 300_000);

const t0 = Date.now();
const say = (msg) => console.log(`[smoke ${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);

let service;
let log = '';
let dataDir;

function fail(reason) {
  console.error(`[smoke] FAIL: ${reason}`);
  if (log) console.error(`[smoke] service log (last 4000 characters):\n${log.slice(-4000)}`);
  if (service && service.exitCode === null) service.kill('SIGKILL');
  process.exit(1);
}

/** A port nobody listens on now: chroot-isolated containers share the host's network. */
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const uid = process.getuid();
  if (uid === 0) fail('the image runs as root; it should run as its service user');
  say(`user ${os.userInfo().username} (uid ${uid}), node ${process.version}, cwd ${process.cwd()}`);

  const port = await freePort();
  const token = randomBytes(16).toString('hex');
  dataDir = mkdtempSync(path.join(os.tmpdir(), 'face-smoke-'));
  const base = `http://127.0.0.1:${port}`;
  const [cmd, ...args] = JSON.parse(process.env.SMOKE_CMD || '["node","dist/src/main.js"]');
  say(`starting '${[cmd, ...args].join(' ')}' on ${base}, FACE_DATA_DIR=${dataDir}, FACE_PROVIDERS=${process.env.FACE_PROVIDERS ?? '(default)'}`);

  service = spawn(cmd, args, {
    env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', FACE_DATA_DIR: dataDir, FACE_TOKEN: token },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  service.stdout.on('data', (d) => (log += d));
  service.stderr.on('data', (d) => (log += d));
  const exited = new Promise((resolve) => service.on('exit', (code, signal) => resolve({ code, signal })));
  service.on('exit', (code, signal) => {
    if (!stopping) fail(`the service exited early (code ${code}, signal ${signal})`);
  });

  // /health answers once the engine, the database and the HTTP server are up.
  let health;
  for (const deadline = Date.now() + START_TIMEOUT_MS; ; ) {
    try {
      const r = await fetch(`${base}/health`, { signal: AbortSignal.timeout(5000) });
      if (r.ok) {
        health = await r.json();
        break;
      }
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) fail(`no healthy /health within ${START_TIMEOUT_MS / 1000} s`);
    await sleep(500);
  }
  say(`healthy: providers ${JSON.stringify(health.engine.providers)}, detector ${health.engine.detector}, recogniser ${health.engine.recognizer}`);
  for (const line of log.split('\n')) {
    if (line.includes('execution providers')) say(`engine log: ${line.trim()}`);
  }

  // The image's HEALTHCHECK command, run as Docker would (same environment, PORT included).
  if (process.env.SMOKE_HEALTHCHECK) {
    const [hc, ...hcArgs] = JSON.parse(process.env.SMOKE_HEALTHCHECK);
    const r = spawnSync(hc, hcArgs, { env: { ...process.env, PORT: String(port) }, timeout: 10_000 });
    if (r.status !== 0) fail(`the HEALTHCHECK command exited with ${r.status}: ${hc} ${hcArgs.join(' ')}`);
    say('HEALTHCHECK command: healthy');
  }

  const unauth = await fetch(`${base}/v1/detect/`, { method: 'POST' });
  if (unauth.status !== 401) fail(`detect without a token answered ${unauth.status}, expected 401`);

  const form = new FormData();
  form.append('photo', new Blob([readFileSync(PHOTO)], { type: 'image/jpeg' }), path.basename(PHOTO));
  form.append('age', 'true');
  form.append('gender', 'true');
  form.append('emotions', 'true');
  const started = Date.now();
  const r = await fetch(`${base}/v1/detect/`, { method: 'POST', headers: { Authorization: `Token ${token}` }, body: form });
  const text = await r.text();
  if (r.status !== 200) fail(`detect answered ${r.status}: ${text.slice(0, 500)}`);
  const { faces } = JSON.parse(text);
  if (!Array.isArray(faces) || faces.length !== EXPECTED_FACES) {
    fail(`detect found ${faces?.length} faces on ${path.basename(PHOTO)}, expected ${EXPECTED_FACES}: ${text.slice(0, 500)}`);
  }
  for (const f of faces) {
    const ok =
      [f.x1, f.y1, f.x2, f.y2].every(Number.isInteger) && f.x2 > f.x1 && f.y2 > f.y1 &&
      Number.isInteger(f.age) && ['male', 'female'].includes(f.gender) && Array.isArray(f.emotions) && f.emotions.length === 7;
    if (!ok) fail(`detect answered a malformed face: ${JSON.stringify(f)}`);
  }
  say(`detect: ${faces.length} faces on ${path.basename(PHOTO)} in ${Date.now() - started} ms, first ${JSON.stringify(faces[0])}`);

  // /metrics with the operator token: the detect above is counted, and its detector run recorded.
  const m = await fetch(`${base}/metrics`, { headers: { Authorization: `Token ${token}` } });
  const exposition = await m.text();
  if (m.status !== 200) fail(`/metrics answered ${m.status}: ${exposition.slice(0, 300)}`);
  const series = (name) => Number(exposition.split('\n').find((l) => l.startsWith(`${name} `))?.split(' ')[1] ?? NaN);
  const detects = series('face_http_requests_total{method="POST",route="/v1/detect/",status="200"}');
  const detectorRuns = series(`face_engine_inference_seconds_count{model="${health.engine.detector}"}`);
  if (detects !== 1 || !(detectorRuns >= 1)) fail(`/metrics counted ${detects} detects and ${detectorRuns} detector runs, expected 1 and at least 1`);
  say(`/metrics: 1 detect counted, ${detectorRuns} detector run(s) recorded`);

  stopping = true;
  service.kill('SIGTERM');
  const stopTimer = setTimeout(() => fail('the service did not stop within 60 s of SIGTERM'), 60_000);
  const { code, signal } = await exited;
  clearTimeout(stopTimer);
  if (code !== 0) fail(`the service exited with code ${code}, signal ${signal} after SIGTERM`);
  say('stopped cleanly after SIGTERM');
  rmSync(dataDir, { recursive: true, force: true });
  say('PASS');
}

let stopping = false;
main().catch((err) => fail(err?.stack ?? String(err)));
