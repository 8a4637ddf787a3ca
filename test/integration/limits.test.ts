/**
 * The face database at its limits, end to end (real server, PostgreSQL,
 * engine and shards): writes while the search index cannot serve them,
 * slow listing readers, a gallery of 100,000 faces, and requests refused
 * before they reach the database or the network.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/app.js';
import { lastPosition } from '../../src/db/change-log.js';
import { STREAM_POOL } from '../../src/db/client.js';
import { floatsToBytes } from '../../src/db/embedding.js';
import { loadConfig } from '../../src/config/index.js';
import { createLogger } from '../../src/log.js';
import { engineOptionsFrom, openEngine, type Engine } from '../../src/native/engine.js';
import { freshDatabase, type TestDatabase } from '../harness/database.js';
import { form, sample } from '../harness/images.js';
import { request, TEST_RECOGNIZER } from '../harness/service.js';

const SHARDS = 4;
const TOKEN = 'limits-operator';
const BOX = '[[40,40,160,170]]';
/** The main pool, smaller than the number of slow readers below: without a pool of their own they would take it all. */
const MAIN_POOL = 3;

let tdb: TestDatabase;
let dir: string;
let engine: Engine;
let server: RunningServer;
let base: string;

const call = (method: string, url: string, body?: FormData | object) => request(base, method, url, body, { Authorization: `Token ${TOKEN}` });
const enrol = (fields: Record<string, string | Buffer>) => call('POST', '/v0/face/', form({ bbox: BOX, ...fields }));

beforeAll(async () => {
  tdb = await freshDatabase({ max: MAIN_POOL });
  dir = await mkdtemp(path.join(os.tmpdir(), 'face-limits-'));
  const config = loadConfig({ ...TEST_RECOGNIZER, PORT: '0', HOST: '127.0.0.1', FACE_DATA_DIR: dir, FACE_SHARDS: String(SHARDS), FACE_TOKEN: TOKEN, LOG_LEVEL: 'silent' });
  engine = await openEngine(engineOptionsFrom(config));
  server = await startServer({ config, engine, db: tdb.db, log: createLogger(process.env.TEST_LOG ? 'warn' : 'silent') });
  base = `http://127.0.0.1:${server.port}`;
}, 120_000);

afterAll(async () => {
  await server?.close();
  await tdb?.drop();
  await rm(dir, { recursive: true, force: true });
});

/** The photo all faces inserted for a gallery share (no blob: only the row matters here). */
const photoOf = (gallery: string) => (gallery === 'huge' ? 'f' : 'e').repeat(64);

/** Faces written straight into the tables (not through the engine), in `gallery`; logged for the index when `indexed`. */
async function insertFaces(n: number, gallery: string, indexed: boolean): Promise<void> {
  const sql = tdb.db.owner;
  const { dim, recognizer } = engine.info();
  const hash = photoOf(gallery);
  await sql`INSERT INTO photos (hash, size, content_type) VALUES (${hash}, 1, 'image/jpeg') ON CONFLICT DO NOTHING`;
  await sql`INSERT INTO galleries (tenant_id, name) VALUES (1, ${gallery}) ON CONFLICT DO NOTHING`;
  const chunk = 5_000;
  for (let done = 0; done < n; done += chunk) {
    const count = Math.min(chunk, n - done);
    // Distinct unit vectors, so the shards index them as they would real faces.
    const vectors = Array.from({ length: count }, (_, k) => {
      const v = Float32Array.from({ length: dim }, (_, i) => Math.sin((done + k + 1) * (i + 1) * 0.7391));
      const norm = Math.hypot(...v);
      return floatsToBytes(v.map((x) => x / norm)).toString('hex');
    });
    await sql.begin(async (tx) => {
      const ids = await tx`
        INSERT INTO faces (tenant_id, meta, photo_hash, x1, y1, x2, y2, dim, embedding, model)
        SELECT 1, ${gallery}, ${hash}, 0, 0, 10, 10, ${dim}, decode(e, 'hex'), ${recognizer} FROM unnest(${vectors}::text[]) AS e
        RETURNING id`;
      await tx`INSERT INTO face_galleries (face_id, tenant_id, gallery) SELECT unnest(${ids.map((r) => r.id as string)}::bigint[]), 1, ${gallery}`;
      if (indexed) {
        await tx`SELECT pg_advisory_xact_lock(${0x66636c67})`;
        await tx`INSERT INTO face_changes (face_id, op) SELECT unnest(${ids.map((r) => r.id as string)}::bigint[]), 'upsert'`;
      }
    });
  }
}

