/**
 * Stored faces survive a recogniser switch: faces enrolled under faceres are
 * re-embedded from their stored photos when the service starts with the
 * default recogniser, searchable again once that is done, and a SIGKILL in
 * the middle loses nothing (the next start continues). Faces enrolled under
 * `sface` move to the `accurate` mode (two models, a 256-d vector) the same
 * way.
 *
 * The real server, a real PostgreSQL and the real models. To hold the
 * migration at a known point, the test locks one face row: the migration's
 * transaction for that face's batch waits on it, the way it would behind any
 * slow writer.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/app.js';
import { findProjectRoot, loadConfig } from '../../src/config/index.js';
import type { Sql } from '../../src/db/client.js';
import { createLogger } from '../../src/log.js';
import { engineOptionsFrom, openEngine } from '../../src/native/engine.js';
import { PhotoBlobs } from '../../src/db/photos.js';
import { freshDatabase, type TestDatabase } from '../harness/database.js';
import { form, sample } from '../harness/images.js';
import { buildDist, startProcess, type ServiceProcess } from '../harness/process.js';
import { request, TOKEN } from '../harness/service.js';
import { until } from '../harness/until.js';

const SHARDS = 4;
/** The recogniser a fresh install runs: the manifest's default. The faces are enrolled with faceres. */
const TARGET: string = JSON.parse(readFileSync(path.join(findProjectRoot(), 'models/manifest.json'), 'utf8')).defaults.recognizer;
const auth = { Authorization: `Token ${TOKEN}` };

interface Enrolled {
  id: number;
  photo: Buffer;
  box: number[];
  photo_hash: string;
}

const call = (base: string, method: string, url: string, body?: FormData | object) => request(base, method, url, body, auth);

/** Identify with the face's own box, so detection is skipped. */
function identify(base: string, photo: Buffer, box: number[], extra: Record<string, string> = {}) {
  const [x1, y1, x2, y2] = box.map(String);
  return call(base, 'POST', '/v0/identify/', form({ photo, x1, y1, x2, y2, threshold: '0', ...extra }));
}

/** Adds the faces of `photo` (detected, or at `boxes`); returns them with what finding them again needs. */
async function enrol(base: string, photo: Buffer, meta: string, boxes?: number[][]): Promise<Enrolled[]> {
  const fields: Record<string, string | Buffer> = boxes ? { photo, meta, bbox: JSON.stringify(boxes) } : { photo, meta, mf_selector: 'all' };
  const r = await call(base, 'POST', '/v0/face/', form(fields));
  expect(r.status, r.text).toBe(200);
  return r.json.results.map((f: any) => ({ id: f.id, photo, box: [f.x1, f.y1, f.x2, f.y2], photo_hash: f.photo_hash }));
}

async function health(base: string) {
  const r = await call(base, 'GET', '/health');
  expect(r.status).toBe(200);
  return r.json;
}

const migrationDone = (base: string) => until('the migration to finish', async () => ((await health(base)).migration?.state === 'done' ? true : undefined));

/** Identify's first match for the face with its own photo and box, and the X-Live-Servers header. */
async function firstMatch(base: string, f: Enrolled): Promise<{ id?: number; live: string | null }> {
  const r = await identify(base, f.photo, f.box);
  expect(r.status, r.text).toBe(200);
  const [matches] = Object.values(r.json.results) as any[][];
  return { id: matches[0]?.face.id, live: r.headers.get('x-live-servers') };
}

/** Every face is found again as its own first match, with every shard live. */
async function expectAllFound(base: string, faces: Enrolled[]) {
  for (const f of faces) expect(await firstMatch(base, f), `face ${f.id}`).toEqual({ id: f.id, live: `${SHARDS}/${SHARDS}` });
}

/** Holds a row lock on one face until the returned function is called. */
async function lockFace(sql: Sql, id: number): Promise<() => Promise<void>> {
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let locked!: () => void;
  const isLocked = new Promise<void>((r) => (locked = r));
  const tx = sql.begin(async (t) => {
    await t`SELECT id FROM faces WHERE id = ${id} FOR UPDATE`;
    locked();
    await released;
  });
  await isLocked;
  return async () => {
    release();
    await tx;
  };
}

async function modelsOf(sql: Sql): Promise<Map<number, string>> {
  return new Map((await sql`SELECT id, model FROM faces ORDER BY id`).map((r) => [Number(r.id), r.model as string]));
}

