/**
 * One face pipeline (detection + one descriptor per face) over the six demo
 * photos, in a process of its own so that the TFJS peers' global state and
 * ours never share an address space or a thread pool:
 *
 *   node dist/bench/peers/engines.js <ours|face-api|human> [--rounds N] [--inflight K]
 *
 * Prints one JSON line. Times run from JPEG bytes to descriptors: the peers
 * decode with jpeg-js (they have no decoder of their own in Node without
 * tfjs-node), ours inside the addon; the peers' decode share is reported too.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { isTfjsModel, readManifest, sourceDir, verifySources } from '../../models/prepare.js';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import { engineOptionsFrom, openEngine } from '../../src/native/engine.js';

const root = findProjectRoot();
const require = createRequire(import.meta.url);
const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const photos = [1, 2, 3, 4, 5, 6].map((i) => readFileSync(path.join(root, 'node_modules/@vladmandic/face-api/demo', `sample${i}.jpg`)));

interface Pipeline {
  version: string;
  backend: string;
  /** Faces found and descriptor length for one photo. */
  run(photo: Buffer): Promise<{ faces: number; dim: number; decodeMs: number }>;
  close(): void;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

function decodeJpeg(photo: Buffer): { data: Uint8Array; width: number; height: number; ms: number } {
  const jpeg = require('jpeg-js') as Any;
  const t = performance.now();
  const img = jpeg.decode(photo, { useTArray: true, formatAsRGBA: false });
  return { data: img.data, width: img.width, height: img.height, ms: performance.now() - t };
}

async function ours(): Promise<Pipeline> {
  const config = loadConfig();
  const engine = await openEngine(engineOptionsFrom(config));
  const info = engine.info();
  return {
    version: `addon ${info.recognizer} ${info.dim}-d, ${info.providers.join(',')}, ${info.simd}, ${config.inferenceWorkers} workers x ${config.intraThreads} threads`,
    backend: 'onnxruntime',
    async run(photo) {
      const a = await engine.analyze(photo, { embed: true, age: false, gender: false, emotions: false });
      return { faces: a.faces.length, dim: a.dim, decodeMs: 0 };
    },
    close: () => engine.close(),
  };
}

async function faceApi(): Promise<Pipeline> {
  const faceapi = require(path.join(root, 'node_modules/@vladmandic/face-api/dist/face-api.node-wasm.js')) as Any;
  const tf = faceapi.tf;
  await tf.setBackend('wasm');
  await tf.ready();
  const dir = path.join(root, 'node_modules/@vladmandic/face-api/model');
  await faceapi.nets.ssdMobilenetv1.loadFromDisk(dir);
  await faceapi.nets.faceLandmark68Net.loadFromDisk(dir);
  await faceapi.nets.faceRecognitionNet.loadFromDisk(dir);
  const options = new faceapi.SsdMobilenetv1Options({ minConfidence: 0.5, maxResults: 100 });
  return {
    version: `face-api ${faceapi.version}, tfjs ${tf.version_core}`,
    backend: tf.getBackend(),
    async run(photo) {
      const img = decodeJpeg(photo);
      const t = tf.tensor3d(img.data, [img.height, img.width, 3], 'int32');
      // Landmarks are part of face-api's descriptor path: it aligns the crop with them.
      const faces = await faceapi.detectAllFaces(t, options).withFaceLandmarks().withFaceDescriptors();
      t.dispose();
      return { faces: faces.length, dim: faces[0]?.descriptor.length ?? 0, decodeMs: img.ms };
    },
    close: () => undefined,
  };
}

async function human(): Promise<Pipeline> {
  // Human fetches its models by URL; Node's fetch has no file: scheme, so serve those from disk.
  const realFetch = globalThis.fetch;
  globalThis.fetch = (async (input: Any, init?: Any) => {
    const u = String(input?.url ?? input);
    if (u.startsWith('file://')) return new Response(new Uint8Array(readFileSync(new URL(u))));
    return realFetch(input, init);
  }) as typeof fetch;
  // Human reads the TF.js originals that `npm run models -- --all` keeps (models/npm/).
  const originals = readManifest(root).models.filter(isTfjsModel).filter((m) => m.id === 'blazeface-back' || m.id === 'faceres');
  for (const m of originals) verifySources(root, m);
  const H = require(path.join(root, 'node_modules/@vladmandic/human/dist/human.node-wasm.js')) as Any;
  const h = new H.Human({
    backend: 'wasm',
    wasmPath: `${path.join(root, 'node_modules/@tensorflow/tfjs-backend-wasm/dist')}/`,
    modelBasePath: `file://${path.join(sourceDir(root, originals[0]), 'models')}/`,
    debug: false,
    cacheSensitivity: 0,
    // The same detector and recogniser files our ONNX models are converted from.
    face: {
      enabled: true,
      detector: { modelPath: 'blazeface-back.json', maxDetected: 50, rotation: false },
      mesh: { enabled: false },
      iris: { enabled: false },
      emotion: { enabled: false },
      description: { enabled: true, modelPath: 'faceres.json' },
      antispoof: { enabled: false },
      liveness: { enabled: false },
      attention: { enabled: false },
    },
    body: { enabled: false },
    hand: { enabled: false },
    object: { enabled: false },
    gesture: { enabled: false },
    segmentation: { enabled: false },
    filter: { enabled: false },
  });
  await h.load();
  await h.tf.ready();
  return {
    version: `human ${h.version}, tfjs ${h.tf.version_core}`,
    backend: h.tf.getBackend(),
    async run(photo) {
      const img = decodeJpeg(photo);
      const t = h.tf.tensor3d(img.data, [img.height, img.width, 3], 'int32');
      const r = await h.detect(t);
      h.tf.dispose(t);
      if (r.error) throw new Error(`human: ${r.error}`);
      return { faces: r.face.length, dim: r.face[0]?.embedding?.length ?? 0, decodeMs: img.ms };
    },
    close: () => undefined,
  };
}

async function main() {
  const which = process.argv[2];
  const rounds = arg('rounds', 2);
  const inflight = arg('inflight', 1);
  const open = { ours, 'face-api': faceApi, human }[which ?? ''];
  if (!open) throw new Error('usage: engines.js <ours|face-api|human> [--rounds N] [--inflight K]');
  const t0 = performance.now();
  const p = await open();
  const loadS = (performance.now() - t0) / 1000;
  // One untimed pass: first calls compile kernels and size buffers.
  const perPhoto: number[] = [];
  for (const photo of photos) perPhoto.push((await p.run(photo)).faces);
  let decodeMs = 0;
  let dim = 0;
  let next = 0;
  const total = rounds * photos.length;
  const start = performance.now();
  const worker = async () => {
    while (next < total) {
      const r = await p.run(photos[next++ % photos.length]);
      decodeMs += r.decodeMs;
      dim = r.dim;
    }
  };
  await Promise.all(Array.from({ length: inflight }, worker));
  const seconds = (performance.now() - start) / 1000;
  p.close();
  console.log(
    JSON.stringify({
      pipeline: which,
      version: p.version,
      backend: p.backend,
      inflight,
      images: total,
      facesPerPhoto: perPhoto,
      dim,
      loadS,
      seconds,
      imagesPerS: total / seconds,
      msPerImage: (seconds * 1000) / total,
      decodeMsPerImage: decodeMs / total,
    }),
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