/** Faces held by the search shards, all states. */
const shardFaces = async (): Promise<number> =>
  (await call('GET', '/v0/admin/shards')).json.shards.reduce((n: number, s: { size: number }) => n + s.size, 0);

describe('writes while the search index cannot serve them', () => {
  it('are stored and answered with X-Index-Lag while a shard is out of search, and without it once back', async () => {
    expect((await call('POST', '/v0/admin/shards/2/offline')).status).toBe(200);
    try {
      const added = await enrol({ photo: sample(2), meta: 'lagging' });
      expect(added.status).toBe(200);
      expect(added.headers.get('x-index-lag')).toBe(`1/${SHARDS}`);
      const id = added.json.results[0].id as number;
      // Stored all the same.
      expect((await call('GET', `/v0/face/id/${id}/`)).status).toBe(200);
      const moved = await call('PUT', `/v0/face/id/${id}/`, { meta: 'renamed' });
      // A meta change logs nothing for search, so there is nothing to lag.
      expect(moved.status).toBe(200);
      expect(moved.headers.get('x-index-lag')).toBeNull();
      expect((await call('POST', '/v0/galleries/lag/')).status).toBe(201);
      const regrouped = await call('PUT', `/v0/face/id/${id}/`, { galleries: { add: ['lag'] } });
      expect(regrouped.headers.get('x-index-lag')).toBe(`1/${SHARDS}`);
      // A delete is served by every shard that applied it: one out of search shows nothing anyway.
      const gone = await call('DELETE', `/v0/face/id/${id}/`);
      expect(gone.status).toBe(204);
      expect(gone.headers.get('x-index-lag')).toBeNull();
    } finally {
      expect((await call('POST', '/v0/admin/shards/2/online')).status).toBe(200);
    }
    const added = await enrol({ photo: sample(2), meta: 'caught-up' });
    expect(added.status).toBe(200);
    expect(added.headers.get('x-index-lag')).toBeNull();
    // Searchable as soon as it is answered.
    const found = await call('POST', '/v0/identify/', form({ photo: sample(2), x1: '40', y1: '40', x2: '160', y2: '170', threshold: 'none' }));
    const [matches] = Object.values(found.json.results) as { face: { id: number } }[][];
    expect(matches[0].face.id).toBe(added.json.results[0].id);
  });
});

describe('requests refused before the database or the network', () => {
  it('a meta or gallery with a NUL is 400 before any query, not a broken 200', async () => {
    for (const url of ['/v0/face/meta/%00/', '/v0/face/meta/a%00b/', '/v0/face/gallery/default/meta/%00/', '/v0/faces/gallery/%00/', '/v0/meta/gallery/a%00/']) {
      const r = await call('GET', url);
      expect(r.status, url).toBe(400);
      expect(r.json, url).toMatchObject({ code: 400, error: 'BAD_PARAM' });
    }
  });

  it('a photo URL without a host spelled out is 400 naming the photo', async () => {
    for (const photo of ['http:///a.jpg', 'http:a.jpg']) {
      const r = await call('POST', '/v0/detect/'.replace('v0', 'v1'), { photo });
      expect(r.status, photo).toBe(400);
      expect(r.json, photo).toMatchObject({ error: 'BAD_PARAM', param: 'photo' });
    }
  });
});

