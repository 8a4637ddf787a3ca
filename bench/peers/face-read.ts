/**
 * The one request both HTTP peers serve, GET /v0/face/id/<id>/ with the
 * service's own token check, query and rendering (imported from src/), so
 * that the peers differ from each other and from the service only in their
 * HTTP layer.
 */
import { FIRST_TENANT, StaticTokenVerifier, tokenFromHeader } from '../../src/auth.js';
import { loadConfig } from '../../src/config/index.js';
import { connect } from '../../src/db/client.js';
import { FaceStore } from '../../src/db/faces.js';
import { PhotoBlobs, PhotoStore } from '../../src/db/photos.js';
import { createLogger } from '../../src/log.js';
import { baseUrl, renderFace } from '../../src/routes/face-view.js';

export interface PeerAnswer {
  status: number;
  body: unknown;
}

export interface FaceReader {
  answer(method: string, path: string, authorization: string | undefined, host: string | undefined): Promise<PeerAnswer>;
  close(): Promise<void>;
}

/** Connects to DATABASE_URL and checks tokens against FACE_TOKEN. */
export function openFaceReader(): FaceReader {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is required');
  const config = loadConfig();
  const db = connect({ url, max: config.dbPool });
  const store = new FaceStore(db.sql, new PhotoStore(db.sql, new PhotoBlobs(config.dataDir), createLogger('silent')));
  const verifier = new StaticTokenVerifier(process.env.FACE_TOKEN);
  const route = /^\/v0\/face\/id\/(\d+)\/?$/;
  const notFound = { status: 404, body: { error: { code: 'NOT_FOUND' } } };
  return {
    async answer(method, path, authorization, host) {
      try {
        if (path === '/health') return { status: 200, body: { status: 'ok' } };
        const m = route.exec(path);
        if (method !== 'GET' || !m) return notFound;
        const token = tokenFromHeader(authorization);
        if (!token || !(await verifier.verify(token))) return { status: 401, body: { error: { code: 'AUTH_FAILED' } } };
        const face = await store.getFace({ tenant: FIRST_TENANT }, Number(m[1]));
        if (!face) return notFound;
        return { status: 200, body: renderFace(face, baseUrl({ host: host ?? '' })) };
      } catch {
        return { status: 500, body: { error: { code: 'INTERNAL' } } };
      }
    },
    close: () => db.close(),
  };
}