describe(`switching the recogniser from faceres to ${TARGET}`, () => {
  let tdb: TestDatabase;
  let dir: string;
  let server: RunningServer | undefined;

  async function start(recognizer: string): Promise<string> {
    const config = loadConfig({
      PORT: '0',
      HOST: '127.0.0.1',
      FACE_TOKEN: TOKEN,
      FACE_DATA_DIR: dir,
      FACE_SHARDS: String(SHARDS),
      FACE_RECOGNIZER: recognizer,
    });
    const engine = await openEngine(engineOptionsFrom(config));
    server = await startServer({ config, engine, db: tdb.db, log: createLogger('silent') });
    return `http://127.0.0.1:${server.port}`;
  }

  async function stop(): Promise<void> {
    await server?.close();
    server = undefined;
  }

  beforeAll(async () => {
    tdb = await freshDatabase();
    dir = await mkdtemp(path.join(os.tmpdir(), 'face-migration-'));
  });

  afterAll(async () => {
    await stop();
    await tdb?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('re-embeds stored faces, answers from the migrated ones meanwhile, and records photos it cannot use', { timeout: 300_000 }, async () => {
    let base = await start('faceres');
    expect((await health(base)).migration).toBeUndefined();
    const kept = [...(await enrol(base, sample(1), 'one')), ...(await enrol(base, sample(2), 'two')), ...(await enrol(base, sample(4), 'four'))];
    const lost = await enrol(base, sample(3), 'three');
    await stop();
    // A photo file gone from disk: its faces cannot be re-embedded.
    await new PhotoBlobs(path.join(dir, 'photos')).remove(lost[0].photo_hash);

    const first = Math.min(...kept.map((f) => f.id), ...lost.map((f) => f.id));
    const release = await lockFace(tdb.db.owner, first);
    try {
      base = await start(TARGET);
      const total = kept.length + lost.length;
      const h = await health(base);
      expect(h.engine.recognizer).toBe(TARGET);
      expect(h.migration).toEqual({ state: 'running', from: ['faceres'], to: TARGET, done: 0, failed: 0, total });
      expect(h.search).toMatchObject({ live: 0, total: SHARDS });

      const strict = await identify(base, kept[0].photo, kept[0].box, { strict: 'true' });
      expect(strict.status).toBe(503);
      expect(strict.json.error).toBe('SHARDS_UNAVAILABLE');
      expect(strict.headers.get('x-live-servers')).toBe(`0/${SHARDS}`);

      // Faces added now are embedded by the new recogniser and found at once; the old ones are not, yet.
      const fresh = await enrol(base, sample(5), 'five');
      expect(await firstMatch(base, fresh[0])).toEqual({ id: fresh[0].id, live: `0/${SHARDS}` });
      const old = await firstMatch(base, kept[0]);
      expect(old.live).toBe(`0/${SHARDS}`);
      expect(fresh.map((f) => f.id)).toContain(old.id);
    } finally {
      await release();
    }

    await migrationDone(base);
    expect((await health(base)).migration).toEqual({ state: 'done', from: ['faceres'], to: TARGET, done: kept.length, failed: lost.length, total: kept.length + lost.length });
    await expectAllFound(base, kept);
    // The faces whose photo is gone are kept, with the reason, and not searched.
    for (const f of lost) expect((await call(base, 'GET', `/v0/face/id/${f.id}/`)).status).toBe(200);
    const failures = await tdb.db.owner`SELECT face_id, model, reason FROM reembed_failures ORDER BY face_id`;
    expect(failures.map((r) => Number(r.face_id))).toEqual(lost.map((f) => f.id).sort((a, b) => a - b));
    for (const r of failures) expect(r).toMatchObject({ model: TARGET, reason: expect.stringMatching(/^PHOTO_MISSING: /) });

    // The next start tries them no more: the failures are reported, the shards are live.
    await stop();
    base = await start(TARGET);
    expect((await health(base)).migration).toMatchObject({ state: 'done', failed: lost.length });
    await expectAllFound(base, kept);
    const models = await modelsOf(tdb.db.owner);
    for (const f of lost) expect(models.get(f.id)).toBe('faceres');
    await stop();
  });
});

describe('a migration killed half-way', () => {
  let tdb: TestDatabase;
  let dir: string;
  let service: ServiceProcess | undefined;
  const env = (recognizer: string): NodeJS.ProcessEnv => ({
    ...process.env,
    DATABASE_URL: tdb.url,
    FACE_DATA_DIR: dir,
    FACE_TOKEN: TOKEN,
    FACE_SHARDS: String(SHARDS),
    FACE_RECOGNIZER: recognizer,
    FACE_INFERENCE_WORKERS: '1',
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
  });

  beforeAll(async () => {
    await buildDist();
    tdb = await freshDatabase();
    dir = await mkdtemp(path.join(os.tmpdir(), 'face-migration-kill-'));
  });

  afterAll(async () => {
    service?.child.kill('SIGKILL');
    await service?.exited;
    await tdb?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('resumes after SIGKILL and ends with every face at the new recogniser', { timeout: 300_000 }, async () => {
    service = await startProcess(env('faceres'));
    // 40 faces, each on a photo of its own (the demo photos with a suffix), so the migration runs in several batches.
    const boxes: number[][][] = [];
    for (let s = 1; s <= 6; s++) {
      const r = await call(service.base, 'POST', '/v1/detect/', form({ photo: sample(s) }));
      expect(r.status).toBe(200);
      boxes.push(r.json.faces.map((f: any) => [f.x1, f.y1, f.x2, f.y2]));
    }
    const faces: Enrolled[] = [];
    for (let k = 0; faces.length < 40; k++) {
      const s = k % 6;
      const photo = Buffer.concat([sample(s + 1), Buffer.from(`migration-${k}`)]);
      faces.push(...(await enrol(service.base, photo, `m${k}`, [boxes[s][Math.floor(k / 6) % boxes[s].length]])));
    }
    service.child.kill('SIGTERM');
    expect(await service.exited).toBe(0);
    const ids = faces.map((f) => f.id);

    // Batch one (16 faces) commits; batch two waits on the locked face, and the service dies inside it.
    const release = await lockFace(tdb.db.owner, ids[20]);
    try {
      service = await startProcess(env(TARGET));
      await until('the first batch', async () => ((await health(service!.base)).migration?.done === 16 ? true : undefined));
      await until('the second batch to wait on the lock', async () => {
        const [w] = await tdb.db.owner`
          SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND application_name LIKE 'face-service[%' AND wait_event_type = 'Lock'`;
        return w.n > 0 ? true : undefined;
      });
      expect((await health(service.base)).migration).toMatchObject({ state: 'running', done: 16, total: 40 });
      service.child.kill('SIGKILL');
      await service.exited;
    } finally {
      await release();
    }
    const half = await modelsOf(tdb.db.owner);
    expect([...half.keys()]).toEqual(ids);
    expect([...half.values()].filter((m) => m === TARGET)).toHaveLength(16);

    service = await startProcess(env(TARGET));
    await migrationDone(service.base);
    const started = service.logLines().filter((l) => String(l.msg).startsWith('embedding migration started'));
    expect(started).toHaveLength(1);
    expect(started[0]).toMatchObject({ from: ['faceres'], to: TARGET, done: 16, pending: 24, total: 40 });
    // Logged as the state turns done; the line may reach the pipe just after /health says so.
    await until('the finished line', async () => (service!.output().includes('embedding migration finished') ? true : undefined));
    expect((await health(service.base)).migration).toEqual({ state: 'done', from: ['faceres'], to: TARGET, done: 40, failed: 0, total: 40 });

    const after = await modelsOf(tdb.db.owner);
    expect([...after.keys()]).toEqual(ids);
    expect(new Set(after.values())).toEqual(new Set([TARGET]));
    await expectAllFound(service.base, faces.slice(0, 8));
    service.child.kill('SIGTERM');
    expect(await service.exited).toBe(0);
    service = undefined;
  });
});

describe('switching from sface to the accurate mode', () => {
  let tdb: TestDatabase;
  let dir: string;
  let server: RunningServer | undefined;

  async function start(recognizer: string): Promise<string> {
    const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', FACE_TOKEN: TOKEN, FACE_DATA_DIR: dir, FACE_SHARDS: '2', FACE_RECOGNIZER: recognizer });
    const engine = await openEngine(engineOptionsFrom(config));
    server = await startServer({ config, engine, db: tdb.db, log: createLogger('silent') });
    return `http://127.0.0.1:${server.port}`;
  }

  beforeAll(async () => {
    tdb = await freshDatabase();
    dir = await mkdtemp(path.join(os.tmpdir(), 'face-migration-accurate-'));
  });

  afterAll(async () => {
    await server?.close();
    await tdb?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('re-embeds every face with both models and finds each again', { timeout: 300_000 }, async () => {
    let base = await start('sface');
    const faces = [...(await enrol(base, sample(1), 'one')), ...(await enrol(base, sample(5), 'five'))];
    await server?.close();

    base = await start('accurate');
    const spec = 'sface:mirror+dlib-resnet';
    expect((await health(base)).engine.recognizer).toBe(spec);
    await migrationDone(base);
    expect((await health(base)).migration).toEqual({ state: 'done', from: ['sface'], to: spec, done: faces.length, failed: 0, total: faces.length });
    const rows = await tdb.db.owner`SELECT model, dim, length(embedding) AS bytes FROM faces`;
    expect(rows).toHaveLength(faces.length);
    for (const r of rows) expect(r).toMatchObject({ model: spec, dim: 256, bytes: 1024 });
    for (const f of faces) {
      const r = await identify(base, f.photo, f.box);
      expect(r.status, r.text).toBe(200);
      const [matches] = Object.values(r.json.results) as any[][];
      expect(matches[0].face.id, `face ${f.id}`).toBe(f.id);
      // The stored vector is what the mode computes now: the face matches itself at cosine 1.
      expect(matches[0].confidence).toBeGreaterThan(0.999);
    }
  });
});