/** A GET whose answer is read only up to its first bytes, then left unread: a client on a very slow link. */
function slowReader(url: string): Promise<http.ClientRequest> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${base}${url}`, { headers: { Authorization: `Token ${TOKEN}` } }, (res) => {
      res.once('data', () => {
        res.pause();
        resolve(req);
      });
    });
    req.on('error', reject);
  });
}

const listingBackends = async () => {
  const [r] = await tdb.db.owner`
    SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'face-service-listings[%'`;
  return r.n as number;
};

describe('slow listing readers', () => {
  it('hold listing connections only: more of them than the listing pool leave every other route answering', { timeout: 120_000 }, async () => {
    // Enough rows that an unread answer fills the socket buffers long before the cursor is done.
    await insertFaces(60_000, 'bulk', false);
    const readers = STREAM_POOL + MAIN_POOL;
    const [{ id: someFace }] = await tdb.db.owner`SELECT max(id)::int AS id FROM faces`;
    const slow = await Promise.all(Array.from({ length: STREAM_POOL }, () => slowReader('/v0/faces/gallery/bulk/')));
    // The rest queue for the listing pool; their 200 is not even sent.
    const queued = Array.from({ length: readers - STREAM_POOL }, () => http.get(`${base}/v0/faces/gallery/bulk/`, { headers: { Authorization: `Token ${TOKEN}` } }).on('error', () => {}));
    try {
      // The answers' first bytes go out before their cursors open; wait until every listing connection is taken.
      for (let i = 0; (await listingBackends()) < STREAM_POOL; i++) {
        expect(i).toBeLessThan(100);
        await new Promise((res) => setTimeout(res, 100));
      }
      expect(await listingBackends()).toBe(STREAM_POOL);
      const t0 = Date.now();
      const answers = await Promise.all([
        call('GET', '/v0/galleries/'),
        call('GET', `/v0/face/id/${someFace}/`),
        call('POST', '/v0/galleries/during-slow-readers/'),
        call('PUT', `/v0/face/id/${someFace}/`, { meta: 'during-slow-readers' }),
      ]);
      expect(answers.map((a) => a.status)).toEqual([200, 200, 201, 200]);
      expect(Date.now() - t0).toBeLessThan(15_000);
    } finally {
      for (const r of [...slow, ...queued]) r.destroy();
    }
    // Hanging up releases the cursors: listings answer again.
    for (let i = 0; ; i++) {
      const r = await call('GET', '/v0/faces/?limit=1');
      if (r.status === 200 && r.json.results.length === 1) break;
      expect(i).toBeLessThan(50);
      await new Promise((res) => setTimeout(res, 100));
    }
  });
});

describe('a gallery of 100,000 faces', () => {
  it('is deleted in one request, with every face logged for the index and gone from the shards', { timeout: 600_000 }, async () => {
    const N = 100_000;
    const sync = server.sync!;
    // A face outside the gallery, which must outlive its deletion.
    await insertFaces(1, 'bystander', true);
    const [{ id: kept }] = await tdb.db.owner`SELECT max(id)::int AS id FROM faces`;
    expect(await sync.caughtUp(await lastPosition(tdb.db.sql), 60_000)).toBe(true);
    const before = await shardFaces();
    // All of them logged as upserts: the shards hold them before the delete, as they would after enrolment.
    await insertFaces(N, 'huge', true);
    expect(await sync.caughtUp(await lastPosition(tdb.db.sql), 300_000)).toBe(true);
    expect((await shardFaces()) - before).toBe(N);
    const from = await lastPosition(tdb.db.sql);

    const t0 = Date.now();
    const r = await call('DELETE', '/v0/galleries/huge/');
    expect(r.status).toBe(204);
    const answeredMs = Date.now() - t0;

    const [left] = await tdb.db.owner`
      SELECT (SELECT count(*) FROM faces WHERE meta = 'huge')::int AS faces,
             (SELECT count(*) FROM face_galleries WHERE gallery = 'huge')::int AS members,
             (SELECT count(*) FROM galleries WHERE name = 'huge')::int AS galleries`;
    expect(left).toEqual({ faces: 0, members: 0, galleries: 0 });
    // One delete per face, at consecutive positions right after the log's end before the request.
    const [log] = await tdb.db.owner`
      SELECT count(*)::int AS n, min(position)::bigint AS lo, max(position)::bigint AS hi, bool_and(op = 'delete') AS deletes
      FROM face_changes WHERE position > ${from}`;
    expect({ ...log, lo: Number(log.lo), hi: Number(log.hi) }).toEqual({ n: N, lo: from + 1, hi: from + N, deletes: true });
    // Answered without a lag header only if the shards had applied all of it.
    if (r.headers.get('x-index-lag') === null) expect(sync.position()).toBeGreaterThanOrEqual(from + N);
    expect(await sync.caughtUp(from + N, 300_000)).toBe(true);
    expect(await shardFaces()).toBe(before);
    expect((await call('GET', `/v0/face/id/${kept}/`)).status).toBe(200);
    // The photo every face shared is collected with them.
    expect((await call('GET', `/v0/photo/${photoOf('huge')}/`)).status).toBe(404);
    console.log(`deleted a gallery of ${N} faces in ${answeredMs} ms (index lag: ${r.headers.get('x-index-lag') ?? 'none'})`);
  });
});
