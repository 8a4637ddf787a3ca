/**
 * The HTTP peer: GET /v0/face/id/<id>/ on plain node:http, with the service's
 * own token check, query and rendering (imported from src/), reading the same
 * PostgreSQL rows. What differs from the service is only the HTTP layer, so
 * comparing the two measures uWebSockets.js + our router against node:http.
 *
 *   PORT=… DATABASE_URL=… FACE_TOKEN=… node dist/bench/peers/node-http.js
 */
import http from 'node:http';
import { StaticTokenVerifier, tokenFromHeader } from '../../src/auth.js';
import { loadConfig } from '../../src/config.js';
import { connect } from '../../src/db/client.js';
import { FaceStore } from '../../src/db/face-store.js';
import { createLogger } from '../../src/log.js';
import { baseUrl, renderFace } from '../../src/routes/face-view.js';
import { PhotoBlobs } from '../../src/services/photo-blobs.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is required');
const config = loadConfig();
const log = createLogger('silent');
const db = connect({ url, max: config.dbPool });
const store = new FaceStore(db.sql, new PhotoBlobs(config.dataDir), log);
const verifier = new StaticTokenVerifier(process.env.FACE_TOKEN);
const route = /^\/v0\/face\/id\/(\d+)\/?$/;

function send(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

const server = http.createServer(async (req, res) => {
  try {
    if (req.url === '/health') return send(res, 200, { status: 'ok' });
    const m = route.exec(req.url ?? '');
    if (req.method !== 'GET' || !m) return send(res, 404, { error: { code: 'NOT_FOUND' } });
    const token = tokenFromHeader(req.headers.authorization);
    if (!token || !(await verifier.verify(token))) return send(res, 401, { error: { code: 'AUTH_FAILED' } });
    const face = await store.getFace(Number(m[1]));
    if (!face) return send(res, 404, { error: { code: 'NOT_FOUND' } });
    send(res, 200, renderFace(face, baseUrl(req.headers as Record<string, string>)));
  } catch {
    send(res, 500, { error: { code: 'INTERNAL' } });
  }
});
server.keepAliveTimeout = 10_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
const stop = () => server.close(() => void db.close().then(() => process.exit(0)));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
