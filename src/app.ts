/**
 * The composition root: one starter per FACE_ROLE, each in app/. `startServer`
 * serves the API with the search shards in this process (all) or on shard
 * servers (api); `startShardServer` serves a shard server, which runs no
 * models; `startCameraWorker` reads cameras and writes their sightings to an
 * API node. What they share (listening with the configured limits, the
 * service's version) is app/serve.ts; the search tier of each role is opened
 * by search/open.ts.
 */
export { startServer, type RunningServer, type StartOptions } from './app/api-server.js';
export { startCameraWorker, type RunningCameraWorker } from './app/camera-worker.js';
export { startShardServer, type RunningShardServer } from './app/shard-server.js';
